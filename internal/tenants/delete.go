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
// outbox, the tenant's audit log, …). It first suspends the tenant (its keys are refused
// everywhere, so nothing new arrives) and removes its members (their sessions end), then
// deletes the rest deleteBatch rows per transaction, at the database's default isolation (the
// rows are nobody else's, and a serializable scan would conflict with other tenants'
// decisions), and finally the tenant itself. The deletion is audited in the server's log, with
// the count of rows removed. An unknown tenant is ErrNotFound. A deletion cut short (ctx ended,
// database down) leaves the tenant suspended; running it again finishes it.
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
	counts := make([]string, 0, len(tables))
	for _, table := range tables {
		n, err := s.deleteRows(ctx, table, id)
		if err != nil {
			return wrap("delete tenant", fmt.Errorf("%s: %w", table, err))
		}
		if n > 0 {
			counts = append(counts, fmt.Sprintf("%s %d", table, n))
		}
	}
	err = s.db.Serializable(ctx, func(tx *gorm.DB) error {
		res := tx.Delete(&tenantRow{}, id)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return ErrNotFound // deleted meanwhile by someone else, who audited it
		}
		detail := t.Name + "; rows deleted: " + strings.Join(counts, ", ")
		if len(counts) == 0 {
			detail = t.Name + "; no rows"
		}
		return s.audit(tx, nil, actor, "tenant.delete", "tenant:"+strconv.FormatInt(id, 10), detail)
	})
	return wrap("delete tenant", err)
}

// deleteRows deletes tenant id's rows of table, deleteBatch per transaction, and returns how many.
func (s *Service) deleteRows(ctx context.Context, table string, id int64) (int64, error) {
	// table comes from the catalogue (TenantTables), never from input; quoted all the same.
	quoted := `"` + strings.ReplaceAll(table, `"`, `""`) + `"`
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
		if n < deleteBatch {
			return total, nil
		}
	}
}
