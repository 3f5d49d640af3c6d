package captcha

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestTheSweepsLooksReadThroughAnIndex: sessions live up to a year, so captcha_sessions grows
// with the service's traffic, and the sweep looked for expired ones by reading all of it (0.5 s a
// million rows on SQLite) until migration 00022.
func TestTheSweepsLooksReadThroughAnIndex(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		for name, q := range map[string]string{"consumed challenges": sqlSweepUsed, "sessions": sqlSweepSessions} {
			if whole := testkit.WholeTableReads(t, d, testkit.Look{SQL: q, Args: []any{dbTime(time.Now()), sweepBatch}}); len(whole) > 0 {
				t.Errorf("the sweep's look for expired %s reads a whole table:\n%s", name, strings.Join(whole, "\n"))
			}
		}
	})
}
