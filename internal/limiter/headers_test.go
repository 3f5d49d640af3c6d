package limiter_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestRateLimitHeaderTimeIsWhenTheKeyIsWholeAgain: RateLimit's t, on an admitted decision, is
// how long until what the decision used is whole again, by each kind's own refill: the end of a
// fixed window, a lease's expiry, the time a sliding window's count leaves its estimate, a
// shard's own refill (not the whole limit's arithmetic on one shard's remaining).
func TestRateLimitHeaderTimeIsWhenTheKeyIsWholeAgain(t *testing.T) {
	const minute = 60_000
	start := int64(1_700_000_040_000) + 20_000 // 20 s into a minute from the epoch
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock(start)
		e := newEngine(t, d, c.opts())
		for _, tc := range []struct {
			name string
			def  limiter.Definition
			want string
		}{
			{"bucket", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: minute}, `"bucket";r=9;t=6`},
			{"window", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: minute, Start: ptr(int64(0))}, `"window";r=9;t=40`},
			{"slots", limiter.Definition{Kind: limiter.Concurrency, Rate: 2, LeaseTTL: minute}, `"slots";r=1;t=60`},
			{"sliding", limiter.Definition{Kind: limiter.SlidingWindow, Rate: 10, Period: minute}, `"sliding";r=9;t=100`},
			// One of four shards of 25, refilling 25 a minute: one token back in 2.4 s.
			{"sharded", limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: minute, Shards: 4}, `"sharded";r=24;t=3`},
		} {
			mustPut(t, e, tc.name, tc.def)
			dec := mustLimit(t, e, limiter.Request{Name: tc.name, Key: "k", Count: 1})
			if _, got := limiter.RateLimitHeaders([]limiter.Decision{dec}); !dec.OK || got != tc.want {
				t.Errorf("%s: RateLimit %q (ok %v), want %q", tc.name, got, dec.OK, tc.want)
			}
		}
	})
}

// TestAnAdmittedReservationsRateLimitTimeIsWhenTheKeyIsWholeAgain: an admitted reservation's
// retryAfter says when the reserved work may run; RateLimit's t stays what it is on every
// admitted decision, the time until the key is whole again (a refusal's t is its retryAfter).
func TestAnAdmittedReservationsRateLimitTimeIsWhenTheKeyIsWholeAgain(t *testing.T) {
	const minute = 60_000
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, newClock(1_700_000_040_000+20_000).opts()) // 20 s into a minute from the epoch
		for _, tc := range []struct {
			name string
			def  limiter.Definition
			wait int64 // the reservation's retryAfter
			want string
		}{
			// 10 a minute: 3 taken, then 10 reserved leaves -3, whole again after 13 tokens of 6 s.
			{"bucket", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: minute, MaxReserved: ptr(10.0)}, 18_000, `"bucket";r=0;t=78`},
			// Two shards of 5, refilling 5 a minute each: the same amounts over both, 13 tokens at 12 s.
			{"sharded", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: minute, MaxReserved: ptr(10.0), Shards: 2}, 18_000, `"sharded";r=0;t=78`},
			// A window of a minute from the epoch, 40 s from its end: -3 becomes 7 at its end and
			// the key is whole at the next one's.
			{"window", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: minute, MaxReserved: ptr(10.0), Start: ptr(int64(0))}, 40_000, `"window";r=0;t=100`},
		} {
			mustPut(t, e, tc.name, tc.def)
			mustLimit(t, e, limiter.Request{Name: tc.name, Key: "k", Count: 3})
			dec := mustLimit(t, e, limiter.Request{Name: tc.name, Key: "k", Count: 10, Reserve: true})
			if !dec.OK || dec.RetryAfter == nil || *dec.RetryAfter != tc.wait {
				t.Fatalf("%s: the reservation: ok %v retryAfter %v, want admitted with a wait of %d ms", tc.name, dec.OK, dec.RetryAfter, tc.wait)
			}
			if _, got := limiter.RateLimitHeaders([]limiter.Decision{dec}); got != tc.want {
				t.Errorf("%s: RateLimit %q, want %q", tc.name, got, tc.want)
			}
		}
	})
}

// TestKeyOutcomesWeighRemainingAgainstTheShardsUsed: the hooks hear a sharded limit's remaining
// against the most the shards the decision used hold, not the whole limit's maximum, so that a
// fresh key of a limit of ten shards (one token taken of 1,000) is not near its limit.
func TestKeyOutcomesWeighRemainingAgainstTheShardsUsed(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		var heard []limiter.KeyOutcome
		opts := newClock(1_700_000_000_000).opts()
		opts.OnKeyOutcome = func(_ int64, o limiter.KeyOutcome) { heard = append(heard, o) }
		e := newEngine(t, d, opts)
		mustPut(t, e, "s", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1000, Period: 60_000, Shards: 10})
		mustPut(t, e, "one", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1000, Period: 60_000})
		mustLimit(t, e, limiter.Request{Name: "s", Key: "fresh", Count: 1})
		mustLimit(t, e, limiter.Request{Name: "one", Key: "fresh", Count: 1})
		if len(heard) != 2 || heard[0].Remaining != 99 || heard[0].Max != 100 || heard[1].Remaining != 999 || heard[1].Max != 1000 {
			t.Fatalf("heard %+v; want 99 of 100 (one shard of ten) and 999 of 1000", heard)
		}
	})
}

