package tenants

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// insertState gives tenant id n limit_state rows of limit "api", keys key-0 … key-(n-1).
func insertState(t *testing.T, e *env, id int64, n int) {
	t.Helper()
	for i := 0; i < n; i += 500 {
		var vals []string
		var args []any
		for j := i; j < min(i+500, n); j++ {
			vals = append(vals, "(?, 'api', ?, 0, 1, 0)")
			args = append(args, id, fmt.Sprintf("key-%d", j))
		}
		must(t, e.db.Gorm.Exec(`INSERT INTO limit_state (tenant_id, name, key, shard, value, ts) VALUES `+strings.Join(vals, ","), args...).Error)
	}
}

// lastServerEntry is the newest entry of the server's security log.
func lastServerEntry(t *testing.T, e *env) AuditEntry {
	t.Helper()
	log, err := e.svc.ServerAuditLog(e.ctx, 1)
	must(t, err)
	if len(log) == 0 {
		t.Fatal("the security log is empty")
	}
	return log[0]
}

// waitForBlockedDelete polls PostgreSQL until a batch of the deletion (a statement by ctid) waits
// for a lock, failing after 30 s.
func waitForBlockedDelete(t *testing.T, e *env) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int64
		must(t, e.db.Gorm.Raw(`SELECT COUNT(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()
			  AND wait_event_type = 'Lock' AND query LIKE 'DELETE FROM "limit_state" WHERE ctid%'`).Scan(&n).Error)
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("waited 30 s for the deletion's batch to wait for the row lock")
		}
		time.Sleep(5 * time.Millisecond) // the interval of the poll, not a guess at the ordering
	}
}

// TestDeleteRowsGoesOnPastARowUpdatedDuringItsBatch: on PostgreSQL a batch deletes the rows it
// selected by ctid, and skips one that another transaction updated meanwhile (the row has a new
// ctid): that batch deletes 999 rows of 1,000 while 501 remain, and deleteRows must go on to
// them rather than take the short batch for the table's end.
func TestDeleteRowsGoesOnPastARowUpdatedDuringItsBatch(t *testing.T) {
	e := newEnv(t, testkit.URL(t, db.Postgres))
	doomed := e.tenant(t, "doomed")
	insertState(t, e, doomed.ID, 1500)
	other := e.db.Gorm.Begin()
	t.Cleanup(func() { other.Rollback() })
	must(t, other.Exec(`UPDATE limit_state SET value = 2 WHERE tenant_id = ? AND key = 'key-0'`, doomed.ID).Error)
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := e.svc.deleteRows(context.Background(), "limit_state", doomed.ID)
		done <- result{n, err}
	}()
	waitForBlockedDelete(t, e)
	must(t, other.Commit().Error)
	r := <-done
	must(t, r.err)
	if left := tenantRowCounts(t, e, doomed.ID)["limit_state"]; left != 0 || r.n != 1500 {
		t.Fatalf("deleteRows deleted %d rows and left %d of 1500: it stopped at the batch that skipped the updated row", r.n, left)
	}
}

// TestDeleteTenantOnPostgresDeletesPastARowUpdatedDuringABatch: the same through DeleteTenant:
// a decision's update of one of the tenant's state rows while the deletion's batch waits for it
// leaves no row of the tenant, and the security log counts all 1,500.
func TestDeleteTenantOnPostgresDeletesPastARowUpdatedDuringABatch(t *testing.T) {
	e := newEnv(t, testkit.URL(t, db.Postgres))
	doomed := e.tenant(t, "doomed")
	insertState(t, e, doomed.ID, 1500)
	other := e.db.Gorm.Begin()
	t.Cleanup(func() { other.Rollback() })
	must(t, other.Exec(`UPDATE limit_state SET value = 2 WHERE tenant_id = ? AND key = 'key-0'`, doomed.ID).Error)
	done := make(chan error, 1)
	go func() { done <- e.svc.DeleteTenant(context.Background(), doomed.ID, "tester") }()
	waitForBlockedDelete(t, e)
	must(t, other.Commit().Error)
	must(t, <-done)
	if left := tenantRowCounts(t, e, doomed.ID)["limit_state"]; left != 0 {
		t.Fatalf("%d state rows of the deleted tenant left", left)
	}
	if last := lastServerEntry(t, e); last.Action != "tenant.delete" || !strings.Contains(last.Detail, "limit_state 1500") {
		t.Fatalf("the security log's last entry %+v is not the deletion of 1500 state rows", last)
	}
}
