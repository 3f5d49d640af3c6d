package limiter_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestAWaitPastAnOverridesExpiryIsTheNumbersThen: an override's numbers decide a key only until
// it expires, so a refusal (or a reservation) whose wait under them would end after that is told
// the wait under the numbers that decide from then on: not too short (retried and refused again)
// nor too long. At that wait the key admits, and a moment before it does not.
func TestAWaitPastAnOverridesExpiryIsTheNumbersThen(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		ctx := context.Background()
		check := func(name string, count float64) limiter.Decision {
			t.Helper()
			got, err := e.Check(ctx, tenant, limiter.Request{Name: name, Key: "k", Count: count})
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		wantWait := func(what string, got limiter.Decision, ok bool, ms int64) {
			t.Helper()
			if got.OK != ok || got.RetryAfter == nil || *got.RetryAfter != ms {
				t.Fatalf("%s: ok=%v, retryAfter %s; want ok=%v with retryAfter %d", what, got.OK, millis(got.RetryAfter), ok, ms)
			}
		}
		expiresIn := func(ms int64) *int64 { at := clock.Now().UnixMilli() + ms; return &at }

		// Too short before: 3 tokens at the override's 1/s is 3 s, but it ends after 1.5 s and
		// the definition's 0.1/s then needs 30 s from the same state.
		mustPut(t, e, "slow", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 10_000, Capacity: ptr(5.0)})
		mustOverride(t, e, "slow", limiter.Override{Match: "k", Rate: ptr(10.0), ExpiresAt: expiresIn(1_500)})
		if got := mustLimit(t, e, limiter.Request{Name: "slow", Key: "k", Count: 5}); !got.OK {
			t.Fatalf("the first 5: %+v", got)
		}
		wantWait("slow: 3 more under an override ending in 1.5 s", mustLimit(t, e, limiter.Request{Name: "slow", Key: "k", Count: 3}), false, 30_000)

		// Too long before: 3 tokens at the override's 0.1/s is 30 s, but it ends after 1 s and
		// the definition's 1/s then needs 3 s.
		mustPut(t, e, "fast", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 10_000})
		mustOverride(t, e, "fast", limiter.Override{Match: "k", Rate: ptr(1.0), Capacity: ptr(10.0), ExpiresAt: expiresIn(1_000)})
		if got := mustLimit(t, e, limiter.Request{Name: "fast", Key: "k", Count: 10}); !got.OK {
			t.Fatalf("the first 10: %+v", got)
		}
		wantWait("fast: 3 more under an override ending in 1 s", mustLimit(t, e, limiter.Request{Name: "fast", Key: "k", Count: 3}), false, 3_000)

		// A reservation under the override runs when the state it left is out of debt under the
		// definition's numbers: -3 at 0.1/s is 30 s, not the override's 3 s.
		mustPut(t, e, "later", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 10_000, Capacity: ptr(5.0), MaxReserved: ptr(5.0)})
		mustOverride(t, e, "later", limiter.Override{Match: "k", Rate: ptr(10.0), ExpiresAt: expiresIn(1_500)})
		if got := mustLimit(t, e, limiter.Request{Name: "later", Key: "k", Count: 5}); !got.OK {
			t.Fatalf("the first 5: %+v", got)
		}
		wantWait("later: a reservation of 3 under an override ending in 1.5 s", mustLimit(t, e, limiter.Request{Name: "later", Key: "k", Count: 3, Reserve: true}), true, 30_000)

		clock.Advance(2_999)
		if got := check("fast", 3); got.OK {
			t.Fatalf("fast, 1 ms before the wait it was told: %+v", got)
		}
		clock.Advance(1)
		if got := mustLimit(t, e, limiter.Request{Name: "fast", Key: "k", Count: 3}); !got.OK {
			t.Fatalf("fast, at the wait it was told: %+v", got)
		}
		clock.Advance(26_999) // 29,999 ms after the refusals
		if got := check("slow", 3); got.OK {
			t.Fatalf("slow, 1 ms before the wait it was told: %+v", got)
		}
		if got := check("later", 0); got.OK {
			t.Fatalf("later, 1 ms before its reservation's time: %+v (still in debt)", got)
		}
		clock.Advance(1)
		if got := mustLimit(t, e, limiter.Request{Name: "slow", Key: "k", Count: 3}); !got.OK {
			t.Fatalf("slow, at the wait it was told: %+v", got)
		}
		if got := check("later", 0); !got.OK {
			t.Fatalf("later, at its reservation's time: %+v", got)
		}
	})
}

