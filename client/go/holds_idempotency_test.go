package sluice_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// losingFront is a proxy in front of the real Sluice that forwards every request but loses
// Sluice's answer to the first n of them (the caller gets a 503 problem instead, as after a
// timeout behind a load balancer, or another loss): the request was carried out, its answer
// never arrived.
type losingFront struct {
	lose, seen atomic.Int32
	how        atomic.Int32 // a loss
	next       http.Handler
	mu         sync.Mutex
	lost       [][]byte // the bodies of the answers lost
}

func newLosingFront(t *testing.T) (*losingFront, string) {
	t.Helper()
	target, err := url.Parse(baseURL)
	if err != nil {
		t.Fatal(err)
	}
	f := &losingFront{next: httputil.NewSingleHostReverseProxy(target)}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *losingFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.seen.Add(1)
	if f.lose.Add(-1) < 0 {
		f.next.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	f.next.ServeHTTP(rec, r)
	f.mu.Lock()
	f.lost = append(f.lost, bytes.Clone(rec.Body.Bytes()))
	f.mu.Unlock()
	switch loss(f.how.Load()) {
	case lossDrop:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	case lossPage:
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("<html><body>503 Service Temporarily Unavailable</body></html>"))
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the answer was lost","code":"unavailable"}`))
}

// loss is how a losingFront loses an answer.
type loss int32

const (
	lossProblem loss = iota // a 503 problem shaped like Sluice's own
	lossDrop                // the connection closes without an answer
	lossPage                // a proxy's own 503 page, not a problem
)

// loseNext makes the front lose the answer of the next request with a 503 problem and counts
// from zero.
func (f *losingFront) loseNext() { f.loseNextBy(lossProblem) }

// loseNextBy is loseNext losing the answer in the way how.
func (f *losingFront) loseNextBy(how loss) {
	f.how.Store(int32(how))
	f.seen.Store(0)
	f.lose.Store(1)
}

func (f *losingFront) lastLost(t *testing.T) []byte {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.lost) == 0 {
		t.Fatal("the front lost no answer")
	}
	return f.lost[len(f.lost)-1]
}

