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
			sql  string
			args []any
		}{
			{"deliveries due", dueSQL, []any{now}},
			{"deliveries waiting past their endpoint's bound", overflowSQL, []any{now, outboxFull, finishedNextAttempt, MaxWaitingPerEndpoint, housekeepingBatch}},
			{"deliveries finished long ago", pruneSQL, []any{before, before, before, before, housekeepingBatch}},
		} {
			if whole := testkit.WholeTableReads(t, d, c.sql, c.args...); len(whole) > 0 {
				t.Errorf("the look for %s reads a whole table:\n%s", c.name, strings.Join(whole, "\n"))
			}
		}
	})
}
