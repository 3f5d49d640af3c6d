package limiter

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestTheSweepersLooksReadThroughAnIndex plans each statement with which a sweeper looks for
// rows by something other than their primary key, on both dialects, and requires that it read
// a range of an index: the tables grow with the service's history, and on PostgreSQL, where the
// sweeper's transaction turns sequential scans off, a forced scan's disable cost passed the JIT
// thresholds (the look for closed holds compiled itself every second, about 50 ms of the
// database's CPU, until migration 00021 gave it an index; SQLite walked all of hold_key_seqs
// each second until 00022).
func TestTheSweepersLooksReadThroughAnIndex(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		const now, batch = int64(1_700_000_000_000), 100
		for _, c := range []struct {
			name string
			sql  string
			args []any
		}{
			{"due holds", sqlDueHolds, []any{now, batch}},
			{"old holds", sqlOldHolds, []any{now - ClosedHoldRetention, batch}},
			{"old give-backs", sqlPruneGiveBacks, []any{now - giveBacksKept, batch}},
			{"old numberings' give-backs", sqlPruneSeqsLog, []any{now - giveBacksKept, batch}},
			{"old numberings", sqlPruneSeqs, []any{now - giveBacksKept, batch}},
			{"expired leases", sqlSweepLeases, []any{now, batch}},
			{"expired idempotent answers", sqlIdemSweep, []any{now, batch}},
		} {
			if whole := testkit.WholeTableReads(t, d, testkit.Look{SQL: c.sql, Args: c.args}); len(whole) > 0 {
				t.Errorf("the sweeper's look for %s reads a whole table:\n%s", c.name, strings.Join(whole, "\n"))
			}
		}
	})
}
