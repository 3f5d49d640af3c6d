// Command nethttp is a small web service rate-limited by Sluice with the Go client's net/http
// middleware: every client address may call GET /hello 5 times a minute.
//
// It needs a Sluice server and a tenant's secret key (see examples/README.md):
//
//	SLUICE_SECRET_KEY=sk_live_… go -C examples run ./nethttp
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nethttp:", err)
		os.Exit(1)
	}
}

// limitName is the limit this service uses; run defines it at start-up.
const limitName = "examples.hello"

func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	url, key, addr := getenv("SLUICE_URL"), getenv("SLUICE_SECRET_KEY"), getenv("ADDR")
	if url == "" {
		url = "http://localhost:8080"
	}
	if addr == "" {
		addr = "localhost:8081"
	}
	if key == "" {
		return errors.New("set SLUICE_SECRET_KEY to a tenant's secret key (sk_live_…)")
	}
	// Fail open: when Sluice cannot answer within 500 ms, serve the request anyway.
	client := sluice.New(url, key, sluice.WithTimeout(500*time.Millisecond), sluice.WithFailPolicy(sluice.FailOpen))

	// Define (or redefine) the limit: 5 requests a minute, a token bucket. PUT is idempotent.
	if _, err := client.Put(ctx, limitName, sluice.Definition{Kind: sluice.TokenBucket, Rate: 5, Period: 60_000}); err != nil {
		return fmt.Errorf("define the limit %s: %w", limitName, err)
	}

	byClient, err := sluice.KeyByClientIP() // behind a load balancer: its addresses here
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		res, _ := sluice.ResultFromContext(r.Context())
		fmt.Fprintf(w, "hello, %s (%.0f left this minute)\n", res.Key, res.Remaining)
	})
	limit := sluice.Middleware(client, limitName, sluice.WithKeyFunc(byClient))

	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: limit(mux), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "listening on http://%s (try: curl -i http://%s/hello)\n", l.Addr(), l.Addr())
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
