package limiter_test

import (
	"context"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestSweepKeepsAPenaltyUntilItHasBeenOverForTheClockGrace: a penalty that ended less than
// SweepClockGrace ago by the sweeper's clock is still running for an instance whose clock is
// that much slower, and a missing row has no penalty: the row must stay until the penalty is
// over by the slow clock too. The two rows are one stored definition's and one inline config's.
// The inline row is the sharp case: its fullness is never judged (it goes InlineStateTTL after
// its ts, which a refusal does not move), so the penalty's own check is all that keeps it, where
// a stored definition's row is also held by its state reading as missing at both readings.
// A penalty of a day outlasts that TTL, so both rows are otherwise due when the penalty ends.
func TestSweepKeepsAPenaltyUntilItHasBeenOverForTheClockGrace(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		const t0 = int64(1_700_000_000_000)
		grace := limiter.SweepClockGrace.Milliseconds()
		clock := newClock(t0)
		e := newEngine(t, d, clock.opts())
		def := limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 60_000, Penalty: 86_400_000}
		mustPut(t, e, "stored", def)
		reqs := []limiter.Request{{Name: "stored", Key: "k", Count: 1}, {Name: "inline", Key: "k", Count: 1, Config: &def}}
		for _, r := range reqs {
			if got := mustLimit(t, e, r); !got.OK {
				t.Fatalf("%s: the first request was refused: %+v", r.Name, got)
			}
		}
		clock.Set(t0 + 500) // the bucket holds 1/120 of a token: refused, a day's penalty starts
		for _, r := range reqs {
			if got := mustLimit(t, e, r); got.OK {
				t.Fatalf("%s: the second request was admitted: %+v", r.Name, got)
			}
		}
		end := t0 + 500 + def.Penalty

		clock.Set(end + 500) // over by the sweeper's clock, by 500 ms
		if n, err := e.Sweep(ctx, 0); err != nil || n != 0 {
			t.Fatalf("500 ms after the penalty ended (less than the %d ms grace): deleted %d rows (%v), want both kept", grace, n, err)
		}
		slow := newEngine(t, d, newClock(end+500-grace).opts())
		for _, r := range reqs {
			if got := mustLimit(t, slow, r); got.OK {
				t.Fatalf("%s: an instance %d ms slow, for which the penalty still runs, admitted: %+v", r.Name, grace, got)
			}
		}

		clock.Set(end + grace) // over by a clock that is the grace slow too; the buckets are full
		if n, err := e.Sweep(ctx, 0); err != nil || n != 2 {
			t.Fatalf("the grace after the penalty ended: deleted %d rows (%v), want both", n, err)
		}
	})
}
