package limiter_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// Tenants isolate limits of the same name: each statement that reads or writes a tenant's
// definitions, state or overrides names the tenant. A query without it went unnoticed by every
// other test (they use one tenant, or names the other tenant does not have).

// Two tenants with the same limit name and key: a group decided by the one-trip function
// (sluice_take_tokens) reads and writes only its own tenant's definition and state.
func TestOneTripGroupsKeepTenantsApart(t *testing.T) {
	e := newEngine(t, testkit.Open(t, db.Postgres), newClock(1_700_000_000_000).opts())
	ctx := context.Background()
	const other = tenant + 1
	// Same name in both tenants: tenant's allows 1 per hour, other's 100.
	if _, _, err := e.PutDefinition(ctx, other, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 3_600_000}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.PutDefinition(ctx, tenant, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 3_600_000}, nil); err != nil {
		t.Fatal(err)
	}
	// Requests on one key share a lane, so each Each below is one group: after the first (which
	// reads the definition), the one-trip function decides it.
	group := []limiter.Request{{Name: "api", Key: "k", Count: 1}, {Name: "api", Key: "k", Count: 1}}
	admitted := map[int64]int{}
	for range 4 {
		for _, tid := range []int64{tenant, other} {
			for _, o := range e.Each(ctx, tid, group, true) {
				if o.Err != nil {
					t.Fatal(o.Err)
				}
				if o.Decision.OK {
					admitted[tid]++
				}
			}
		}
	}
	if admitted[tenant] != 1 || admitted[other] != 8 {
		t.Fatalf("admitted %d (1 per hour) and %d (100 per hour) of 8 each, want 1 and 8", admitted[tenant], admitted[other])
	}
}

// The same for lone requests, which the one-statement form (pgTakeOne) decides.
func TestOneTripLoneRequestsKeepTenantsApart(t *testing.T) {
	e := newEngine(t, testkit.Open(t, db.Postgres), newClock(1_700_000_000_000).opts())
	ctx := context.Background()
	const other = tenant + 1
	for _, tid := range []int64{tenant, other} {
		if _, _, err := e.PutDefinition(ctx, tid, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 3, Period: 3_600_000}, nil); err != nil {
			t.Fatal(err)
		}
	}
	admitted := map[int64]int{}
	for range 3 {
		for _, tid := range []int64{tenant, other} {
			d, err := e.Limit(ctx, tid, limiter.Request{Name: "api", Key: "k", Count: 1})
			if err != nil {
				t.Fatal(err)
			}
			if d.OK {
				admitted[tid]++
			}
		}
	}
	if admitted[tenant] != 3 || admitted[other] != 3 {
		t.Fatalf("admitted %d and %d of 3 each (3 per hour per tenant), want 3 and 3", admitted[tenant], admitted[other])
	}
}

// Two tenants with a limit of the same name: one tenant's overrides and resets never reach the
// other's keys.
func TestSameNamedLimitsOfTwoTenantsShareNoOverridesOrResets(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		ctx := context.Background()
		const other = tenant + 1
		def := limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 3_600_000}
		for _, tid := range []int64{tenant, other} {
			if _, _, err := e.PutDefinition(ctx, tid, "api", def, nil); err != nil {
				t.Fatal(err)
			}
		}
		// tenant lets "k" through; other only gives "vip" more room.
		if _, _, err := e.PutOverride(ctx, tenant, "api", limiter.Override{Match: "k", Action: limiter.ActionAllow}, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.PutOverride(ctx, other, "api", limiter.Override{Match: "vip", Rate: ptr(5.0)}, nil); err != nil {
			t.Fatal(err)
		}
		limit := func(tid int64) limiter.Decision {
			t.Helper()
			got, err := e.Limit(ctx, tid, limiter.Request{Name: "api", Key: "k", Count: 1})
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		if !limit(other).OK {
			t.Fatal("other's first request on k refused")
		}
		if got := limit(other); got.OK || got.Override != "" {
			t.Fatalf("other's second request on k: %+v, want refused by other's own limit (tenant's allow override is not other's)", got)
		}
		// tenant resets its key k: other's k stays empty.
		k := "k"
		if err := e.Reset(ctx, tenant, "api", &k, nil); err != nil {
			t.Fatal(err)
		}
		if got := limit(other); got.OK {
			t.Fatalf("after tenant's reset of its own k, other's k admitted: %+v", got)
		}
	})
}

// An override's capacity is the key's capacity: a count above it can never be admitted, so it
// is count_exceeds_capacity (400), as it is above a definition's own capacity, not a refusal
// with a retryAfter that no retry can meet.
func TestACountAboveAnOverridesCapacityIsCountExceedsCapacity(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		ctx := context.Background()
		mustPut(t, e, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000})
		if _, _, err := e.PutOverride(ctx, tenant, "api", limiter.Override{Match: "small", Capacity: ptr(2.0)}, nil); err != nil {
			t.Fatal(err)
		}
		got, err := e.Limit(ctx, tenant, limiter.Request{Name: "api", Key: "small", Count: 5})
		if !errors.Is(err, limiter.ErrCountExceedsCapacity) {
			t.Fatalf("count 5 on a key whose override holds 2: %+v, %v; want count_exceeds_capacity", got, err)
		}
	})
}
