package tenants

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
	"gorm.io/gorm"
)

// pauseKey carries, in the context given to DeleteTenant, what this package's tests do in place
// of its wait for the key caches (pauseForCaches).
type pauseKey struct{}

// withPause returns ctx, in which DeleteTenant calls pause instead of waiting.
func withPause(ctx context.Context, pause func(ctx context.Context, d time.Duration) error) context.Context {
	return context.WithValue(ctx, pauseKey{}, pause)
}

// listedKey carries, in the context given to DeleteTenant, what a test does once the members are
// listed (membersListed).
type listedKey struct{}

// The tenants tests do not wait out the key caches on the wall clock (seconds per deletion): the
// pause returns at once, or runs what the test put in the context (withPause). The other
// packages' tests, the api's among them, wait for real.
func init() {
	pauseForCaches = func(ctx context.Context, d time.Duration) error {
		if pause, ok := ctx.Value(pauseKey{}).(func(context.Context, time.Duration) error); ok {
			return pause(ctx, d)
		}
		return ctx.Err()
	}
	membersListed = func(ctx context.Context) {
		if then, ok := ctx.Value(listedKey{}).(func()); ok {
			then()
		}
	}
}

// TestADeletionLeavesAMemberMovedAwayMeanwhile: a member an operator moves to another tenant
// after the deletion listed the members (or removes) is not removed with the deleted tenant,
// and the deletion finishes.
func TestADeletionLeavesAMemberMovedAwayMeanwhile(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		doomed, kept := e.tenant(t, "doomed"), e.tenant(t, "kept")
		moved, err := e.svc.CreateUser(e.ctx, "moved@example.com", "moved-password-1", false, &doomed.ID, "test", "")
		must(t, err)
		removed, err := e.svc.CreateUser(e.ctx, "removed@example.com", "removed-password-1", false, &doomed.ID, "test", "")
		must(t, err)
		_, err = e.svc.CreateUser(e.ctx, "stays@example.com", "stays-password-1", false, &doomed.ID, "test", "")
		must(t, err)
		ctx := context.WithValue(e.ctx, listedKey{}, func() {
			must(t, e.svc.SetRole(e.ctx, nil, moved.ID, RoleViewer, &kept.ID, "user:op@example.com"))
			must(t, e.svc.RemoveUser(e.ctx, nil, removed.ID, "user:op@example.com"))
		})
		must(t, e.svc.DeleteTenant(ctx, doomed.ID, "user:op@example.com"))
		u, err := e.svc.User(e.ctx, moved.ID)
		if err != nil || u.TenantID == nil || *u.TenantID != kept.ID {
			t.Fatalf("the member moved to another tenant during the deletion: %+v, %v; want kept, in tenant %d", u, err, kept.ID)
		}
		if _, err := e.svc.UserByEmail(e.ctx, "stays@example.com"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("the deleted tenant's last member: %v; want removed", err)
		}
	})
}

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

// tenantWithARowBeingUpdated is a PostgreSQL tenant "doomed" with 1,500 state rows, and an open
// transaction (other, to commit) that has updated the first of them.
func tenantWithARowBeingUpdated(t *testing.T) (*env, Tenant, *gorm.DB) {
	t.Helper()
	e := newEnv(t, testkit.URL(t, db.Postgres))
	doomed := e.tenant(t, "doomed")
	insertState(t, e, doomed.ID, 1500)
	other := e.db.Gorm.Begin()
	t.Cleanup(func() { other.Rollback() })
	must(t, other.Exec(`UPDATE limit_state SET value = 2 WHERE tenant_id = ? AND key = 'key-0'`, doomed.ID).Error)
	return e, doomed, other
}

