package tenants

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

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
// arrives) and removes its members (their sessions end), then deletes the rest deleteBatch rows
// per transaction, at the database's default isolation (the rows are nobody else's, and a
// serializable scan would conflict with other tenants' decisions), and finally the tenant
// itself, with whatever the usage flush wrote of it meanwhile (flushedPrefix). The deletion is
// audited in the server's log, with the count of rows removed. An unknown tenant is
// ErrNotFound. A deletion cut short (ctx ended, database down) leaves the tenant suspended;
// running it again finishes it.
func (s *Service) DeleteTenant(ctx context.Context, id int64, actor string) error {
	t, err := s.Tenant(ctx, id)
	if err != nil {
		return wrap("delete tenant", err)
	}
	if err := s.SetSuspended(ctx, id, true, actor); err != nil {
		return wrap("delete tenant", err)
	}
	members, err := s.ListUsers(ctx, &id)
	if err != nil {
		return wrap("delete tenant", err)
	}
	for _, m := range members {
		if err := s.RemoveUser(ctx, &id, m.ID, actor); err != nil {
			return wrap("delete tenant", err)
		}
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
		late, err := deleteFlushed(tx, tables, id)
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

// flushedPrefix names the usage aggregator's tables, which its flush writes a tenant's counts
// and top keys to. The aggregator holds up to a flush interval of a tenant's decisions from
// before its suspension, and may flush them while the batches run, after its table's batch; it
// writes nothing for a tenant that no longer exists. So the transaction that deletes the tenant
// deletes these rows again: under serializable isolation a flush comes wholly before it (and its
// rows are deleted) or wholly after (and sees no tenant). (What the flush writes through its
// OnMinute hook, the threshold webhooks' alerts and deliveries, goes with their endpoint: ON
// DELETE CASCADE.)
const flushedPrefix = "usage_"

// deleteFlushed deletes, in tx, tenant id's rows of the usage tables among tables, and returns
// how many per table: none, unless a flush ran during the deletion.
func deleteFlushed(tx *gorm.DB, tables []string, id int64) (map[string]int64, error) {
	late := map[string]int64{}
	for _, table := range tables {
		if !strings.HasPrefix(table, flushedPrefix) {
			continue
		}
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
// longer the row's), while later rows remain. (Were every row a batch selected updated so, the
// batch would delete none and end the loop early.)
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