// TestAWaitPastOverridesFollowsEveryRuleToCome: the wait past an override's expiry follows each
// rule that decides the key in turn (a deny until it ends, another override until it expires,
// then the definition), and a penalty the refusal starts holds it off until its end. Each is told
// exactly when it is admitted: refused 1 ms before, admitted then.
func TestAWaitPastOverridesFollowsEveryRuleToCome(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		ctx := context.Background()
		in := func(ms int64) *int64 { at := clock.Now().UnixMilli() + ms; return &at }
		type step struct {
			name  string
			count float64
			want  int64 // ms from now
		}
		var steps []step

		// A penalty of 60 s: the definition's numbers would admit once the override ends (5 s).
		mustPut(t, e, "pen", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 1_000, Capacity: ptr(10.0), Penalty: 60_000})
		mustOverride(t, e, "pen", limiter.Override{Match: "k", Rate: ptr(0.01), ExpiresAt: in(5_000)})
		// A deny decides after the override, for a second; the definition after it needs 30 s.
		mustPut(t, e, "dn", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 10_000, Capacity: ptr(5.0)})
		mustOverride(t, e, "dn", limiter.Override{Match: "k", Rate: ptr(10.0), ExpiresAt: in(1_000)})
		mustOverride(t, e, "dn", limiter.Override{Match: "*", Action: limiter.ActionDeny, ExpiresAt: in(2_000)})
		// A second override decides after the first, for a second: its 3 s end after it expires,
		// and the definition after it needs 300 s.
		mustPut(t, e, "ch", limiter.Definition{Kind: limiter.TokenBucket, Rate: 0.1, Period: 10_000, Capacity: ptr(5.0)})
		mustOverride(t, e, "ch", limiter.Override{Match: "k", Rate: ptr(0.5), ExpiresAt: in(1_000)})
		mustOverride(t, e, "ch", limiter.Override{Match: "*", Rate: ptr(10.0), ExpiresAt: in(2_000)})
		// The override's own wait ends exactly at its expiry, when it no longer decides: the
		// definition needs 30 s.
		mustPut(t, e, "at", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 10_000, Capacity: ptr(5.0)})
		mustOverride(t, e, "at", limiter.Override{Match: "k", Rate: ptr(10.0), ExpiresAt: in(3_000)})
		for _, first := range []struct {
			name  string
			count float64
		}{{"pen", 10}, {"dn", 5}, {"ch", 5}, {"at", 5}} {
			if got := mustLimit(t, e, limiter.Request{Name: first.name, Key: "k", Count: first.count}); !got.OK {
				t.Fatalf("%s: the first %v: %+v", first.name, first.count, got)
			}
		}
		steps = append(steps, step{"dn", 3, 30_000}, step{"ch", 3, 300_000}, step{"at", 3, 30_000})
		clock.Advance(1_000) // "pen": a second later; "dn" and "ch" asked at once, below
		got := mustLimit(t, e, limiter.Request{Name: "pen", Key: "k", Count: 1})
		if got.OK || got.RetryAfter == nil || *got.RetryAfter != 60_000 {
			t.Fatalf("pen: ok=%v retryAfter %s, want the penalty's 60,000 ms", got.OK, millis(got.RetryAfter))
		}
		clock.Advance(-1_000)
		for _, s := range steps {
			got := mustLimit(t, e, limiter.Request{Name: s.name, Key: "k", Count: s.count})
			if got.OK || got.RetryAfter == nil || *got.RetryAfter != s.want {
				t.Fatalf("%s: ok=%v retryAfter %s, want %d ms", s.name, got.OK, millis(got.RetryAfter), s.want)
			}
		}
		steps = append([]step{{"pen", 1, 61_000}}, steps...) // from the same start, a second later
		start := clock.Now().UnixMilli()
		for _, s := range steps {
			clock.Set(start + s.want - 1)
			if got, err := e.Check(ctx, tenant, limiter.Request{Name: s.name, Key: "k", Count: s.count}); err != nil || got.OK {
				t.Fatalf("%s, 1 ms before the wait it was told: ok=%v, %v", s.name, got.OK, err)
			}
			clock.Set(start + s.want)
			if got := mustLimit(t, e, limiter.Request{Name: s.name, Key: "k", Count: s.count}); !got.OK {
				t.Fatalf("%s, at the wait it was told: refused, retryAfter %s", s.name, millis(got.RetryAfter))
			}
		}
	})
}