// TestDeleteRowsGoesOnPastARowUpdatedDuringItsBatch: on PostgreSQL a batch deletes the rows it
// selected by ctid, and skips one that another transaction updated meanwhile (the row has a new
// ctid): that batch deletes 999 rows of 1,000 while 501 remain, and deleteRows must go on to
// them rather than take the short batch for the table's end.
func TestDeleteRowsGoesOnPastARowUpdatedDuringItsBatch(t *testing.T) {
	e, doomed, other := tenantWithARowBeingUpdated(t)
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
	e, doomed, other := tenantWithARowBeingUpdated(t)
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

// TestDeleteTenantWaitsOutTheKeyCachesBeforeDeleting: after suspending the tenant, and before it
// deletes any row, DeleteTenant waits the key cache's TTL and the retry budget. Meanwhile an
// instance that cannot hear of the suspension (no LISTEN, as the server is to the CLI on SQLite)
// still admits the tenant's key from its cache, and its requests create a limit, decide on it
// and write the tenant's audit log: none of what they wrote survives the deletion. On SQLite and
// PostgreSQL.
func TestDeleteTenantWaitsOutTheKeyCachesBeforeDeleting(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		e := newEnv(t, url)
		doomed := e.tenant(t, "doomed")
		seedTenant(t, e, doomed.ID, 10)
		_, secret := e.key(t, doomed.ID, KindSecret)
		staleDB := testkit.OpenURL(t, url)
		stale := NewService(staleDB, testPepper, nil, WithAuthCacheTTL(time.Hour)) // not Run: hears nothing
		engine := limiter.NewEngine(staleDB, limiter.Options{})
		testkit.Run(t, engine.Run)
		if _, err := stale.Authenticate(e.ctx, secret, KindSecret); err != nil {
			t.Fatal(err)
		}
		before := tenantRowCounts(t, e, doomed.ID)

		paused := 0
		ctx := withPause(e.ctx, func(ctx context.Context, d time.Duration) error {
			paused++
			if want := DefaultAuthCacheTTL + e.db.Retry.Budget; d != want {
				t.Errorf("DeleteTenant waits %v for the key caches, want the TTL and the retry budget, %v", d, want)
			}
			if tn, err := e.svc.Tenant(ctx, doomed.ID); err != nil || tn.SuspendedAt == nil {
				t.Errorf("the tenant is not suspended when the deletion waits: %+v, %v", tn, err)
			}
			if now := tenantRowCounts(t, e, doomed.ID); now["limit_state"] != before["limit_state"] || now["audit_log"] < before["audit_log"] {
				t.Errorf("rows were deleted before the wait: %v, before %v", now, before)
			}
			// A request the stale instance admits from its cache during the wait.
			p, err := stale.Authenticate(ctx, secret, KindSecret)
			if err != nil {
				t.Fatalf("the stale instance refused the key during the wait (%v): the test no longer shows a cached key writing", err)
			}
			capacity := 5.0
			if _, _, err := engine.PutDefinition(ctx, p.TenantID, "late", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 1000, Capacity: &capacity}, nil); err != nil {
				t.Fatal(err)
			}
			if d, err := engine.Limit(ctx, p.TenantID, limiter.Request{Name: "late", Key: "k", Count: 1}); err != nil || !d.OK {
				t.Fatalf("decision during the wait: %+v, %v", d, err)
			}
			return stale.Audit(ctx, &p.TenantID, "key:"+p.KeyID, "limit.create", "late", "during the wait")
		})
		must(t, e.svc.DeleteTenant(ctx, doomed.ID, "tester"))
		if paused != 1 {
			t.Fatalf("DeleteTenant waited for the key caches %d times, want once", paused)
		}
		for table, n := range tenantRowCounts(t, e, doomed.ID) {
			if n != 0 {
				t.Errorf("%s has %d rows of the deleted tenant, written by a cached key during the wait", table, n)
			}
		}
	})
}

