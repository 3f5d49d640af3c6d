package tenants

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// seedTenant gives tenant id rows in every table with a tenant_id column: through the service
// where it has a method, by SQL elsewhere; limit_state gets stateRows rows, so that deleting it
// takes several batches.
func seedTenant(t *testing.T, e *env, id int64, stateRows int) {
	t.Helper()
	e.key(t, id, KindSecret)
	u, err := e.svc.CreateUser(e.ctx, fmt.Sprintf("member-%d@example.com", id), "member-password-1", false, &id, "test", "")
	must(t, err)
	_, _, err = e.svc.CreateAdminSession(e.ctx, u, time.Hour)
	must(t, err)
	_, _, err = e.svc.CreateInvite(e.ctx, &id, fmt.Sprintf("invited-%d@example.com", id), RoleViewer, 0, "tester")
	must(t, err)
	now := e.clock.Now()
	exec := func(q string, args ...any) {
		t.Helper()
		if err := e.db.Gorm.Exec(q, args...).Error; err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO limit_definitions (tenant_id, name, kind, rate, period, created_at, updated_at) VALUES (?, 'api', 'token_bucket', 10, 1000, ?, ?)`, id, now, now)
	exec(`INSERT INTO limit_overrides (tenant_id, name, pattern, action, created_at, updated_at) VALUES (?, 'api', 'alice', 'deny', ?, ?)`, id, now, now)
	exec(`INSERT INTO captcha_used (tenant_id, challenge, expires_at) VALUES (?, 'c1', ?)`, id, now)
	exec(`INSERT INTO captcha_sessions (tenant_id, session_hash, created_at, expires_at) VALUES (?, 'h1', ?, ?)`, id, now, now)
	exec(`INSERT INTO usage_stats (tenant_id, name, bucket_start, allowed, refused) VALUES (?, 'api', 0, 1, 1)`, id)
	exec(`INSERT INTO usage_stats_hourly (tenant_id, name, bucket_start, allowed, refused) VALUES (?, 'api', 0, 1, 1)`, id)
	exec(`INSERT INTO webhook_endpoints (tenant_id, url, secret_sealed, events, created_at) VALUES (?, 'https://example.com/h', 's', 'key.created', 0)`, id)
	exec(`INSERT INTO webhook_deliveries (id, tenant_id, endpoint_id, event, payload, created_at, next_attempt_at)
		SELECT ?, tenant_id, id, 'key.created', '{}', 0, 0 FROM webhook_endpoints WHERE tenant_id = ?`, fmt.Sprintf("d-%d", id), id)
	exec(`INSERT INTO webhook_alerts (tenant_id, endpoint_id, alert, created_at) SELECT tenant_id, id, 'limit.refusals:api:0', 0 FROM webhook_endpoints WHERE tenant_id = ?`, id)
	exec(`INSERT INTO holds (tenant_id, id, state, created_at, expires_at) VALUES (?, 'hold_a', 'open', 0, 1)`, id)
	exec(`INSERT INTO hold_limits (tenant_id, hold_id, idx, name, key, count) VALUES (?, 'hold_a', 0, 'api', '', 1)`, id)
	exec(`INSERT INTO hold_key_seqs (tenant_id, name, key, seq, updated_at) VALUES (?, 'api', '', 2, 0)`, id)
	exec(`INSERT INTO hold_snapshots (tenant_id, hold_id, name, key, numbers_version, seq) VALUES (?, 'hold_a', 'api', '', 0, 1)`, id)
	exec(`INSERT INTO hold_give_backs (tenant_id, name, key, seq, shard, giver_seq, amount, at) VALUES (?, 'api', '', 2, 0, 0, 1, 0)`, id)
	exec(`INSERT INTO leases (tenant_id, id, name, key, created_at, expires_at) VALUES (?, 'lease_a', 'jobs', '', 0, 1)`, id)
	exec(`INSERT INTO idempotency_keys (tenant_id, key, part, request_hash, status, headers, body, expires_at) VALUES (?, 'k', 0, ?, 200, '{}', ?, 1)`, id, []byte("h"), []byte("{}"))
	exec(`INSERT INTO tenant_plans (tenant_id, max_limits, updated_at) VALUES (?, 5, ?)`, id, now)
	exec(`INSERT INTO usage_top_keys (tenant_id, name, kind, bucket_start, limit_key, hits) VALUES (?, 'api', 'refused', 0, 'alice', 1)`, id)
	exec(`INSERT INTO usage_top_keys_hourly (tenant_id, name, kind, bucket_start, limit_key, hits) VALUES (?, 'api', 'refused', 0, 'alice', 1)`, id)
	for i := 0; i < stateRows; i += 500 {
		var vals []string
		var args []any
		for j := i; j < min(i+500, stateRows); j++ {
			vals = append(vals, "(?, 'api', ?, 0, 1, 0)")
			args = append(args, id, fmt.Sprintf("key-%d", j))
		}
		exec(`INSERT INTO limit_state (tenant_id, name, key, shard, value, ts) VALUES `+strings.Join(vals, ","), args...)
	}
}

// tenantRowCounts counts tenant id's rows in every table that has a tenant_id column, found
// independently of DeleteTenant's own list (every table, asked whether it has the column).
func tenantRowCounts(t *testing.T, e *env, id int64) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, table := range testkit.Tables(t, e.db) {
		has := `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = 'tenant_id'`
		if e.db.Dialect == db.Postgres {
			has = `SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ? AND column_name = 'tenant_id'`
		}
		var n int64
		must(t, e.db.Gorm.Raw(has, table).Scan(&n).Error)
		if n == 0 {
			continue
		}
		must(t, e.db.Gorm.Raw(`SELECT COUNT(*) FROM "`+table+`" WHERE tenant_id = ?`, id).Scan(&n).Error)
		out[table] = n
	}
	return out
}

// TestDeleteTenantRemovesEveryRowOfItAndNoneOfAnother: after DeleteTenant the tenant has no row
// left in any table with a tenant_id column (each of which had rows before, limit_state more
// than two batches), its members' sessions are gone, the other tenant's counts are unchanged,
// and the server's log records the deletion; an unknown tenant is ErrNotFound.
func TestDeleteTenantRemovesEveryRowOfItAndNoneOfAnother(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		doomed, kept := e.tenant(t, "doomed"), e.tenant(t, "kept")
		seedTenant(t, e, doomed.ID, 2*deleteBatch+7)
		seedTenant(t, e, kept.ID, 10)
		must(t, e.svc.Audit(e.ctx, &doomed.ID, "tester", "limit.update", "api", "x"))
		before, keptBefore := tenantRowCounts(t, e, doomed.ID), tenantRowCounts(t, e, kept.ID)
		for table, n := range before {
			if n == 0 {
				t.Errorf("table %s has a tenant_id column but the test gave the doomed tenant no rows in it: seed it in seedTenant", table)
			}
		}
		if before["limit_state"] != 2*deleteBatch+7 {
			t.Fatalf("limit_state rows before: %d", before["limit_state"])
		}
		var sessions int64
		must(t, e.db.Gorm.Raw(`SELECT COUNT(*) FROM admin_sessions`).Scan(&sessions).Error)

		must(t, e.svc.DeleteTenant(e.ctx, doomed.ID, "user:op@example.com"))

		for table, n := range tenantRowCounts(t, e, doomed.ID) {
			if n != 0 {
				t.Errorf("%s still has %d rows of the deleted tenant", table, n)
			}
		}
		if after := tenantRowCounts(t, e, kept.ID); !maps.Equal(after, keptBefore) {
			t.Errorf("the other tenant's rows changed: %v, before %v", after, keptBefore)
		}
		var left int64
		must(t, e.db.Gorm.Raw(`SELECT COUNT(*) FROM admin_sessions`).Scan(&left).Error)
		if left != sessions-1 {
			t.Errorf("admin sessions: %d left of %d, want the member's one gone", left, sessions)
		}
		_, err := e.svc.Tenant(e.ctx, doomed.ID)
		wantErr(t, err, ErrNotFound)
		log, err := e.svc.ServerAuditLog(e.ctx, 100)
		must(t, err)
		var actions []string
		for _, a := range log {
			actions = append(actions, a.Action)
			if a.Action == "tenant.delete" && !strings.Contains(a.Detail, "limit_state 2007") {
				t.Errorf("tenant.delete detail %q lacks the row counts", a.Detail)
			}
		}
		for _, want := range []string{"tenant.suspend", "user.remove", "tenant.delete"} {
			if !slices.Contains(actions, want) {
				t.Errorf("the server log lacks %s: %v", want, actions)
			}
		}
		wantErr(t, e.svc.DeleteTenant(e.ctx, doomed.ID, "x"), ErrNotFound)
		wantErr(t, e.svc.DeleteTenant(e.ctx, 987654, "x"), ErrNotFound)
	})
}
