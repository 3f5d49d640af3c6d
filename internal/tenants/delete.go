package tenants

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
)

// deleteBatch is how many rows one transaction of DeleteTenant removes: small enough that no
// transaction holds its locks (or, on SQLite, the one writer) for long, so other tenants'
// decisions are never held up behind a deletion.
const deleteBatch = 1000

// TenantTables lists every table with a tenant_id column, by name: the tables whose rows a
// tenant owns. They are read from the database's own catalogue, so tables added by later
// migrations are included without a change here.
func (s *Service) TenantTables(ctx context.Context) ([]string, error) {
	q := `SELECT table_name FROM information_schema.columns
	      WHERE column_name = 'tenant_id' AND table_schema = current_schema()`
	if s.db.Dialect == db.SQLite {
		q = `SELECT m.name FROM sqlite_master m JOIN pragma_table_info(m.name) p
		     WHERE m.type = 'table' AND p.name = 'tenant_id'`
	}
	var names []string
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error { return tx.Raw(q).Scan(&names).Error })
	if err != nil {
		return nil, wrap("tenant tables", err)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// DeleteTenant deletes tenant id and every row it owns, in every table with a tenant_id
// column (limits, state, overrides, keys, members and their sessions, usage, webhooks and their
// outbox, the tenant's audit log, …), and its plan's decision-rate row, which is the system
// tenant's. It first suspends the tenant (its keys are refused everywhere, so nothing new
// arrives) and marks its deletion begun in the same transaction (from then on it cannot be
// resumed, and nothing can be changed in it: changeableTenant), then removes its members (their sessions end), then waits cacheWait, so that no
// instance's key cache still admits the tenant's keys and the requests admitted before have
// written what they write (see cacheWait), then deletes the rest deleteBatch rows per
// transaction, at the database's default isolation (the rows are nobody else's, and a
// serializable scan would conflict with other tenants' decisions), and finally the tenant
// itself, in a serializable transaction that deletes the tenant's rows of every table once
// more: what a request or a usage flush wrote during the batches (deleteLate). The deletion is
// audited in the server's log, with the count of rows removed. An unknown tenant is ErrNotFound.
// A deletion cut short (ctx ended, database down) leaves the tenant suspended and marked; running
// it again finishes it.
//
// What it guarantees: once it returns, no row of the tenant is left that a transaction committed
// before its last transaction began. A row can be written for the tenant after that only by a
// request admitted before its instance's cache forgot the key (at most the cache's TTL after the
// suspension; at once on PostgreSQL instances that hear the NOTIFY) that then waited longer than
// the batches took before it began its write: a write transaction that began earlier has
// committed before the last transaction, since it lasts at most the retry budget, which
// cacheWait includes. Nothing else refuses such a late write: the tenant-owned tables have no
// foreign key to tenants (api_keys, users, tenant_plans, webhook_endpoints and member_links
// aside), and a decision does not check that its tenant still exists.
func (s *Service) DeleteTenant(ctx context.Context, id int64, actor string) error {
	t, err := s.Tenant(ctx, id)
	if err != nil {
		return wrap("delete tenant", err)
	}
	if err := s.setSuspended(ctx, id, true, true, actor); err != nil {
		return wrap("delete tenant", err)
	}
	members, err := s.ListUsers(ctx, &id)
	if err != nil {
		return wrap("delete tenant", err)
	}
	membersListed(ctx)
	for _, m := range members {
		// Scoped: a member an operator moved to another tenant since the listing stays (and one
		// removed meanwhile is gone already). The last admin goes too.
		if err := s.removeUser(ctx, &id, m.ID, actor, false); err != nil && !errors.Is(err, ErrNotFound) {
			return wrap("delete tenant", err)
		}
	}
	if err := pauseForCaches(ctx, s.cacheWait()); err != nil {
		return wrap("delete tenant", err)
	}
	tables, err := s.TenantTables(ctx)
	if err != nil {
		return wrap("delete tenant", err)
	}
	deleted := make(map[string]int64, len(tables))
	for _, table := range tables {
		n, err := s.deleteRows(ctx, table, id)
		if err != nil {
			return wrap("delete tenant", fmt.Errorf("%s: %w", table, err))
		}
		deleted[table] = n
	}
	plan, err := s.deletePlanRow(ctx, id)
	if err != nil {
		return wrap("delete tenant", fmt.Errorf("plan: %w", err))
	}
	err = s.db.Serializable(ctx, func(tx *gorm.DB) error {
		res := tx.Delete(&tenantRow{}, id)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return ErrNotFound // deleted meanwhile by someone else, who audited it
		}
		late, err := deleteLate(tx, tables, id)
		if err != nil {
			return err
		}
		counts := make([]string, 0, len(tables)+1)
		for _, table := range tables {
			if n := deleted[table] + late[table]; n > 0 {
				counts = append(counts, fmt.Sprintf("%s %d", table, n))
			}
		}
		if plan > 0 {
			counts = append(counts, fmt.Sprintf("%s %d", planLimitName, plan))
		}
		detail := t.Name + "; rows deleted: " + strings.Join(counts, ", ")
		if len(counts) == 0 {
			detail = t.Name + "; no rows"
		}
		return s.audit(tx, nil, actor, "tenant.delete", "tenant:"+strconv.FormatInt(id, 10), detail)
	})
	return wrap("delete tenant", err)
}