// TestDeleteTenantDeletesWhatIsWrittenDuringItsBatches: rows of the tenant written into tables
// whose batches are done, while later tables' batches run (here a trigger on webhook_endpoints,
// deleted after them, writes what a request admitted before the suspension could: a limit, its
// state, an audit entry), are deleted by the transaction that deletes the tenant, and counted in
// the security log. On SQLite and PostgreSQL.
func TestDeleteTenantDeletesWhatIsWrittenDuringItsBatches(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		doomed := e.tenant(t, "doomed")
		seedTenant(t, e, doomed.ID, 10)
		tables, err := e.svc.TenantTables(e.ctx)
		must(t, err)
		for _, table := range []string{"audit_log", "limit_definitions", "limit_state"} {
			if !slicesSortedBefore(tables, table, "webhook_endpoints") {
				t.Fatalf("the deletion's table order %v no longer puts %s before webhook_endpoints: move the trigger", tables, table)
			}
		}
		late := []string{
			`CREATE TRIGGER late_write AFTER DELETE ON webhook_endpoints BEGIN
				INSERT INTO limit_definitions (tenant_id, name, kind, rate, period, created_at, updated_at) VALUES (OLD.tenant_id, 'late', 'token_bucket', 1, 1000, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP);
				INSERT INTO limit_state (tenant_id, name, key, shard, value, ts) VALUES (OLD.tenant_id, 'late', 'k', 0, 1, 0);
				INSERT INTO audit_log (tenant_id, actor, action, target, detail, created_at) VALUES (OLD.tenant_id, 'key:x', 'limit.create', 'late', '', CURRENT_TIMESTAMP);
			END`,
		}
		if e.db.Dialect == db.Postgres {
			late = []string{
				`CREATE FUNCTION late_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
					INSERT INTO limit_definitions (tenant_id, name, kind, rate, period, created_at, updated_at) VALUES (OLD.tenant_id, 'late', 'token_bucket', 1, 1000, now(), now());
					INSERT INTO limit_state (tenant_id, name, key, shard, value, ts) VALUES (OLD.tenant_id, 'late', 'k', 0, 1, 0);
					INSERT INTO audit_log (tenant_id, actor, action, target, detail, created_at) VALUES (OLD.tenant_id, 'key:x', 'limit.create', 'late', '', now());
					RETURN OLD;
				END $$`,
				`CREATE TRIGGER late_write AFTER DELETE ON webhook_endpoints FOR EACH ROW EXECUTE FUNCTION late_write()`,
			}
		}
		for _, q := range late {
			must(t, e.db.Gorm.Exec(q).Error)
		}
		must(t, e.svc.DeleteTenant(e.ctx, doomed.ID, "tester"))
		for table, n := range tenantRowCounts(t, e, doomed.ID) {
			if n != 0 {
				t.Errorf("%s has %d rows of the deleted tenant, written while the deletion ran", table, n)
			}
		}
		// seedTenant wrote 10 state rows, the trigger one more.
		if last := lastServerEntry(t, e); last.Action != "tenant.delete" || !strings.Contains(last.Detail, "limit_state 11,") {
			t.Fatalf("the security log's last entry %+v does not count the state row written during the batches", last)
		}
	})
}

