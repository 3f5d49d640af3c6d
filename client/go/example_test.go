package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// The examples are compiled (and kept in step with README.md), not run: they need a server.

func Example() {
	ctx := context.Background()
	c := sluice.New("https://sluice.example.com", os.Getenv("SLUICE_SECRET_KEY"))
	if _, err := c.Put(ctx, "sendMessage", sluice.Definition{Kind: sluice.TokenBucket, Rate: 10, Period: 60_000}); err != nil {
		log.Fatal(err)
	}
	r, err := c.Limit(ctx, "sendMessage", sluice.Decision{Key: "alice"})
	var problem *sluice.Error
	switch {
	case errors.As(err, &problem):
		log.Fatalf("Sluice says %s (%s): %s", problem.Code, problem.Field, problem.Detail)
	case err != nil:
		log.Fatalf("Sluice did not answer: %v", err)
	case !r.OK:
		fmt.Printf("refused; retry in %v\n", r.RetryAfter)
	default:
		fmt.Printf("sent; %v left\n", r.Remaining)
	}
}

func ExampleMiddleware() {
	c := sluice.New("https://sluice.example.com", os.Getenv("SLUICE_SECRET_KEY"),
		sluice.WithTimeout(500*time.Millisecond), sluice.WithFailPolicy(sluice.FailOpen))
	byClient, err := sluice.KeyByClientIP("10.0.0.0/8") // the load balancers
	if err != nil {
		log.Fatal(err)
	}
	limit := sluice.Middleware(c, "api", sluice.WithKeyFunc(byClient))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /things", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "things") })
	log.Fatal(http.ListenAndServe(":8081", limit(mux)))
}

func ExampleFallback() {
	// While Sluice is away, admit signed-in users and refuse everyone else for a minute.
	policy := sluice.Fallback(func(ctx context.Context, name string, d sluice.Decision, err error) (sluice.Result, error) {
		if d.Key != "" && d.Key != "anonymous" {
			return sluice.Result{OK: true, Name: name, Key: d.Key}, nil
		}
		return sluice.Result{OK: false, Name: name, Key: d.Key, RetryAfter: time.Minute}, nil
	})
	_ = sluice.New("https://sluice.example.com", os.Getenv("SLUICE_SECRET_KEY"), sluice.WithFailPolicy(policy))
}

func ExampleWithBatching() {
	// Concurrent Limit calls within a millisecond share one POST /v1/decisions (up to 100 a request).
	c := sluice.New("https://sluice.example.com", os.Getenv("SLUICE_SECRET_KEY"),
		sluice.WithBatching(time.Millisecond, 100))
	r, err := c.Limit(context.Background(), "sendMessage", sluice.Decision{Key: "alice"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.OK)
}