// cacheWait is how long DeleteTenant waits, after suspending the tenant, before it deletes a
// row: the key cache's TTL (no instance admits one of the tenant's keys from its cache longer
// after the suspension, even one that cannot hear of it: the CLI against SQLite, a lost LISTEN
// connection), and then the database's retry budget, the longest a request's write transaction
// lasts (db.RetryPolicy.Budget), for the requests admitted just before to finish writing. The
// TTL is this Service's, and never less than DefaultAuthCacheTTL: every instance's cache lives
// that long (only tests change it), and this one's may be disabled.
func (s *Service) cacheWait() time.Duration {
	return max(s.authCacheTTL, DefaultAuthCacheTTL) + s.db.Retry.Budget
}

// membersListed runs between DeleteTenant's listing of the members and their removal: nothing,
// but a variable so that this package's tests can act there.
var membersListed = func(context.Context) {}

// pauseForCaches waits d, or until ctx ends (ctx's error). A variable so that this package's
// tests can pause without the wall clock.
var pauseForCaches = func(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// deleteLate deletes, in tx (the serializable transaction that deletes the tenant), tenant id's
// rows of every table among tables, and returns how many per table: none, unless something
// wrote for the tenant after its table's batches. That may be a request admitted just before
// the suspension reached its instance that wrote later than cacheWait, or a usage flush: the
// aggregator holds up to a flush interval of a tenant's decisions from before the suspension
// and writes nothing for a tenant that no longer exists, so under serializable isolation a
// flush comes wholly before this transaction (and its rows are deleted here) or wholly after (and
// sees no tenant). (What the flush writes through its OnMinute hook, the threshold webhooks'
// alerts and deliveries, goes with their endpoint: ON DELETE CASCADE.) The batches have removed
// everything else, so these statements find few rows, if any.
func deleteLate(tx *gorm.DB, tables []string, id int64) (map[string]int64, error) {
	late := map[string]int64{}
	for _, table := range tables {
		res := tx.Exec(`DELETE FROM `+quote(table)+` WHERE tenant_id = ?`, id)
		if res.Error != nil {
			return nil, fmt.Errorf("%s: %w", table, res.Error)
		}
		late[table] = res.RowsAffected
	}
	return late, nil
}

// planLimitName is limiter.PlanLimitName, the system limit of tenants' decision rates (this
// package does not import the engine; the deletion's test checks the two agree).
const planLimitName = "plan.decisions"

// deletePlanRow deletes the state of tenant id's plan decision rate: rows of the system tenant
// (tenant_id 0), keyed by the tenant's ID, so no tenant_id table has them.
func (s *Service) deletePlanRow(ctx context.Context, id int64) (int64, error) {
	res := s.db.Gorm.WithContext(ctx).Exec(`DELETE FROM limit_state WHERE tenant_id = 0 AND name = ? AND key = ?`, planLimitName, strconv.FormatInt(id, 10))
	return res.RowsAffected, res.Error
}

func quote(table string) string { return `"` + strings.ReplaceAll(table, `"`, `""`) + `"` }

// deleteRows deletes tenant id's rows of table, deleteBatch per transaction, until a batch
// deletes none, and returns how many. A batch that deletes fewer than deleteBatch is not the
// table's end: on PostgreSQL a batch deletes the rows it selected by ctid, at read committed, and
// skips a selected row that another transaction updated or deleted meanwhile (its ctid is no
// longer the row's), while later rows remain. (A batch whose every selected row was updated so
// deletes none, and ends the loop early: DeleteTenant's last transaction deletes what is left.)
func (s *Service) deleteRows(ctx context.Context, table string, id int64) (int64, error) {
	// table comes from the catalogue (TenantTables), never from input; quoted all the same.
	quoted := quote(table)
	q := fmt.Sprintf(`DELETE FROM %[1]s WHERE rowid IN (SELECT rowid FROM %[1]s WHERE tenant_id = ? LIMIT %[2]d)`, quoted, deleteBatch)
	if s.db.Dialect == db.Postgres {
		q = fmt.Sprintf(`DELETE FROM %[1]s WHERE ctid = ANY(ARRAY(SELECT ctid FROM %[1]s WHERE tenant_id = ? LIMIT %[2]d))`, quoted, deleteBatch)
	}
	var total int64
	for {
		var n int64
		err := s.db.Gorm.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			res := tx.Exec(q, id)
			n = res.RowsAffected
			return res.Error
		})
		if err != nil {
			return total, err
		}
		total += n
		if n == 0 {
			return total, nil
		}
	}
}
