package sluice_test

import (
	"errors"
	"math"
	"net/http"
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// TestHoldsAndLeasesThroughTheClient: a hold settled for less gives the rest back, once; a
// concurrency limit's lease is refused when full, extended and released.
func TestHoldsAndLeasesThroughTheClient(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	tokens, jobs := limitName(t, "tokens"), limitName(t, "jobs")
	if _, err := c.Put(ctx, tokens, sluice.Definition{Kind: sluice.FixedWindow, Rate: 10, Period: 3_600_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, jobs, sluice.Definition{Kind: sluice.Concurrency, Rate: 1, LeaseTTL: 60_000}); err != nil {
		t.Fatal(err)
	}
	h, err := c.Hold(ctx, []sluice.HoldItem{{Name: tokens, Key: "k", Count: 6}}, time.Minute)
	if err != nil || h.ID == "" || len(h.Results) != 1 || h.Results[0].Remaining != 4 {
		t.Fatalf("hold = %+v, %v", h, err)
	}
	s, err := c.SettleHold(ctx, h.ID, []float64{2})
	if err != nil || len(s) != 1 || s[0].Charged != 2 || s[0].Refunded != 4 {
		t.Fatalf("settle = %+v, %v", s, err)
	}
	var e *sluice.Error
	if _, err := c.SettleHold(ctx, h.ID, []float64{2}); !errors.As(err, &e) || e.Code != sluice.CodeHoldClosed {
		t.Fatalf("settling twice: %v", err)
	}
	if _, err := c.Hold(ctx, []sluice.HoldItem{{Name: tokens, Key: "k", Count: 9}}, time.Minute); !errors.As(err, &e) || e.Code != sluice.CodeRateLimited {
		t.Fatalf("a hold past the limit: %v", err)
	}

	r, err := c.Limit(ctx, jobs, sluice.Decision{Key: "w"})
	if err != nil || !r.OK || r.LeaseID == "" || r.LeaseExpiresAt.IsZero() {
		t.Fatalf("lease = %+v, %v", r, err)
	}
	if full, err := c.Limit(ctx, jobs, sluice.Decision{Key: "w"}); err != nil || full.OK || full.LeaseID != "" {
		t.Fatalf("a second lease of one slot = %+v, %v", full, err)
	}
	if exp, err := c.ExtendLease(ctx, r.LeaseID); err != nil || exp.Before(r.LeaseExpiresAt) {
		t.Fatalf("extend = %v, %v", exp, err)
	}
	if err := c.ReleaseLease(ctx, r.LeaseID); err != nil {
		t.Fatal(err)
	}
	if again, err := c.Limit(ctx, jobs, sluice.Decision{Key: "w"}); err != nil || !again.OK {
		t.Fatalf("after the release = %+v, %v", again, err)
	}
}

// TestHoldItemsSluiceWouldRefuseAreRefusedBeforeSending: a hold's name or count Sluice would
// answer 400 to, and a settle's count that is no number of tokens, are ErrInvalidArgument, and
// nothing is sent (as for Limit, Batch and Bulk).
func TestHoldItemsSluiceWouldRefuseAreRefusedBeforeSending(t *testing.T) {
	ctx := testCtx(t)
	ct := &countingTransport{}
	c := sluice.New(baseURL, secretKey, sluice.WithHTTPClient(&http.Client{Transport: ct}))
	for _, it := range []sluice.HoldItem{{Name: "bad name", Key: "u", Count: 1}, {Name: "ok", Key: "u", Count: -1}, {Name: "ok", Key: "u", Count: math.NaN()}} {
		if _, err := c.Hold(ctx, []sluice.HoldItem{it}, time.Minute); !errors.Is(err, sluice.ErrInvalidArgument) {
			t.Errorf("Hold(%+v): %v; want ErrInvalidArgument", it, err)
		}
	}
	for _, n := range []float64{-1, math.NaN(), math.Inf(1), 2e15} {
		if _, err := c.SettleHold(ctx, "hold_x", []float64{n}); !errors.Is(err, sluice.ErrInvalidArgument) {
			t.Errorf("SettleHold(%v): %v; want ErrInvalidArgument", n, err)
		}
	}
	if n := ct.n.Load(); n != 0 {
		t.Fatalf("%d requests sent; want none", n)
	}
}
