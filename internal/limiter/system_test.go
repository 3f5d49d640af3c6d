package limiter_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// planRequest is a plan's decision rate as the API adds it to a tenant's batch: a system limit
// keyed by the tenant.
func planRequest(tenantID int64, perSecond, burst float64) limiter.Request {
	return limiter.Request{Name: "plan.decisions", Key: strconv.FormatInt(tenantID, 10), Count: 1, System: true,
		Config: &limiter.Definition{Kind: limiter.TokenBucket, Rate: perSecond, Period: 1000, Capacity: &burst}}
}

// TestSystemRequestIsAllOrNothingWithTheTenantsLimits: a plan limit riding in a tenant's batch
// refuses the batch without consuming the tenant's limit, a refusal of the tenant's limit
// consumes nothing of the plan, and the plan's state lives in the system tenant's key space (a
// tenant's own limit of the same name and key is another limit).
func TestSystemRequestIsAllOrNothingWithTheTenantsLimits(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000) // frozen: nothing refills
		e := newEngine(t, d, clock.opts())
		ctx := context.Background()
		mustPut(t, e, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 60_000})
		mustPut(t, e, "tight", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 60_000})
		// The tenant's own limit named like the plan's, same key: it must not share state with it.
		mustPut(t, e, "plan.decisions", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 60_000})
		plan := planRequest(tenant, 1, 3)

		// "tight" admits once; its refusal must leave the plan's three tokens at two.
		for i, want := range []bool{true, false} {
			b, err := e.Batch(ctx, tenant, []limiter.Request{{Name: "tight", Key: "k", Count: 1}, plan}, true)
			if err != nil {
				t.Fatal(err)
			}
			if b.OK != want || !b.Results[1].OK {
				t.Fatalf("tight decision %d: ok=%v (want %v), plan %+v", i, b.OK, want, b.Results[1])
			}
		}
		for i := range 2 {
			b, err := e.Batch(ctx, tenant, []limiter.Request{{Name: "api", Key: "k", Count: 1}, plan}, true)
			if err != nil {
				t.Fatal(err)
			}
			if !b.OK {
				t.Fatalf("decision %d within the plan's burst refused: %+v", i, b)
			}
		}
		b, err := e.Batch(ctx, tenant, []limiter.Request{{Name: "api", Key: "k", Count: 1}, plan}, true)
		if err != nil {
			t.Fatal(err)
		}
		if b.OK || b.Results[1].OK || !b.Results[0].OK || b.Results[1].RetryAfter == nil || *b.Results[1].RetryAfter != 1000 {
			t.Fatalf("the plan's fourth decision: %+v (want refused by the plan alone, retry after 1000 ms)", b)
		}
		if v := value(t, e, "api", "k"); v != 98 {
			t.Fatalf("the tenant's limit after 2 admitted and 1 plan-refused decisions = %v, want 98", v)
		}
		// The tenant's own "plan.decisions" limit, same key, is untouched by the plan's use.
		if v := value(t, e, "plan.decisions", strconv.FormatInt(tenant, 10)); v != 1 {
			t.Fatalf("the tenant's own limit of the plan's name = %v, want 1 (untouched)", v)
		}
		// Another tenant's plan is its own bucket.
		other := planRequest(tenant+1, 1, 3)
		if b, err := e.Batch(ctx, tenant+1, []limiter.Request{{Name: "x", Key: "k", Count: 1, Config: &limiter.Definition{Kind: limiter.TokenBucket, Rate: 5, Period: 1000}}, other}, true); err != nil || !b.OK {
			t.Fatalf("another tenant's first decision: %+v, %v", b, err)
		}
		// Bulk: each item's job carries the plan.
		outs := e.EachWith(ctx, tenant, []limiter.Request{{Name: "api", Key: "a", Count: 1}, {Name: "api", Key: "b", Count: 1}}, &plan, true)
		for i, o := range outs {
			if o.Err != nil || o.With == nil || o.With.OK {
				t.Fatalf("bulk item %d with an empty plan: %+v", i, o)
			}
		}
		if v := value(t, e, "api", "a"); v != 100 {
			t.Fatalf("a bulk item refused by the plan consumed the tenant's limit: %v", v)
		}
		if _, err := e.Batch(ctx, tenant, []limiter.Request{{Name: "api", System: true}}, true); err == nil {
			t.Fatal("a system request without an inline config was accepted")
		}
	})
}

// TestPlanLimitHoldsItsBoundAcrossTwoInstances hammers one tenant's decisions, each carrying the
// plan's decision rate (50 per second, burst 10), from two engines (on PostgreSQL two pools, as
// two app instances) for a generous limit of the tenant's: the admissions seen from outside stay
// within the plan's token bucket bound, and the tenant's limit was consumed exactly by the
// admitted decisions (a plan refusal consumed none of it).
func TestPlanLimitHoldsItsBoundAcrossTwoInstances(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		first, err := db.Open(ctx, url, db.Options{MaxOpenConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		defer first.Close()
		if err := first.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		second := first
		if first.Dialect == db.Postgres {
			if second, err = db.Open(ctx, url, db.Options{MaxOpenConns: 8}); err != nil {
				t.Fatal(err)
			}
			defer second.Close()
		}
		engines := []*limiter.Engine{newEngine(t, first, limiter.Options{}), newEngine(t, second, limiter.Options{})}
		start := time.Now().UnixMilli() - 1000 // a window that cannot roll over during the test
		mustPut(t, engines[0], "generous", limiter.Definition{Kind: limiter.FixedWindow, Rate: 1_000_000, Period: 3_600_000, Start: &start})
		plan := planRequest(tenant, 50, 10)

		var mu sync.Mutex
		var spans []testkit.Span
		var refused atomic.Int64
		var errs sync.Map
		deadline := time.Now().Add(hammerDuration() / 2)
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				eng := engines[g%2]
				for time.Now().Before(deadline) {
					sent := time.Now()
					b, err := eng.Batch(ctx, tenant, []limiter.Request{{Name: "generous", Key: "k", Count: 1}, plan}, true)
					answered := time.Now()
					switch {
					case err != nil:
						errs.Store(err.Error(), true)
					case b.OK:
						mu.Lock()
						spans = append(spans, testkit.Span{Sent: sent, Answered: answered})
						mu.Unlock()
					default:
						refused.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		errs.Range(func(k, _ any) bool { t.Errorf("decision error: %v", k); return true })
		if err := testkit.TokenBucket(spans, 10, 50); err != nil {
			t.Errorf("the plan's bound broken: %v", err)
		}
		if v := value(t, engines[0], "generous", "k"); v != 1_000_000-float64(len(spans)) {
			t.Errorf("the tenant's limit = %v after %d admitted decisions: a plan refusal consumed it", v, len(spans))
		}
		if len(spans) < 10 || refused.Load() == 0 {
			t.Errorf("admitted %d, refused %d: the test did not exercise the plan", len(spans), refused.Load())
		}
		t.Logf("admitted %d, refused %d by the plan", len(spans), refused.Load())
	})
}
