package sluice_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// stallingServer answers POST /v1/decisions only once released, telling the test when a request
// arrived and when one was cancelled while it stalled.
type stallingServer struct {
	*httptest.Server
	arrived   chan struct{}
	cancelled chan struct{}
	release   func()
}

func newStallingServer(t *testing.T) *stallingServer {
	t.Helper()
	released := make(chan struct{})
	var once sync.Once
	s := &stallingServer{arrived: make(chan struct{}, 8), cancelled: make(chan struct{}, 8),
		release: func() { once.Do(func() { close(released) }) }}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Decisions []json.RawMessage `json:"decisions"`
		}
		if r.URL.Path != "/v1/decisions" || json.NewDecoder(r.Body).Decode(&body) != nil {
			http.Error(w, "want a POST /v1/decisions", http.StatusBadRequest)
			return
		}
		s.arrived <- struct{}{}
		select {
		case <-r.Context().Done():
			s.cancelled <- struct{}{}
			return
		case <-released:
		}
		results := make([]map[string]any, len(body.Decisions))
		for i := range results {
			results[i] = map[string]any{"ok": true, "retryAfter": nil, "remaining": 1, "name": "x", "key": "k"}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"results": results})
	}))
	t.Cleanup(s.Close)
	t.Cleanup(s.release) // runs first: Close waits for the handlers
	return s
}

// within waits for ch, or fails the test naming what it waited for.
func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10 s for %s", what)
	}
}

// TestABatchIsCancelledOnceEveryCallerHasLeft: with WithTimeout(0) nothing but its callers bounds
// a batch's request. Once all of them have left (their contexts ended), the request is cancelled
// rather than held, with its goroutine and connection, for as long as the server stalls; while
// one of them still waits, it is not.
func TestABatchIsCancelledOnceEveryCallerHasLeft(t *testing.T) {
	srv := newStallingServer(t)
	c := sluice.New(srv.URL, "sk_test", sluice.WithTimeout(0), sluice.WithBatching(never, 2))
	limit := func(ctx context.Context) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := c.Limit(ctx, "x", sluice.Decision{Key: "k"})
			done <- err
		}()
		return done
	}

	// Both callers leave: the server sees its request's context end.
	ctx1, cancel1 := context.WithCancel(testCtx(t))
	ctx2, cancel2 := context.WithCancel(testCtx(t))
	first, second := limit(ctx1), limit(ctx2)
	within(t, srv.arrived, "the batch of both calls to reach the server")
	cancel1()
	cancel2()
	for _, done := range []<-chan error{first, second} {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("a caller who left: %v, want context.Canceled", err)
		}
	}
	within(t, srv.cancelled, "the server's request context to be cancelled once every caller of the batch had left")

	// One caller leaves, the other waits: the request goes on and the other gets its answer.
	ctx3, cancel3 := context.WithCancel(testCtx(t))
	leaving, staying := limit(ctx3), limit(testCtx(t))
	within(t, srv.arrived, "the second batch to reach the server")
	cancel3()
	if err := <-leaving; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller who left: %v, want context.Canceled", err)
	}
	srv.release()
	if err := <-staying; err != nil {
		t.Fatalf("the caller who stayed: %v, want its answer (the request must not be cancelled while it waits)", err)
	}
	select {
	case <-srv.cancelled:
		t.Fatal("the second batch's request was cancelled while a caller waited for it")
	default:
	}
}
