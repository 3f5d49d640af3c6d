package envoyrls_test

import (
	"context"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// rawCodec sends and receives messages as bytes: the generated client refuses to marshal a
// string that is not UTF-8, which Envoy (C++ protobuf) sends anyway.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}
func (rawCodec) Name() string { return "proto" }

// rawRequest is RateLimitRequest{domain, descriptors: [{entries: [{key: value}], hits_addend}]},
// encoded by hand.
func rawRequest(domain, key, value string, hits uint64) []byte {
	entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), key)
	entry = protowire.AppendString(protowire.AppendTag(entry, 2, protowire.BytesType), value)
	desc := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), entry)
	if hits > 0 {
		wrapped := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), hits)
		desc = protowire.AppendBytes(protowire.AppendTag(desc, 3, protowire.BytesType), wrapped)
	}
	req := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), domain)
	return protowire.AppendBytes(protowire.AppendTag(req, 2, protowire.BytesType), desc)
}

// TestValuesThatAreNotUTF8AreDecidedNotFailed: Envoy passes a header's Latin-1 bytes on in a
// descriptor value, which Go's protobuf refuses as a whole message. The service still decides
// such a request, under a key with those bytes written %XX, instead of failing the call (which
// Envoy would let through).
func TestValuesThatAreNotUTF8AreDecidedNotFailed(t *testing.T) {
	t.Parallel()
	h := start(t, "sqlite:"+t.TempDir()+"/sluice.db", false)
	h.define(t, "api.user", 10)
	conn, err := grpc.NewClient(h.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	call := func(req []byte) (*rls.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+h.key)
		var out []byte
		if err := conn.Invoke(ctx, rls.RateLimitService_ShouldRateLimit_FullMethodName, req, &out, grpc.ForceCodecV2(rawCodec{})); err != nil {
			return nil, err
		}
		resp := &rls.RateLimitResponse{}
		return resp, proto.Unmarshal(out, resp)
	}
	for i, hits := range []uint64{0, 3} {
		resp, err := call(rawRequest("api", "user", "Espa\xf1a", hits))
		if err != nil || resp.OverallCode != rls.RateLimitResponse_OK {
			t.Fatalf("call %d: %v, %v; want OK", i+1, resp, err)
		}
	}
	if v := h.value(t, "api.user", "Espa%F1a"); v != 6 {
		t.Fatalf("value under Espa%%F1a: %v, want 6 (1 hit, then 3)", v)
	}
	// A message that is not protobuf at all still fails, as it did.
	if _, err := call([]byte{0xff, 0xff, 0xff}); err == nil {
		t.Fatal("garbage was decoded")
	}
}
