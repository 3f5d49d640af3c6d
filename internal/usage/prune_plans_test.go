package usage

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestThePrunesLooksReadThroughAnIndex: the usage tables hold a bucket per limit per minute or
// hour for their retention, and the hourly prune read all of each to find the old ones (0.1-0.2 s
// a million rows; past a few million, PostgreSQL's JIT threshold) until migration 00022.
func TestThePrunesLooksReadThroughAnIndex(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		for _, q := range []string{sqlPruneStats, sqlPruneStatsHourly, sqlPruneTopKeys, sqlPruneTopKeysHourly, sqlPruneChunkIDs} {
			if whole := testkit.WholeTableReads(t, d, testkit.Look{SQL: q, Args: []any{int64(1_700_000_000_000), pruneRows}}); len(whole) > 0 {
				t.Errorf("%s\nreads a whole table:\n%s", q, strings.Join(whole, "\n"))
			}
		}
	})
}
