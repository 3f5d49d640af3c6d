package tenants

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
	"github.com/sluice-dev/sluice/internal/usage"
)

// TestDeleteTenantLeavesNoUsageForTheAggregatorToFlush: counts and keys the usage aggregator
// held for a tenant when it was deleted are not written back by its next flush; the other
// tenant's are.
func TestDeleteTenantLeavesNoUsageForTheAggregatorToFlush(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		doomed, kept := e.tenant(t, "doomed"), e.tenant(t, "kept")
		agg := usage.New(e.db, usage.Options{Interval: time.Hour, Now: e.clock.Now})
		for _, id := range []int64{doomed.ID, kept.ID} {
			agg.Record(id, "api", true)
			agg.Observe(id, usage.Observation{Name: "api", Key: "alice", OK: false, Max: 10})
		}
		must(t, e.svc.DeleteTenant(e.ctx, doomed.ID, "tester"))
		must(t, agg.Flush(e.ctx))
		for table, n := range tenantRowCounts(t, e, doomed.ID) {
			if n != 0 {
				t.Errorf("%s has %d rows of the deleted tenant after the aggregator's flush", table, n)
			}
		}
		if n := tenantRowCounts(t, e, kept.ID)["usage_stats"]; n != 1 {
			t.Errorf("the other tenant has %d usage rows, want 1", n)
		}
	})
}

// TestDeleteTenantDeletesUsageFlushedWhileItRan: a usage flush that lands after the usage
// tables' batches and before the tenant is deleted (here a trigger on a table deleted later,
// webhook_endpoints, writes what such a flush would) leaves no row behind.
func TestDeleteTenantDeletesUsageFlushedWhileItRan(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		doomed := e.tenant(t, "doomed")
		seedTenant(t, e, doomed.ID, 10)
		if tables, err := e.svc.TenantTables(e.ctx); err != nil || !slicesSortedBefore(tables, "usage_stats", "webhook_endpoints") {
			t.Fatalf("the deletion's table order %v (%v) no longer puts usage_stats before webhook_endpoints: move the trigger", tables, err)
		}
		late := []string{
			`CREATE TRIGGER late_flush AFTER DELETE ON webhook_endpoints BEGIN
				INSERT OR IGNORE INTO usage_stats (tenant_id, name, bucket_start, allowed, refused) VALUES (OLD.tenant_id, 'late', 60000, 1, 0);
			END`,
		}
		if e.db.Dialect == db.Postgres {
			late = []string{
				`CREATE FUNCTION late_flush() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
					INSERT INTO usage_stats (tenant_id, name, bucket_start, allowed, refused) VALUES (OLD.tenant_id, 'late', 60000, 1, 0) ON CONFLICT DO NOTHING;
					RETURN OLD;
				END $$`,
				`CREATE TRIGGER late_flush AFTER DELETE ON webhook_endpoints FOR EACH ROW EXECUTE FUNCTION late_flush()`,
			}
		}
		for _, q := range late {
			must(t, e.db.Gorm.Exec(q).Error)
		}
		must(t, e.svc.DeleteTenant(e.ctx, doomed.ID, "tester"))
		if n := tenantRowCounts(t, e, doomed.ID)["usage_stats"]; n != 0 {
			t.Fatalf("usage_stats has %d rows of the deleted tenant, written while the deletion ran", n)
		}
	})
}

func slicesSortedBefore(s []string, a, b string) bool {
	ia, ib := -1, -1
	for i, v := range s {
		switch v {
		case a:
			ia = i
		case b:
			ib = i
		}
	}
	return ia >= 0 && ib > ia
}

// TestDeleteTenantDeletesItsPlanRow: the state of the tenant's plan decision rate, a row of the
// system tenant keyed by the tenant's ID, goes with the tenant; another tenant's stays, and the
// security log counts it.
func TestDeleteTenantDeletesItsPlanRow(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		doomed, kept := e.tenant(t, "doomed"), e.tenant(t, "kept")
		engine := limiter.NewEngine(e.db, limiter.Options{})
		testkit.Run(t, engine.Run)
		planRows := func(id int64) int64 {
			t.Helper()
			var n int64
			must(t, e.db.Gorm.Raw(`SELECT COUNT(*) FROM limit_state WHERE tenant_id = ? AND name = ? AND key = ?`,
				limiter.SystemTenant, limiter.PlanLimitName, strconv.FormatInt(id, 10)).Scan(&n).Error)
			return n
		}
		for _, id := range []int64{doomed.ID, kept.ID} {
			api := limiter.Request{Name: "api", Key: "alice", Count: 1, Config: &limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 1000}}
			d, err := engine.Batch(e.ctx, id, []limiter.Request{api, *limiter.PlanRequest(id, 100, 1)}, true)
			must(t, err)
			if !d.OK {
				t.Fatalf("tenant %d's decision with its plan was refused: %+v", id, d)
			}
			if n := planRows(id); n != 1 {
				t.Fatalf("tenant %d has %d plan rows after a decision with its plan, want 1", id, n)
			}
		}
		must(t, e.svc.DeleteTenant(e.ctx, doomed.ID, "tester"))
		if n := planRows(doomed.ID); n != 0 {
			t.Errorf("the deleted tenant's plan row is still there (%d rows)", n)
		}
		if n := planRows(kept.ID); n != 1 {
			t.Errorf("the other tenant has %d plan rows, want its 1", n)
		}
		log, err := e.svc.ServerAuditLog(e.ctx, 100)
		must(t, err)
		for _, a := range log {
			if a.Action == "tenant.delete" && !strings.Contains(a.Detail, limiter.PlanLimitName+" 1") {
				t.Errorf("tenant.delete detail %q does not count the plan row", a.Detail)
			}
		}
	})
}
