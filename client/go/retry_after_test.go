package sluice_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// slowingFront answers the first request with Sluice's 503 and the given Retry-After, then
// passes requests on to Sluice, noting when each arrived.
type slowingFront struct {
	retryAfter string
	next       http.Handler
	mu         sync.Mutex
	arrivals   []time.Time
}

func newSlowingFront(t *testing.T, retryAfter string) (*slowingFront, string) {
	t.Helper()
	target, err := url.Parse(baseURL)
	if err != nil {
		t.Fatal(err)
	}
	f := &slowingFront{retryAfter: retryAfter, next: httputil.NewSingleHostReverseProxy(target)}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *slowingFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.arrivals = append(f.arrivals, time.Now())
	first := len(f.arrivals) == 1
	f.mu.Unlock()
	if first {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Retry-After", f.retryAfter)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"try again","code":"unavailable"}`))
		return
	}
	f.next.ServeHTTP(w, r)
}

// gap is the time between the first and the second request.
func (f *slowingFront) gap(t *testing.T) time.Duration {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.arrivals) != 2 {
		t.Fatalf("the front saw %d requests, want 2 (a 503, then the retry)", len(f.arrivals))
	}
	return f.arrivals[1].Sub(f.arrivals[0])
}

func TestARetryAfterA503WaitsWhatItsRetryAfterAsks(t *testing.T) {
	ctx := testCtx(t)
	name := limitName(t, "ra503")
	putLimit(t, newClient(t), name, 5)

	// The backoff alone would retry after at most 2 ms; the 503 asks for a second, and the
	// maximum backoff (5 s) allows it. Both of Retry-After's forms count.
	for _, inThreeSeconds := range []bool{false, true} {
		retryAfter := "1"
		if inThreeSeconds { // whole seconds: at least two from now
			retryAfter = time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat)
		}
		front, addr := newSlowingFront(t, retryAfter)
		c := sluice.New(addr, secretKey, sluice.WithRetries(1), sluice.WithBackoff(time.Millisecond, 5*time.Second))
		if r, err := c.Check(ctx, name, sluice.Decision{Key: "k"}); err != nil || !r.OK {
			t.Fatalf("Retry-After %q: check after a 503: %+v, %v", retryAfter, r, err)
		}
		if gap := front.gap(t); gap < 900*time.Millisecond {
			t.Fatalf("Retry-After %q: the retry came %v after the 503, want about a second or more", retryAfter, gap)
		}
	}

	// A Retry-After beyond the maximum backoff waits the maximum, not an hour: the call ends
	// well within its context's 30 s.
	front, addr := newSlowingFront(t, "3600")
	c := sluice.New(addr, secretKey, sluice.WithRetries(1), sluice.WithBackoff(time.Millisecond, 20*time.Millisecond))
	bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if r, err := c.Check(bounded, name, sluice.Decision{Key: "k"}); err != nil || !r.OK {
		t.Fatalf("Retry-After 3600 with a 20 ms maximum backoff: %+v, %v (want the retry after at most 20 ms)", r, err)
	}
	front.gap(t)

	// A Retry-After that would leave the call less time for its retry than it waited is not
	// waited for: the backoff's retry is answered in time, where waiting a second would leave
	// the retry nothing (800 ms) or too little (1.5 s) before the deadline.
	for _, timeout := range []time.Duration{800 * time.Millisecond, 1500 * time.Millisecond} {
		front, addr := newSlowingFront(t, "1")
		c := sluice.New(addr, secretKey, sluice.WithRetries(1), sluice.WithBackoff(time.Millisecond, 5*time.Second), sluice.WithTimeout(timeout))
		if r, err := c.Check(ctx, name, sluice.Decision{Key: "k"}); err != nil || !r.OK {
			t.Fatalf("Retry-After 1 with a %v timeout: %+v, %v (want the backoff's retry, answered in time)", timeout, r, err)
		}
		if gap := front.gap(t); gap >= time.Second {
			t.Fatalf("Retry-After 1 with a %v timeout: the retry came %v after the 503, want the backoff's", timeout, gap)
		}
	}

	// The 503's Retry-After is on the error the caller gets when retries run out.
	_, addr = newSlowingFront(t, "1")
	_, err := sluice.New(addr, secretKey, sluice.WithRetries(0)).Check(ctx, name, sluice.Decision{Key: "k"})
	if e := asError(t, err); e.Status != http.StatusServiceUnavailable || e.RetryAfter != time.Second {
		t.Fatalf("a 503 with Retry-After 1: %+v, want RetryAfter 1s", e)
	}
}