// TestAQuotasPolicyWindowIsTheCalendarsWhateverDecided: a quota's RateLimit-Policy w is its
// calendar window's length on every decision: under a penalty's refusal, an allow and a deny
// override too (the outcome carries no window there).
func TestAQuotasPolicyWindowIsTheCalendarsWhateverDecided(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock(1_700_000_000_000)
		e := newEngine(t, d, c.opts())
		mustPut(t, e, "q", limiter.Definition{Kind: limiter.Quota, Rate: 2, Calendar: "day", TimeZone: "UTC", Penalty: 60_000})
		exp := c.Now().UnixMilli() + 3_600_000
		for _, o := range []limiter.Override{{Match: "vip", Action: limiter.ActionAllow, ExpiresAt: &exp}, {Match: "bad", Action: limiter.ActionDeny, ExpiresAt: &exp}} {
			if _, _, err := e.PutOverride(context.Background(), tenant, "q", o, nil); err != nil {
				t.Fatal(err)
			}
		}
		const want = `"q";q=2;w=86400`
		var ds []limiter.Decision
		for range 4 { // the third is refused and starts a penalty, the fourth is refused by it
			ds = append(ds, mustLimit(t, e, limiter.Request{Name: "q", Key: "k", Count: 1}))
		}
		ds = append(ds, mustLimit(t, e, limiter.Request{Name: "q", Key: "vip", Count: 1}), mustLimit(t, e, limiter.Request{Name: "q", Key: "bad", Count: 1}))
		for i, dec := range ds {
			if p, _ := limiter.RateLimitHeaders([]limiter.Decision{dec}); p != want {
				t.Errorf("decision %d (%s, ok %v): RateLimit-Policy %q, want %q", i, dec.Key, dec.OK, p, want)
			}
		}
		// A quota whole already has nothing to wait for: t is 0, not the window's end (which a
		// key that used some waits for).
		fresh := mustLimit(t, e, limiter.Request{Name: "q", Key: "fresh", Count: 0})
		if _, l := limiter.RateLimitHeaders([]limiter.Decision{fresh}); l != `"q";r=2;t=0` {
			t.Errorf("a look at a whole quota: RateLimit %q, want t=0", l)
		}
		used := mustLimit(t, e, limiter.Request{Name: "q", Key: "used", Count: 1})
		if _, l := limiter.RateLimitHeaders([]limiter.Decision{used}); !strings.HasPrefix(l, `"q";r=1;t=`) || strings.HasSuffix(l, ";t=0") {
			t.Errorf("a quota one used: RateLimit %q, want the window's end", l)
		}
	})
}

// TestAChildsHeaderEntryIsItsOwn: a limit under a parent that refuses answers the family's
// refusal, but its own RateLimit entry describes itself (here: 1 of 2 left, whole in a second),
// not the parent's wait, as each limit of a /v1/limit batch keeps its own.
func TestAChildsHeaderEntryIsItsOwn(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock(1_700_000_000_000)
		e := newEngine(t, d, c.opts())
		mustPut(t, e, "org", limiter.Definition{Kind: limiter.FixedWindow, Rate: 1, Period: 3_600_000, Start: ptr(int64(0))})
		mustPut(t, e, "user", limiter.Definition{Kind: limiter.TokenBucket, Rate: 2, Period: 2_000, Parents: []limiter.Parent{{Name: "org", Key: "acme"}}})
		if got := mustLimit(t, e, limiter.Request{Name: "user", Key: "u", Count: 1}); !got.OK {
			t.Fatalf("the first: %+v", got)
		}
		refused := mustLimit(t, e, limiter.Request{Name: "user", Key: "u", Count: 1})
		if refused.OK || refused.RetryAfter == nil || *refused.RetryAfter < 1_000_000 {
			t.Fatalf("the second, refused by the org's hour: ok=%v retryAfter %s", refused.OK, millis(refused.RetryAfter))
		}
		_, l := limiter.RateLimitHeaders(limiter.WithParents([]limiter.Decision{refused}))
		if !strings.HasPrefix(l, `"user";r=1;t=1, "org";r=0;t=`) {
			t.Fatalf("RateLimit %q: want the user's own entry (1 left, whole in 1 s), then the org's wait", l)
		}
	})
}

// TestWaitSecondsRoundsUpAndIsAtLeastOne: what a refusal tells a person or a Retry-After header.
func TestWaitSecondsRoundsUpAndIsAtLeastOne(t *testing.T) {
	for _, c := range []struct {
		ms   *int64
		want int64
	}{{nil, 1}, {ptr(int64(0)), 1}, {ptr(int64(1)), 1}, {ptr(int64(1000)), 1}, {ptr(int64(1001)), 2}, {ptr(int64(1e15)), 1e12}} {
		if got := limiter.WaitSeconds(c.ms); got != c.want {
			t.Errorf("WaitSeconds(%s) = %d, want %d", millis(c.ms), got, c.want)
		}
	}
}
