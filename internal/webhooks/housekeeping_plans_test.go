package webhooks

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestTheOutboxsLooksReadThroughAnIndex: the outbox keeps a week of finished deliveries, and the
// housekeeping (every minute, on every instance) read all of them to find the few waiting past
// an endpoint's bound and the ones finished long ago, until migration 00022.
func TestTheOutboxsLooksReadThroughAnIndex(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		const now = int64(1_700_000_000_000)
		before := now - KeepFinished.Milliseconds()
		for _, c := range []struct {
			name string
			look testkit.Look
		}{
			// Both rank waiting deliveries (each tenant's, each endpoint's), and the partial index
			// holds them alone: the outbox's bound keeps it small however many have finished.
			{"deliveries due", testkit.Look{SQL: dueSQL, Args: []any{now}, WholeIndexes: []string{"webhook_deliveries_waiting"}}},
			{"deliveries waiting past their endpoint's bound", testkit.Look{SQL: overflowSQL,
				Args:         []any{now, outboxFull, finishedNextAttempt, MaxWaitingPerEndpoint, housekeepingBatch},
				WholeIndexes: []string{"webhook_deliveries_waiting"}}},
			{"deliveries finished long ago", testkit.Look{SQL: pruneSQL, Args: []any{before, before, before, before, housekeepingBatch}}},
		} {
			if whole := testkit.WholeTableReads(t, d, c.look); len(whole) > 0 {
				t.Errorf("the look for %s reads a whole table:\n%s", c.name, strings.Join(whole, "\n"))
			}
		}
	})
}
