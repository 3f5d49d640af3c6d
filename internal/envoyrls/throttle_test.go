package envoyrls

import (
	"fmt"
	"testing"
	"time"
)

// TestThrottleLetsOneThroughAPeriod: the first event goes through, the next ones within the
// period are held back and counted, and the first one after it reports how many were.
func TestThrottleLetsOneThroughAPeriod(t *testing.T) {
	var th throttle
	t0 := time.Unix(1_000, 0)
	steps := []struct {
		at       time.Duration
		ok       bool
		heldBack int
	}{
		{0, true, 0},
		{time.Second, false, 0},
		{59 * time.Second, false, 0},
		{time.Minute, true, 2},
		{time.Minute + time.Second, false, 0},
		{3 * time.Minute, true, 1},
	}
	for _, s := range steps {
		if ok, n := th.allow(t0.Add(s.at), time.Minute); ok != s.ok || n != s.heldBack {
			t.Fatalf("at %v: allow = %v, %d held back; want %v, %d", s.at, ok, n, s.ok, s.heldBack)
		}
	}
}

// TestWarningThrottleIsPerKeyAndBounded: each tenant's limit has its own throttle, and however
// many keys arrive the throttle holds at most maxWarningKeys: past that, new keys share one
// throttle until the period of the ones held has passed, when they are cleared for new ones.
func TestWarningThrottleIsPerKeyAndBounded(t *testing.T) {
	var w warningThrottle
	t0 := time.Unix(1_000, 0)
	a, b := warningKey{1, "api.org.user"}, warningKey{2, "api.org.user"}
	if ok, _ := w.allow(a, t0, time.Minute); !ok {
		t.Fatal("the first event of tenant 1 was held back")
	}
	if ok, _ := w.allow(b, t0, time.Minute); !ok {
		t.Fatal("tenant 2's first event was held back by tenant 1's")
	}
	if ok, _ := w.allow(a, t0, time.Minute); ok {
		t.Fatal("tenant 1's second event within the period went through")
	}
	for i := range 2 * maxWarningKeys {
		w.allow(warningKey{3, fmt.Sprint("limit", i)}, t0.Add(time.Second), time.Minute)
	}
	if n := len(w.byKey); n > maxWarningKeys {
		t.Fatalf("%d throttles held, want at most %d", n, maxWarningKeys)
	}
	later := t0.Add(2 * time.Minute)
	if ok, _ := w.allow(warningKey{4, "new"}, later, time.Minute); !ok {
		t.Fatal("a new key once the held ones' period passed was held back")
	}
	if ok, _ := w.allow(warningKey{5, "new"}, later, time.Minute); !ok {
		t.Fatal("a second new key shared a throttle though the expired ones were cleared")
	}
}
