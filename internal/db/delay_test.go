package db

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestRetryDelays pins the schedule: a PostgreSQL conflict's first retry goes at once and its
// later ones back off as SQLite's busy errors do from the first, one step later; a lock wait
// that lock_timeout ended backs off from the first, as a busy error does; every wait is
// full-jittered below its cap and at least a microsecond.
func TestRetryDelays(t *testing.T) {
	p := RetryPolicy{BaseDelay: time.Millisecond, MaxDelay: 8 * time.Millisecond}
	conflict := &pgconn.PgError{Code: "40001"}
	busy := errors.New("SQLITE_BUSY: database is locked")
	lockTimeout := &pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"}
	for _, tc := range []struct {
		name string
		n    int
		err  error
		max  time.Duration // 0: no wait at all
	}{
		{"conflict, first retry", 1, conflict, 0},
		{"conflict, second retry", 2, conflict, time.Millisecond},
		{"conflict, third retry", 3, conflict, 2 * time.Millisecond},
		{"conflict, capped", 30, conflict, 8 * time.Millisecond},
		{"busy, first retry", 1, busy, time.Millisecond},
		{"busy, second retry", 2, busy, 2 * time.Millisecond},
		{"busy, capped", 30, busy, 8 * time.Millisecond},
		{"lock timeout, first retry", 1, lockTimeout, time.Millisecond},
		{"lock timeout, second retry", 2, lockTimeout, 2 * time.Millisecond},
	} {
		longest := time.Duration(0)
		for range 2000 {
			d := p.delay(tc.n, tc.err)
			if tc.max == 0 && d != 0 {
				t.Fatalf("%s: waited %v; want no wait", tc.name, d)
			}
			if tc.max > 0 && (d < time.Microsecond || d > tc.max+time.Microsecond) {
				t.Fatalf("%s: waited %v; want 1 µs to %v", tc.name, d, tc.max+time.Microsecond)
			}
			longest = max(longest, d)
		}
		if tc.max > 0 && longest < tc.max/2 { // 2,000 draws: the jitter spans the whole range
			t.Fatalf("%s: the longest of 2,000 waits was %v; want the jitter to reach towards %v", tc.name, longest, tc.max)
		}
	}
}
