package limiter_test

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestChangedNumbersCountFromTheKeysLastDecision holds the README's "Replacing a definition"
// to what a key has after its limit's rate changes (the state is kept): a bucket, fixed window or
// quota keeps what the key has left, capped at the new maximum, and a sliding window what it
// used; the new numbers count from the key's last decision, not from the change; an override's
// numbers do the same when they begin and when they end.
func TestChangedNumbersCountFromTheKeysLastDecision(t *testing.T) {
	const start, hour, minute = int64(1_700_000_000_000), int64(3_600_000), int64(60_000)
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(start)
		e := newEngine(t, d, clock.opts())
		origin := start
		want := func(what, name string, v float64) {
			t.Helper()
			if got := value(t, e, name, "k"); got != v {
				t.Errorf("%s: value %v, want %v", what, got, v)
			}
		}
		take := func(name string, n float64) {
			t.Helper()
			if got := mustLimit(t, e, limiter.Request{Name: name, Key: "k", Count: n}); !got.OK {
				t.Fatalf("%s: %v refused: %+v", name, n, got)
			}
		}

		// Lowered: what the key has left, capped at the new maximum (50 left of 100, rate 20: 20).
		mustPut(t, e, "bucket-down", limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: hour})
		mustPut(t, e, "window-down", limiter.Definition{Kind: limiter.FixedWindow, Rate: 100, Period: minute, Start: &origin})
		mustPut(t, e, "sliding-down", limiter.Definition{Kind: limiter.SlidingWindow, Rate: 100, Period: minute, Resolution: 6})
		for _, name := range []string{"bucket-down", "window-down", "sliding-down"} {
			take(name, 50)
		}
		mustPut(t, e, "bucket-down", limiter.Definition{Kind: limiter.TokenBucket, Rate: 20, Period: hour})
		mustPut(t, e, "window-down", limiter.Definition{Kind: limiter.FixedWindow, Rate: 20, Period: minute, Start: &origin})
		mustPut(t, e, "sliding-down", limiter.Definition{Kind: limiter.SlidingWindow, Rate: 20, Period: minute, Resolution: 6})
		want("a bucket's rate lowered", "bucket-down", 20)
		want("a fixed window's rate lowered", "window-down", 20)
		if got := mustLimit(t, e, limiter.Request{Name: "sliding-down", Key: "k", Count: 1}); got.OK {
			t.Errorf("a sliding window's rate lowered below what the key used: admitted %+v", got)
		}

		// Raised in the window of the key's last decision: a fixed window or quota gives nothing
		// more until the window ends; a sliding window counts what was used against the new rate.
		mustPut(t, e, "window-up", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: minute, Start: &origin})
		mustPut(t, e, "quota-up", limiter.Definition{Kind: limiter.Quota, Rate: 10, Calendar: "day", TimeZone: "UTC"})
		mustPut(t, e, "sliding-up", limiter.Definition{Kind: limiter.SlidingWindow, Rate: 10, Period: minute, Resolution: 6})
		for _, name := range []string{"window-up", "quota-up", "sliding-up"} {
			take(name, 10)
		}
		mustPut(t, e, "window-up", limiter.Definition{Kind: limiter.FixedWindow, Rate: 100, Period: minute, Start: &origin})
		mustPut(t, e, "quota-up", limiter.Definition{Kind: limiter.Quota, Rate: 100, Calendar: "day", TimeZone: "UTC"})
		mustPut(t, e, "sliding-up", limiter.Definition{Kind: limiter.SlidingWindow, Rate: 100, Period: minute, Resolution: 6})
		want("a fixed window's rate raised in the window of the key's last decision", "window-up", 0)
		want("a quota's rate raised in the period of the key's last decision", "quota-up", 0)
		want("a sliding window's rate raised", "sliding-up", 90)

		// Raised after the key's last decision's window has ended: the key starts the current
		// window with the new numbers, as a key never decided does.
		mustPut(t, e, "window-later", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: minute, Start: &origin})
		take("window-later", 10)
		// A bucket refills at the new rate for the whole time since the key's last decision:
		// drained under 1 an hour, ten hours later it holds 10; raised to 1,000 an hour (capacity
		// 100), it holds 100 at once.
		mustPut(t, e, "bucket-up", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: hour, Capacity: ptr(100.0)})
		take("bucket-up", 100)
		clock.Advance(10 * hour)
		want("a bucket ten hours after it was drained", "bucket-up", 10)
		mustPut(t, e, "bucket-up", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1000, Period: hour, Capacity: ptr(100.0)})
		want("a bucket's rate raised ten hours after its key's last decision", "bucket-up", 100)
		want("a fixed window in a later window, before the change", "window-later", 10)
		mustPut(t, e, "window-later", limiter.Definition{Kind: limiter.FixedWindow, Rate: 100, Period: minute, Start: &origin})
		want("a fixed window's rate raised in a later window than the key's last decision", "window-later", 100)

		// A concurrency limit keeps its leases in flight: below a lowered rate the free slots
		// (value) go negative by the excess, and a refusal's remaining stays 0.
		mustPut(t, e, "slots", limiter.Definition{Kind: limiter.Concurrency, Rate: 3, LeaseTTL: hour})
		for range 3 {
			take("slots", 1)
		}
		mustPut(t, e, "slots", limiter.Definition{Kind: limiter.Concurrency, Rate: 1, LeaseTTL: hour})
		want("three leases in flight under a rate lowered to 1", "slots", -2)
		if got := mustLimit(t, e, limiter.Request{Name: "slots", Key: "k", Count: 1}); got.OK || got.Remaining != 0 {
			t.Errorf("a lease over a lowered rate: %+v, want refused with remaining 0", got)
		}

		// An override's numbers, when they end, count from the key's last decision too: drained
		// under 1 an hour, the key holds about 2 a millisecond before the override expires two
		// hours later, and the definition's full 100 when it has.
		mustPut(t, e, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1000, Period: hour, Capacity: ptr(100.0)})
		expires := clock.Now().UnixMilli() + 2*hour
		mustOverride(t, e, "api", limiter.Override{Match: "k", Rate: ptr(1.0), ExpiresAt: &expires})
		take("api", 100)
		clock.Advance(2*hour - 1)
		if got := value(t, e, "api", "k"); got < 1.99 || got >= 2 {
			t.Errorf("under the override, a millisecond before it expires: value %v, want just below 2", got)
		}
		clock.Advance(1)
		want("the override expired", "api", 100)
	})
}