// TestATenantBeingDeletedCannotBeResumedOrChanged: once a deletion has begun (here, paused after
// listing the members), the tenant reads as being deleted and every change in it is
// ErrTenantBeingDeleted: a resume (which would let its keys decide again, half-deleted), a member
// moved in from another tenant (who would be deleted with it, unaudited), a key, an invitation
// made or accepted, an account, a plan, a rename, its captcha settings. The member stays in their tenant, and the
// deletion finishes. A deletion cut short leaves the tenant marked and suspended; deleting it
// again finishes it.
func TestATenantBeingDeletedCannotBeResumedOrChanged(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		doomed, kept := e.tenant(t, "doomed"), e.tenant(t, "kept")
		_, err := e.svc.CreateUser(e.ctx, "admin@doomed.example", "admin-password-1", false, &doomed.ID, "test", "")
		must(t, err)
		bystander, err := e.svc.CreateUser(e.ctx, "bystander@kept.example", "bystander-password-1", false, &kept.ID, "test", "")
		must(t, err)
		_, invitation, err := e.svc.CreateInvite(e.ctx, &doomed.ID, "invited@doomed.example", RoleViewer, 0, "test")
		must(t, err)
		_, doomedSecret := e.key(t, doomed.ID, KindSecret)
		const op = "user:op@example.com"
		rate := 5.0
		changes := map[string]func() error{
			"resume": func() error { return e.svc.SetSuspended(e.ctx, doomed.ID, false, op) },
			"a member moved in": func() error {
				return e.svc.SetRole(e.ctx, nil, bystander.ID, RoleAdmin, &doomed.ID, op)
			},
			"a key": func() error { _, _, err := e.svc.CreateKey(e.ctx, doomed.ID, KindSecret, "late", op); return err },
			"an invitation": func() error {
				_, _, err := e.svc.CreateInvite(e.ctx, &doomed.ID, "late@doomed.example", RoleViewer, 0, op)
				return err
			},
			"an account": func() error {
				_, err := e.svc.CreateUser(e.ctx, "late@doomed.example", "late-password-1", false, &doomed.ID, op, "")
				return err
			},
			"an invitation accepted": func() error {
				_, err := e.svc.AcceptInvite(e.ctx, invitation, "invited-password-1")
				return err
			},
			"a plan":   func() error { return e.svc.SetPlan(e.ctx, doomed.ID, PlanSettings{DecisionsPerSecond: &rate}, op) },
			"a rename": func() error { return e.svc.RenameTenant(e.ctx, doomed.ID, "undoomed", op) },
			"captcha settings": func() error {
				return e.svc.UpdateCaptchaSettings(e.ctx, doomed.ID, []string{"https://shop.example"}, MinCaptchaDifficulty, op)
			},
		}
		tryAll := func() {
			got, err := e.svc.Tenant(e.ctx, doomed.ID)
			must(t, err)
			if !got.Deleting || got.SuspendedAt == nil {
				t.Errorf("the tenant during its deletion: %+v; want suspended and being deleted", got)
			}
			for what, change := range changes {
				if err := change(); !errors.Is(err, ErrTenantBeingDeleted) {
					t.Errorf("%s during the tenant's deletion: %v; want ErrTenantBeingDeleted", what, err)
				}
			}
		}

		// Cut short once the members are listed: the tenant stays marked.
		cut := errors.New("cut short")
		short := withPause(e.ctx, func(context.Context, time.Duration) error { return cut })
		if err := e.svc.DeleteTenant(short, doomed.ID, op); !errors.Is(err, cut) {
			t.Fatalf("the deletion cut short: %v", err)
		}
		tryAll()
		// Resumed behind its back (a release that does not know the mark, during a rolling
		// upgrade): its keys stay refused.
		must(t, e.db.Gorm.Exec(`UPDATE tenants SET suspended_at = NULL WHERE id = ?`, doomed.ID).Error)
		e.svc.forgetKey("")
		if _, err := e.svc.Authenticate(e.ctx, doomedSecret, KindSecret); !errors.Is(err, ErrTenantSuspended) {
			t.Errorf("a key of the tenant being deleted, resumed behind the mark's back: %v; want ErrTenantSuspended", err)
		}
		var list strings.Builder
		must(t, e.svc.Command(e.ctx, "tenant", []string{"list"}, nil, &list))
		if want := fmt.Sprintf("%d\tdoomed\tbeing deleted\n", doomed.ID); !strings.Contains(list.String(), want) {
			t.Errorf("tenant list after a deletion cut short:\n%s\nwant the line %q", list.String(), want)
		}

		// Deleting it again finishes it, refusing the same changes while it runs.
		must(t, e.svc.DeleteTenant(context.WithValue(e.ctx, listedKey{}, tryAll), doomed.ID, op))
		if _, err := e.svc.Tenant(e.ctx, doomed.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("the tenant after its deletion: %v; want ErrNotFound", err)
		}
		u, err := e.svc.User(e.ctx, bystander.ID)
		if err != nil || u.TenantID == nil || *u.TenantID != kept.ID {
			t.Fatalf("the other tenant's member after the deletion: %+v, %v; want kept in tenant %d", u, err, kept.ID)
		}
	})
}
