package limiter_test

import (
	"context"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// A plan's decision rate below one a day (1e-5 per second: one decision every 27.8 hours) is
// a token bucket whose row is an inline config's: the sweeper forgets it 24 hours after its last
// write, and the plan admits a decision a day.
func TestAPlanSlowerThanOneDecisionADayOutlivesTheSweeper(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1000, Period: 1000})
		plan := limiter.PlanRequest(tenant, 1e-5, 1)
		decide := func() limiter.BatchDecision {
			t.Helper()
			b, err := e.Batch(ctx, tenant, []limiter.Request{{Name: "api", Key: "k", Count: 1}, *plan}, true)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		if b := decide(); !b.OK {
			t.Fatalf("first decision refused: %+v", b)
		}
		clock.Advance(limiter.InlineStateTTL.Milliseconds() + 1)
		if _, err := e.Sweep(ctx, 0); err != nil {
			t.Fatal(err)
		}
		// 24 h at 1e-5 per second refill 0.864 of the one token the plan's burst holds.
		if b := decide(); b.OK {
			t.Fatalf("a plan of one decision per 27.8 hours admitted a second one 24 hours after the first: %+v", b.Results[1])
		}
		// A plan of a decision or more a second holds its burst again within a second: its row
		// (with the api key's) goes as every inline config's does, 24 hours after its last write.
		fast := limiter.PlanRequest(tenant, 100, 1)
		if b, err := e.Batch(ctx, tenant, []limiter.Request{{Name: "api", Key: "k2", Count: 1}, *fast}, true); err != nil || !b.OK {
			t.Fatalf("a decision under a plan of 100 a second: %+v %v", b, err)
		}
		clock.Advance(limiter.InlineStateTTL.Milliseconds() + 1)
		if n, err := e.Sweep(ctx, 0); err != nil || n != 2 {
			t.Fatalf("swept %d rows (%v), want 2: the key's and the plan's, which holds 99 of its 100", n, err)
		}
	})
}
