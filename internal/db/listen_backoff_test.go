package db

import (
	"testing"
	"time"
)

func TestTheListenBackoffDoublesWhileFailingAndStartsAgainAfterListening(t *testing.T) {
	var waits []time.Duration
	var prev time.Duration
	for range 8 { // an outage: every attempt fails before listening
		prev = nextListenBackoff(prev, false)
		waits = append(waits, prev)
	}
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000}
	for i, w := range want {
		if waits[i] != w*time.Millisecond {
			t.Fatalf("wait %d of an outage: %v, want %v (all: %v)", i+1, waits[i], w*time.Millisecond, waits)
		}
	}
	// The database is back and the connection listened; when it is lost again, the first wait
	// is 100 ms once more, not the outage's 5 s.
	if got := nextListenBackoff(prev, true); got != 100*time.Millisecond {
		t.Fatalf("the wait after a connection that listened: %v, want 100ms", got)
	}
}
