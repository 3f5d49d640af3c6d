package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// skewedInstances are two engines on one PostgreSQL database whose process clocks run 20 s
// behind and 20 s ahead of real time, as two app instances with unsynchronised clocks would.
// Neither sets Options.Now: decisions take their time from the database.
func skewedInstances(t *testing.T) (slow, fast *limiter.Engine) {
	t.Helper()
	url := testkit.URL(t, db.Postgres)
	slow = newEngine(t, testkit.OpenURL(t, url), limiter.Options{Clock: func() time.Time { return time.Now().Add(-20 * time.Second) }})
	fast = newEngine(t, testkit.OpenURL(t, url), limiter.Options{Clock: func() time.Time { return time.Now().Add(20 * time.Second) }})
	return slow, fast
}

// admittedOf sends n single-token decisions for key through e and counts the admitted ones.
func admittedOf(t *testing.T, e *limiter.Engine, name, key string, n int) int {
	t.Helper()
	admitted := 0
	for range n {
		if mustLimit(t, e, limiter.Request{Name: name, Key: key, Count: 1}).OK {
			admitted++
		}
	}
	return admitted
}

// TestSkewedInstancesAdmitNoMoreThanTheBound: with clocks 40 s apart, a token bucket (100 per
// 10 minutes) emptied through the slow instance is not refilled by the fast one, for a new key
// and after a reset; a sweep on the fast instance does not forget a row that is not full; a
// fixed window rolls over once, at the database's boundary, not at each instance's; and a
// sliding window admits no more than its rate through both.
func TestSkewedInstancesAdmitNoMoreThanTheBound(t *testing.T) {
	slow, fast := skewedInstances(t)
	ctx := context.Background()
	const rate, period = 100, 600_000 // 1 token per 6 s
	mustPut(t, slow, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: rate, Period: period})
	bound := func(since time.Time) int { // capacity + refill over the real time elapsed + the ms clock
		return rate + int(float64(rate)*float64(time.Since(since).Milliseconds())/period) + 1
	}

	for _, scenario := range []string{"new key", "after a reset"} {
		start := time.Now()
		if scenario == "after a reset" {
			if err := fast.Reset(ctx, tenant, "tb", ptr("k"), nil); err != nil {
				t.Fatal(err)
			}
			start = time.Now()
		}
		n := admittedOf(t, slow, "tb", "k", rate) + admittedOf(t, fast, "tb", "k", 20)
		if n > bound(start) {
			t.Fatalf("%s: %d admitted through two skewed instances, bound %d", scenario, n, bound(start))
		}
		t.Logf("%s: %d admitted, bound %d", scenario, n, bound(start))
	}

	// A row 5 tokens short of full is not full: the fast instance's sweeper must keep it (by its
	// own clock, 40 s later than the slow one's, it would read as refilled).
	if err := fast.Reset(ctx, tenant, "tb", ptr("s"), nil); err != nil {
		t.Fatal(err)
	}
	admittedOf(t, slow, "tb", "s", 5)
	if _, err := fast.Sweep(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if v := value(t, slow, "tb", "s"); v > 96 {
		t.Fatalf("after a sweep on the fast instance the key reads %v: the sweeper forgot a row that was not full", v)
	}

	// A fixed window whose boundary lies between the two instances' clocks, 10 s from now: the
	// database's time is before it, so both instances are in the same window of 50.
	boundary := time.Now().Add(10 * time.Second).UnixMilli()
	mustPut(t, slow, "fw", limiter.Definition{Kind: limiter.FixedWindow, Rate: 50, Period: 3_600_000, Start: ptr(boundary)})
	start := time.Now()
	n := admittedOf(t, slow, "fw", "k", 60) + admittedOf(t, fast, "fw", "k", 60)
	if time.Since(start) > 9*time.Second {
		t.Fatalf("the fixed-window part took %v and may have crossed its boundary; nothing was checked", time.Since(start))
	}
	if n != 50 {
		t.Fatalf("fixed window across the instances' boundaries: %d admitted within one window of 50", n)
	}

	// A sliding window (50 per hour, minute sub-intervals) counts both instances' admissions in
	// the same sub-intervals.
	mustPut(t, slow, "sw", limiter.Definition{Kind: limiter.SlidingWindow, Rate: 50, Period: 3_600_000, Resolution: 60})
	if n := admittedOf(t, slow, "sw", "k", 60) + admittedOf(t, fast, "sw", "k", 60); n > 50 {
		t.Fatalf("sliding window through two skewed instances: %d admitted, bound 50", n)
	}
}