// TestAReservationsTimeIsItsRefillsWhateverDecidesAfter: a reservation made under an override
// runs when its debt is paid back, by the refill of the numbers in force: a deny that decides
// after the override (forever) refuses decisions, not the refill (it was told 10^15 ms).
func TestAReservationsTimeIsItsRefillsWhateverDecidesAfter(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "r", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 1_000, Capacity: ptr(5.0), MaxReserved: ptr(5.0)})
		at := clock.Now().UnixMilli() + 1_000
		mustOverride(t, e, "r", limiter.Override{Match: "k", Rate: ptr(0.1), ExpiresAt: &at})
		mustOverride(t, e, "r", limiter.Override{Match: "*", Action: limiter.ActionDeny})
		if got := mustLimit(t, e, limiter.Request{Name: "r", Key: "k", Count: 5}); !got.OK {
			t.Fatalf("the first 5: %+v", got)
		}
		got := mustLimit(t, e, limiter.Request{Name: "r", Key: "k", Count: 3, Reserve: true})
		if !got.OK || got.RetryAfter == nil || *got.RetryAfter != 3_000 {
			t.Fatalf("a reservation of 3: ok=%v retryAfter %s, want 3,000 ms (3 at the definition's 1/s)", got.OK, millis(got.RetryAfter))
		}
	})
}

// TestADenysWaitIsWhatDecidesAfterIt: a key a deny refuses is told when what decides after the
// deny admits it: the definition over the key's spent bucket, or a longer deny behind it (it was
// told the deny's own expiry, and refused again then).
func TestADenysWaitIsWhatDecidesAfterIt(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		in := func(ms int64) *int64 { at := clock.Now().UnixMilli() + ms; return &at }
		mustPut(t, e, "empty", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 10_000, Capacity: ptr(5.0)})
		if got := mustLimit(t, e, limiter.Request{Name: "empty", Key: "k", Count: 5}); !got.OK {
			t.Fatalf("the first 5: %+v", got)
		}
		mustOverride(t, e, "empty", limiter.Override{Match: "k", Action: limiter.ActionDeny, ExpiresAt: in(2_000)})
		mustPut(t, e, "longer", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 10_000, Capacity: ptr(5.0)})
		mustOverride(t, e, "longer", limiter.Override{Match: "k", Action: limiter.ActionDeny, ExpiresAt: in(2_000)})
		mustOverride(t, e, "longer", limiter.Override{Match: "*", Action: limiter.ActionDeny, ExpiresAt: in(60_000)})
		mustPut(t, e, "alone", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 10_000, Capacity: ptr(5.0)})
		mustOverride(t, e, "alone", limiter.Override{Match: "k", Action: limiter.ActionDeny, ExpiresAt: in(2_000)})
		start := clock.Now().UnixMilli()
		for _, c := range []struct {
			name string
			want int64
		}{{"empty", 30_000}, {"longer", 60_000}, {"alone", 2_000}} {
			clock.Set(start)
			got := mustLimit(t, e, limiter.Request{Name: c.name, Key: "k", Count: 3})
			if got.OK || got.RetryAfter == nil || *got.RetryAfter != c.want {
				t.Fatalf("%s: ok=%v retryAfter %s, want %d ms", c.name, got.OK, millis(got.RetryAfter), c.want)
			}
			clock.Set(start + c.want - 1)
			if again, err := e.Check(context.Background(), tenant, limiter.Request{Name: c.name, Key: "k", Count: 3}); err != nil || again.OK {
				t.Fatalf("%s, 1 ms before the wait it was told: ok=%v, %v", c.name, again.OK, err)
			}
			clock.Set(start + c.want)
			if again := mustLimit(t, e, limiter.Request{Name: c.name, Key: "k", Count: 3}); !again.OK {
				t.Fatalf("%s, at the wait it was told: refused, retryAfter %s", c.name, millis(again.RetryAfter))
			}
		}
	})
}

// millis shows a retryAfter for a failure's message.
func millis(ms *int64) string {
	if ms == nil {
		return "none"
	}
	return strconv.FormatInt(*ms, 10) + " ms"
}
