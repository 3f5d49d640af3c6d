package main

// This file is the load of the grpc-* scenarios: Envoy's ShouldRateLimit through the generated
// client, one gRPC connection per worker.

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcDomain is the domain of the grpc scenarios' requests: a scenario's limit is called
// grpcDomain + "." + its name (docs/envoy.md's mapping, one entry whose key is the name).
const grpcDomain = "bench"

// grpcWork drives ShouldRateLimit on addr until deadline over a connection of its own, one
// random key a call, and records what it saw in w.
func grpcWork(w *worker, addr, secret, name string, sc scenario, r *rand.Rand, deadline time.Time) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		w.errors++
		return
	}
	defer conn.Close()
	client := rls.NewRateLimitServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+secret)
	entry := &rlcommon.RateLimitDescriptor_Entry{Key: name}
	req := &rls.RateLimitRequest{Domain: grpcDomain, Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{entry}}}}
	for time.Now().Before(deadline) {
		k := r.IntN(sc.keys)
		entry.Value = "k" + strconv.Itoa(k)
		t0 := time.Now()
		resp, err := client.ShouldRateLimit(ctx, req)
		w.total++
		if err != nil {
			w.errors++
			if status.Code(err) == codes.Unavailable || status.Code(err) == codes.Internal {
				w.status5xx++
			}
			continue
		}
		w.latencies = append(w.latencies, time.Since(t0))
		if resp.OverallCode == rls.RateLimitResponse_OK {
			w.admitted[k]++
		}
	}
}
