package envoyrls

import (
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
