package limiter_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestOneBatchSpendsARowOnce: one batch naming the same row twice, directly or as a
// request's ancestor, or holding a concurrency key twice, is decided against what its own
// earlier requests took.
func TestOneBatchSpendsARowOnce(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		clock := newClock(1_700_000_000_000)
		e := twoEngines(t, url, clock)[0]
		forever := int64(86_400_000 * 3650)
		mustPut(t, e, "p", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: forever, Start: ptr(int64(0))})
		mustPut(t, e, "c", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1e-9, Period: forever, Capacity: ptr(10.0),
			Parents: []limiter.Parent{{Name: "p", Key: "all"}}})
		mustPut(t, e, "s", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1e-9, Period: forever, Capacity: ptr(10.0), Shards: 2})
		mustPut(t, e, "jobs", limiter.Definition{Kind: limiter.Concurrency, Rate: 3, LeaseTTL: 60_000})
		try := func(what string, want bool, reqs ...limiter.Request) {
			t.Helper()
			b, err := e.Batch(ctx, tenant, reqs, true)
			if err != nil {
				if !want && errors.Is(err, limiter.ErrCountExceedsCapacity) {
					return
				}
				t.Fatalf("%s: %v", what, err)
			}
			if b.OK != want {
				t.Fatalf("%s: ok %v, want %v: %+v", what, b.OK, want, b)
			}
		}
		try("c twice past its capacity", false, limiter.Request{Name: "c", Key: "k", Count: 6}, limiter.Request{Name: "c", Key: "k", Count: 6})
		try("c and its parent past the parent", false, limiter.Request{Name: "c", Key: "k", Count: 1}, limiter.Request{Name: "p", Key: "all", Count: 10})
		try("c and its parent within", true, limiter.Request{Name: "c", Key: "k", Count: 4}, limiter.Request{Name: "p", Key: "all", Count: 4})
		if v := value(t, e, "p", "all"); v != 2 {
			t.Fatalf("p: %v, want 2", v)
		}
		try("sharded twice", false, limiter.Request{Name: "s", Key: "k", Count: 6}, limiter.Request{Name: "s", Key: "k", Count: 6})
		try("sharded twice within", true, limiter.Request{Name: "s", Key: "k", Count: 5}, limiter.Request{Name: "s", Key: "k", Count: 5})
		if v := value(t, e, "s", "k"); v != 0 {
			t.Fatalf("s: %v, want 0", v)
		}
		try("jobs twice", true, limiter.Request{Name: "jobs", Key: "k", Count: 1}, limiter.Request{Name: "jobs", Key: "k", Count: 1})
		try("jobs twice again", false, limiter.Request{Name: "jobs", Key: "k", Count: 1}, limiter.Request{Name: "jobs", Key: "k", Count: 1})
		if v := value(t, e, "jobs", "k"); v != 1 {
			t.Fatalf("jobs: %v free, want 1", v)
		}
		// A hold naming a row twice, and its parent.
		h, err := e.Hold(ctx, tenant, []limiter.HoldLimit{{Name: "p", Key: "all", Count: 1}, {Name: "p", Key: "all", Count: 1}}, 60_000)
		if err != nil || !h.Decision.OK {
			t.Fatalf("hold of 2 of 2: %+v %v", h, err)
		}
		h2, err := e.Hold(ctx, tenant, []limiter.HoldLimit{{Name: "p", Key: "all", Count: 0}}, 60_000)
		if err != nil || !h2.Decision.OK {
			t.Fatalf("hold of 0: %+v %v", h2, err)
		}
		if v := value(t, e, "p", "all"); v != 0 {
			t.Fatalf("p: %v, want 0", v)
		}
		if err := e.ReleaseHold(ctx, tenant, h.ID); err != nil {
			t.Fatal(err)
		}
		if v := value(t, e, "p", "all"); v != 2 {
			t.Fatalf("p after the release: %v, want 2", v)
		}
		// settle the zero hold for more: an extra of 3 with 2 left is overage, nothing taken.
		s, err := e.SettleHold(ctx, tenant, h2.ID, []float64{3})
		if err != nil {
			t.Fatal(err)
		}
		if v := value(t, e, "p", "all"); v != 2 || s.Overage[0] != 3 {
			t.Fatalf("p after the settle: %v (overage %v), want 2 and 3", v, s.Overage[0])
		}
	})
}