// TestHoldCallsAreRetriedOnlyUnderAnIdempotencyKey: with WithIdempotencyKey the hold, settle,
// release and lease calls send the key and are retried when their answer is lost, and the retry
// gets the first answer (the same hold, the settle charged once, the release and lease calls not
// 409 for being closed by the lost attempt); without a key a lost hold is not retried (a retry
// would hold twice). Against the real server through a proxy that loses answers.
func TestHoldCallsAreRetriedOnlyUnderAnIdempotencyKey(t *testing.T) {
	ctx := testCtx(t)
	direct := newClient(t)
	tokens, jobs := limitName(t, "tokens"), limitName(t, "jobs")
	if _, err := direct.Put(ctx, tokens, sluice.Definition{Kind: sluice.FixedWindow, Rate: 100, Period: 3_600_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Put(ctx, jobs, sluice.Definition{Kind: sluice.Concurrency, Rate: 1, LeaseTTL: 60_000}); err != nil {
		t.Fatal(err)
	}
	value := func() float64 {
		t.Helper()
		v, err := direct.Value(ctx, tokens, "k")
		if err != nil {
			t.Fatal(err)
		}
		return v.Value
	}
	front, addr := newLosingFront(t)
	c := sluice.New(addr, secretKey, sluice.WithRetries(2), sluice.WithBackoff(time.Millisecond, 4*time.Millisecond))
	keyed := func(k string) context.Context { return sluice.WithIdempotencyKey(ctx, tokens+"-"+k) }

	// Without a key: one attempt; the lost hold was made (and is released here by hand).
	front.loseNext()
	if _, err := c.Hold(ctx, []sluice.HoldItem{{Name: tokens, Key: "k", Count: 10}}, time.Minute); err == nil || front.seen.Load() != 1 {
		t.Fatalf("a hold without a key whose answer was lost: %v after %d requests, want an error after 1 (never retried)", err, front.seen.Load())
	}
	var lost struct{ HoldID string }
	if err := json.Unmarshal(front.lastLost(t), &lost); err != nil || lost.HoldID == "" {
		t.Fatalf("the lost answer %s: %v", front.lastLost(t), err)
	}
	if err := direct.ReleaseHold(ctx, lost.HoldID); err != nil {
		t.Fatal(err)
	}

	// Hold under a key: retried, and the retry is the first hold.
	front.loseNext()
	h, err := c.Hold(keyed("hold"), []sluice.HoldItem{{Name: tokens, Key: "k", Count: 10}}, time.Minute)
	if err != nil || !h.Replayed || front.seen.Load() != 2 {
		t.Fatalf("a keyed hold whose answer was lost: %+v, %v after %d requests, want the replay after 2", h, err, front.seen.Load())
	}
	if err := json.Unmarshal(front.lastLost(t), &lost); err != nil || lost.HoldID != h.ID {
		t.Fatalf("the retry answered hold %q, the lost answer was %s: want the same hold", h.ID, front.lastLost(t))
	}
	if v := value(); v != 90 {
		t.Fatalf("after a keyed hold of 10 retried: value %v, want 90 (held once)", v)
	}

	// Settle under a key: retried, charged once, not 409 hold_closed.
	front.loseNext()
	s, err := c.SettleHold(keyed("settle"), h.ID, []float64{4})
	if err != nil || len(s) != 1 || s[0].Charged != 4 || s[0].Refunded != 6 || front.seen.Load() != 2 {
		t.Fatalf("a keyed settle whose answer was lost: %+v, %v after %d requests", s, err, front.seen.Load())
	}
	if v := value(); v != 96 {
		t.Fatalf("after the settle: value %v, want 96 (4 charged, once)", v)
	}

	// Release under a key: the retry is the first 204, not 409 hold_closed.
	h2, err := direct.Hold(ctx, []sluice.HoldItem{{Name: tokens, Key: "k", Count: 5}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	front.loseNext()
	if err := c.ReleaseHold(keyed("release"), h2.ID); err != nil || front.seen.Load() != 2 {
		t.Fatalf("a keyed release whose answer was lost: %v after %d requests", err, front.seen.Load())
	}
	if v := value(); v != 96 {
		t.Fatalf("after the release: value %v, want 96", v)
	}

	// Lease extend and release under a key likewise.
	r, err := direct.Limit(ctx, jobs, sluice.Decision{Key: "w"})
	if err != nil || !r.OK || r.LeaseID == "" {
		t.Fatalf("lease = %+v, %v", r, err)
	}
	front.loseNext()
	if exp, err := c.ExtendLease(keyed("extend"), r.LeaseID); err != nil || exp.Before(r.LeaseExpiresAt) || front.seen.Load() != 2 {
		t.Fatalf("a keyed extend whose answer was lost: %v, %v after %d requests", exp, err, front.seen.Load())
	}
	front.loseNext()
	if err := c.ReleaseLease(keyed("lease-release"), r.LeaseID); err != nil || front.seen.Load() != 2 {
		t.Fatalf("a keyed lease release whose answer was lost: %v after %d requests", err, front.seen.Load())
	}
	if again, err := direct.Limit(ctx, jobs, sluice.Decision{Key: "w"}); err != nil || !again.OK {
		t.Fatalf("the slot after the release = %+v, %v", again, err)
	} else if err := direct.ReleaseLease(ctx, again.LeaseID); err != nil {
		t.Fatal(err)
	}

	// Without a key, the other calls are not retried either.
	h3, err := direct.Hold(ctx, []sluice.HoldItem{{Name: tokens, Key: "k", Count: 1}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	front.loseNext()
	if _, err := c.SettleHold(ctx, h3.ID, []float64{1}); err == nil || front.seen.Load() != 1 {
		t.Fatalf("a settle without a key whose answer was lost: %v after %d requests, want an error after 1", err, front.seen.Load())
	}
}
