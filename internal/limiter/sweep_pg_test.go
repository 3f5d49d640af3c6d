package limiter

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestSweepDeletionOnPostgreSQLNeedsTheJudgedStateAndDefinition drives pgDeleteUnchanged directly:
// a row goes only if it still holds the state the sweeper scanned and its limit still has the
// definition the row was judged by (or, for inline state, still none). The races it guards
// against happen between the sweeper's scan and its deletion, which no clock hook reaches.
func TestSweepDeletionOnPostgreSQLNeedsTheJudgedStateAndDefinition(t *testing.T) {
	d := testkit.Open(t, db.Postgres)
	ctx := context.Background()
	var now atomic.Int64 // the engine's worker reads it
	now.Store(1_700_000_000_000)
	e := newEngine(t, d, Options{Now: func() time.Time { return time.UnixMilli(now.Load()) }})
	const tenantID = int64(1)
	def := Definition{Kind: TokenBucket, Rate: 1, Period: 3_600_000, Capacity: ptr(10.0)}
	put := func(name string, d Definition) StoredDefinition {
		t.Helper()
		s, _, err := e.PutDefinition(ctx, tenantID, name, d, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	write := func(name, key string, cfg *Definition) {
		t.Helper()
		if _, err := e.Limit(ctx, tenantID, Request{Name: name, Key: key, Count: 0, Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
	scan := func(name, key string) fullStateRow {
		t.Helper()
		rows, err := loadRows(d.Gorm, []rowKey{{tenantID, name, key, 0}})
		if err != nil || len(rows) != 1 {
			t.Fatalf("row %s/%s: %v (%d rows)", name, key, err, len(rows))
		}
		return rows[rowKey{tenantID, name, key, 0}]
	}
	deleteJudged := func(r fullStateRow, definedAt *time.Time) int {
		t.Helper()
		var version int64
		if definedAt != nil { // the version of the limit's overrides the row was judged with
			if err := d.Gorm.Raw("SELECT overrides_version FROM limit_definitions WHERE tenant_id = ? AND name = ?", tenantID, r.Name).Scan(&version).Error; err != nil {
				t.Fatal(err)
			}
		}
		n, err := e.deleteUnchanged(ctx, []fullStateRow{r}, []*time.Time{definedAt}, []int64{version})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	v1 := put("tb", def)
	write("tb", "same", nil)
	if n := deleteJudged(scan("tb", "same"), &v1.UpdatedAt); n != 1 {
		t.Fatalf("an unchanged row under an unchanged definition: deleted %d, want 1", n)
	}

	write("tb", "written", nil)
	judged := scan("tb", "written")
	now.Add(1000)
	if _, err := e.Limit(ctx, tenantID, Request{Name: "tb", Key: "written", Count: 3}); err != nil {
		t.Fatal(err)
	}
	if n := deleteJudged(judged, &v1.UpdatedAt); n != 0 {
		t.Fatal("deleted a row a decision wrote after the scan")
	}

	write("tb", "redefined", nil)
	judged = scan("tb", "redefined")
	now.Add(1000)
	bigger := def
	bigger.Capacity = ptr(20.0) // the stored 10 tokens are no longer full
	put("tb", bigger)
	if n := deleteJudged(judged, &v1.UpdatedAt); n != 0 {
		t.Fatal("deleted a row judged full under a definition that has changed since")
	}

	// penalty_until is state too: a row whose penalty changed since the scan is not the row judged.
	// (No decision starts a penalty on a row that reads full; the column is compared all the same,
	// as every state column is.)
	vp := put("pen", def)
	write("pen", "penalized", nil)
	write("pen", "untouched", nil)
	judged, untouched := scan("pen", "penalized"), scan("pen", "untouched")
	if err := d.Gorm.Exec(`UPDATE limit_state SET penalty_until = ? WHERE tenant_id = ? AND name = 'pen' AND key = 'penalized'`,
		now.Load()+60_000, tenantID).Error; err != nil {
		t.Fatal(err)
	}
	if n := deleteJudged(judged, &vp.UpdatedAt); n != 0 {
		t.Fatal("deleted a row whose penalty changed after the scan")
	}
	if n := deleteJudged(untouched, &vp.UpdatedAt); n != 1 {
		t.Fatalf("the same row without the change: deleted %d, want 1", n)
	}

	// An override that raises the key's capacity after the row was judged full under none.
	write("tb", "overridden", nil)
	judged = scan("tb", "overridden")
	before, _ := e.GetDefinition(ctx, tenantID, "tb")
	var noOverrides int64
	if err := d.Gorm.Raw("SELECT overrides_version FROM limit_definitions WHERE tenant_id = ? AND name = 'tb'", tenantID).Scan(&noOverrides).Error; err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.PutOverride(ctx, tenantID, "tb", Override{Match: "overridden", Capacity: ptr(40.0)}, nil); err != nil {
		t.Fatal(err)
	}
	if n, err := e.deleteUnchanged(ctx, []fullStateRow{judged}, []*time.Time{&before.UpdatedAt}, []int64{noOverrides}); err != nil || n != 0 {
		t.Fatalf("deleted a row judged full before an override raised its capacity: %d, %v", n, err)
	}

	write("adhoc", "k", &def)
	judged = scan("adhoc", "k")
	put("adhoc", bigger)
	if n := deleteJudged(judged, nil); n != 0 {
		t.Fatal("deleted inline state judged without a definition after one was stored")
	}
}
