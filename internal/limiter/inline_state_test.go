package limiter_test

import (
	"context"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestANewDefinitionStartsFullWhateverAnInlineConfigLeft: a key's state row left by an inline
// config under a name is not read by a stored definition created later under it. Here the row's
// ts is mid-minute (an inline token bucket's probe at :30); read by the stored fixed window (10 a
// minute, start 0), it rolled that key's windows at :30 and admitted 20 within one window
// [:00, :60), then and an hour later (the sweeper never deletes such a row: it does not read as
// missing). On both dialects.
func TestANewDefinitionStartsFullWhateverAnInlineConfigLeft(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		const w = int64(1_700_000_040_000) // a whole minute
		clock := newClock(w + 30_000)
		e := newEngine(t, d, clock.opts())
		ctx := context.Background()
		inline := &limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000}
		if got, err := e.Limit(ctx, tenant, limiter.Request{Name: "api", Key: "k", Count: 0, Config: inline}); err != nil || !got.OK {
			t.Fatalf("inline probe: %+v %v", got, err)
		}
		start := int64(0)
		mustPut(t, e, "api", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 60_000, Start: &start})
		for _, base := range []int64{w + 60_000, w + 3_600_000} { // and an hour later, after a sweep
			if base > w+60_000 {
				clock.Set(base - 1)
				if _, err := e.Sweep(ctx, 100); err != nil {
					t.Fatal(err)
				}
			}
			admitted := 0.0
			for _, at := range []int64{base + 1_000, base + 30_000} { // both in the window [base, base+60 s)
				clock.Set(at)
				if got := mustLimit(t, e, limiter.Request{Name: "api", Key: "k", Count: 10}); got.OK {
					admitted += 10
				}
			}
			if admitted > 10 {
				t.Fatalf("the fixed window of 10 a minute (start 0) admitted %v in [w+%d s, +60 s)", admitted, (base-w)/1000)
			}
		}
	})
}
