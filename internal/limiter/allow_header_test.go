package limiter_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// An allowed key's RateLimit t is the time until the key is whole again (GET …/value's fullAt),
// also on a fixed window whose key a reservation took below zero. The allow override's probe (a
// decision of count 0) is refused there, and the header fell back to a token bucket's
// arithmetic: t=108 where the window ends in 100 s.
func TestAnAllowedKeysRateLimitTIsItsTimeToFull(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		ctx := context.Background()
		mustPut(t, e, "fw", limiter.Definition{Kind: limiter.FixedWindow, Rate: 5, Period: 60_000, Start: ptr(int64(0))})
		if got := mustLimit(t, e, limiter.Request{Name: "fw", Key: "k", Count: 9, Reserve: true}); !got.OK || got.Remaining != -4 {
			t.Fatalf("reservation: %+v", got)
		}
		if _, _, err := e.PutOverride(ctx, tenant, "fw", limiter.Override{Match: "k", Action: limiter.ActionAllow}, nil); err != nil {
			t.Fatal(err)
		}
		v, err := e.GetValue(ctx, tenant, "fw", "k")
		if err != nil {
			t.Fatal(err)
		}
		got := mustLimit(t, e, limiter.Request{Name: "fw", Key: "k", Count: 1})
		_, rl := limiter.RateLimitHeaders([]limiter.Decision{got})
		wantT := limiter.HeaderSeconds(float64(v.FullAt - clock.Now().UnixMilli()))
		if want := `"fw";r=0;t=` + strconv.FormatInt(wantT, 10); rl != want {
			t.Fatalf("RateLimit %s, want %s (the key is whole again at fullAt)", rl, want)
		}
	})
}
