package limiter

import (
	"context"
	"sort"
	"strings"
	"sync/atomic"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// Every statement on limit_state, and every limit_definitions lookup a decision makes, lives in
// one of two files, each statement once:
//   - this file: portable SQL through GORM, the same text on both dialects. It is SQLite's only
//     path, and PostgreSQL's for everything but the decision hot path (values, recent keys,
//     resets, the sweeper, definition lookups outside decisions);
//   - state_sql_pg.go: PostgreSQL's decision hot path through pgx (group_pg.go).
//
// The column lists below are the only place they are spelled; the scan targets beside them keep
// their order.

const (
	// statePrimaryKey is limit_state's primary key, in the order of the index.
	statePrimaryKey = "tenant_id, name, key, shard"
	// stateValueColumns hold a row's state: everything a decision reads besides the key. The
	// sweeper's pgDeleteUnchanged compares every one of them: a new one must join it there.
	stateValueColumns = "value, ts, counters, penalty_until"
	// stateColumns are limit_state's columns: the primary key, then the state.
	stateColumns = statePrimaryKey + ", " + stateValueColumns
	// stateUpsert makes an INSERT of stateColumns replace the state of rows that exist.
	stateUpsert = " ON CONFLICT (" + statePrimaryKey + ") DO UPDATE SET value = excluded.value, ts = excluded.ts, counters = excluded.counters, penalty_until = excluded.penalty_until"
	// definitionColumns are limit_definitions' columns.
	definitionColumns = "tenant_id, name, kind, rate, period, capacity, max_reserved, shards, start, resolution, jitter, ip_fallback, mode, penalty, created_at, updated_at, calendar, time_zone, anchor_day, parents, overrides_version, lease_ttl"
	// overrideColumns are the columns of limit_overrides a decision reads.
	overrideColumns = "pattern, rate, capacity, max_reserved, action, expires_at"
)

// The portable statements. Matches on a list of primary keys are an OR of equalities (matchAll):
// both SQLite and PostgreSQL plan that as index lookups, which keeps PostgreSQL's serializable
// read locks on those rows instead of the whole table.
const (
	sqlSelectDefinitions = "SELECT " + definitionColumns + " FROM limit_definitions WHERE "
	sqlSelectState       = "SELECT " + stateColumns + " FROM limit_state WHERE "
	// sqlSelectKindAmong reads which of a tenant's named definitions are of a kind.
	sqlSelectKindAmong = "SELECT name FROM limit_definitions WHERE tenant_id = ? AND kind = ? AND name IN ?"
	// sqlSelectParentEdges reads a tenant's parent graph (the definitions that have parents).
	sqlSelectParentEdges = "SELECT name, parents FROM limit_definitions WHERE tenant_id = ? AND parents <> ''"
	sqlInsertState       = "INSERT INTO limit_state (" + stateColumns + ") VALUES "
	sqlDeleteState       = "DELETE FROM limit_state WHERE "
	sqlDeleteNameState   = "DELETE FROM limit_state WHERE tenant_id = ? AND name = ?"
	sqlDeleteKeyState    = "DELETE FROM limit_state WHERE tenant_id = ? AND name = ? AND key = ?"
	sqlAnyNameState      = "SELECT COUNT(*) FROM (SELECT 1 FROM limit_state WHERE tenant_id = ? AND name = ? LIMIT 1) one"
	// A batch of a name's state in key order (dropStateBatch): the key a batch's rows end at (the
	// OFFSET-th after a key, or from the first, >= ''), then every row of the keys from or after
	// the first up to that one (upToKey; the last batch has no end), returning their keys when
	// open holds took from the name (returningKey).
	sqlStateKeyAtFrom   = "SELECT key FROM limit_state WHERE tenant_id = ? AND name = ? AND key >= ? ORDER BY key LIMIT 1 OFFSET ?"
	sqlStateKeyAtAfter  = "SELECT key FROM limit_state WHERE tenant_id = ? AND name = ? AND key > ? ORDER BY key LIMIT 1 OFFSET ?"
	sqlDeleteStateFrom  = "DELETE FROM limit_state WHERE tenant_id = ? AND name = ? AND key >= ?"
	sqlDeleteStateAfter = "DELETE FROM limit_state WHERE tenant_id = ? AND name = ? AND key > ?"
	upToKey             = " AND key <= ?"
	returningKey        = " RETURNING key"
	// The newest rows first: a top-N sort of the limit's rows (a key's first row is its newest),
	// cheaper than grouping every key first. No index on ts serves it: one slowed every decision
	// write far more than it sped this up (docs/performance.md).
	sqlRecentKeys = `SELECT key FROM limit_state WHERE tenant_id = ? AND name = ? ORDER BY ts DESC, key LIMIT ?`
	// sqlScanState [sqlScanStateAfter] sqlScanStateOrder pages through the whole table in
	// primary-key order (keyset pagination, so each page is an index range scan however large the
	// table).
	sqlScanState      = "SELECT " + stateColumns + " FROM limit_state"
	sqlScanStateAfter = " WHERE (" + statePrimaryKey + ") > (?, ?, ?, ?)"
	sqlScanStateOrder = " ORDER BY " + statePrimaryKey + " LIMIT ?"
	// The overrides of one limit, and the tag that says which version of them is current.
	sqlSelectOverrides     = "SELECT " + overrideColumns + " FROM limit_overrides WHERE tenant_id = ? AND name = ?"
	sqlDeleteOverrides     = "DELETE FROM limit_overrides WHERE tenant_id = ? AND name = ?"
	sqlSetOverridesVersion = "UPDATE limit_definitions SET overrides_version = ? WHERE tenant_id = ? AND name = ?"
	// The tag of a limit's numbers, which open holds compare with theirs (holds.go).
	sqlSetNumbersVersion = "UPDATE limit_definitions SET numbers_version = ? WHERE tenant_id = ? AND name = ?"
)

// maxKeysPerStatement keeps every statement's bind parameters (4 per key, 8 per written row) far
// below SQLite's and PostgreSQL's limits.
const maxKeysPerStatement = 500

// fullStateRow is one limit_state row as stored.
type fullStateRow struct {
	TenantID int64
	Name     string
	Key      string
	Shard    int
	Value    float64
	TS       int64 `gorm:"column:ts"`
	Counters string
	// PenaltyUntil is when the penalty of the key's last refusal ends (ms; 0: none).
	PenaltyUntil int64
	exists       bool
}

// fields are the scan targets of stateColumns, in order.
func (r *fullStateRow) fields() []any {
	return []any{&r.TenantID, &r.Name, &r.Key, &r.Shard, &r.Value, &r.TS, &r.Counters, &r.PenaltyUntil}
}

func (r fullStateRow) key() rowKey { return rowKey{r.TenantID, r.Name, r.Key, r.Shard} }

// state converts a stored row; a zero row (not found) is "no row", which reads as full.
func (r fullStateRow) state(def Definition) algo.State {
	if !r.exists {
		return algo.State{}
	}
	st := algo.State{Value: r.Value, TS: r.TS, PenaltyUntil: r.PenaltyUntil, Exists: true}
	if def.Kind == SlidingWindow || def.Kind == Concurrency {
		st.Counters = algo.ParseCounters(def, r.Counters)
	}
	return st
}

// fields are the scan targets of definitionColumns, in order.
func (r *definitionRow) fields() []any {
	return []any{&r.TenantID, &r.Name, &r.Kind, &r.Rate, &r.Period, &r.Capacity, &r.MaxReserved,
		&r.Shards, &r.Start, &r.Resolution, &r.Jitter, &r.IPFallback, &r.Mode, &r.Penalty, &r.CreatedAt, &r.UpdatedAt,
		&r.Calendar, &r.TimeZone, &r.AnchorDay, &r.Parents, &r.OverridesVersion, &r.LeaseTTL}
}

// parentEdges reads the parent names of every definition of the tenant that has parents.
func parentEdges(tx *gorm.DB, tenantID int64) (map[string][]string, error) {
	var rows []struct {
		Name    string
		Parents string
	}
	if err := tx.Raw(sqlSelectParentEdges, tenantID).Scan(&rows).Error; err != nil {
		return nil, err
	}
	out := make(map[string][]string, len(rows))
	for _, r := range rows {
		for _, p := range decodeParents(r.Parents) {
			out[r.Name] = append(out[r.Name], p.Name)
		}
	}
	return out, nil
}

// fields are the scan targets of overrideColumns, in order.
func (r *overrideRow) fields() []any {
	return []any{&r.Pattern, &r.Rate, &r.Capacity, &r.MaxReserved, &r.Action, &r.ExpiresAt}
}

// storedCounters is the counters column of a state to write.
func storedCounters(st algo.State) string {
	if st.Counters == nil {
		return ""
	}
	return algo.FormatCounters(st.Counters)
}

// matchAll is a WHERE clause matching any of n tuples, each matched by one (equalities).
func matchAll(equalities string, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("(" + equalities + ")")
	}
	return b.String()
}

// selectDefinitions reads the named definitions in one query.
func selectDefinitions(tx *gorm.DB, keys []defKey) ([]definitionRow, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	args := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		args = append(args, k.tenantID, k.name)
	}
	var rows []definitionRow
	err := tx.Raw(sqlSelectDefinitions+matchAll("tenant_id = ? AND name = ?", len(keys)), args...).Scan(&rows).Error
	return rows, err
}

// loadDefinitions reads the named definitions, and the versions of their overrides, in one query.
func loadDefinitions(tx *gorm.DB, keys []defKey) (map[defKey]Definition, map[defKey]int64, error) {
	rows, err := selectDefinitions(tx, keys)
	if err != nil {
		return nil, nil, err
	}
	out := make(map[defKey]Definition, len(rows))
	versions := make(map[defKey]int64, len(rows))
	for _, r := range rows {
		k := defKey{r.TenantID, r.Name}
		out[k], versions[k] = r.toDomain().Definition, r.OverridesVersion
	}
	return out, versions, nil
}

// selectOverrides reads every override of one limit.
func selectOverrides(tx *gorm.DB, k defKey) ([]Override, error) {
	var rows []overrideRow
	if err := tx.Raw(sqlSelectOverrides, k.tenantID, k.name).Scan(&rows).Error; err != nil {
		return nil, err
	}
	out := make([]Override, len(rows))
	for i, r := range rows {
		out[i] = r.override()
	}
	return out, nil
}

// deleteOverrides deletes every override of one limit.
func deleteOverrides(tx *gorm.DB, tenantID int64, name string) (int64, error) {
	res := tx.Exec(sqlDeleteOverrides, tenantID, name)
	return res.RowsAffected, res.Error
}

// setOverridesVersion tags the limit's overrides with a new version (0: it has none).
func setOverridesVersion(tx *gorm.DB, tenantID int64, name string, version int64) error {
	return tx.Exec(sqlSetOverridesVersion, version, tenantID, name).Error
}

// newNumbersVersion tags the limit's numbers afresh: they changed (a definition, or an override
// that sets numbers), so what open holds took from it no longer comes back (holds.go).
func newNumbersVersion(tx *gorm.DB, tenantID int64, name string) error {
	return tx.Exec(sqlSetNumbersVersion, newVersionTag(), tenantID, name).Error
}

// loadDefinition reads one definition; ok is false when there is none.
func loadDefinition(tx *gorm.DB, tenantID int64, name string) (def StoredDefinition, ok bool, err error) {
	rows, err := selectDefinitions(tx, []defKey{{tenantID, name}})
	if err != nil || len(rows) == 0 {
		return StoredDefinition{}, false, err
	}
	return rows[0].toDomain(), true, nil
}

// lockFromAttempt is the attempt from which a transaction that reads state rows and writes them
// a round trip later locks them as it reads them (PostgreSQL): it lost them to other
// transactions committed in between on every attempt before, as under two instances deciding on
// one key as fast as they can, where such a transaction (a fixed window's decision, a hold's
// reserve or settle, a lease's release) would otherwise lose on nearly every attempt and give
// up. Locked, the rows cannot change before it writes them; the writers wait and retry instead.
const lockFromAttempt = 3

// lockOrder is the order a locking read of state rows takes their locks in: byte order, the
// order sortedUnique and the decision function (migrations/postgres/00024) write them in,
// whatever the database's collation, so that two transactions locking rows they share take them
// in the same order rather than deadlock.
const lockOrder = ` ORDER BY tenant_id, name COLLATE "C", key COLLATE "C", shard`

// lockRows reports whether the transaction of ctx reads its state rows FOR UPDATE.
func lockRows(ctx context.Context) bool { return db.Attempt(ctx) >= lockFromAttempt }

// loadRows reads the wanted state rows by primary key. Missing rows stay absent (full). On
// PostgreSQL, from lockFromAttempt on, it locks them.
func loadRows(tx *gorm.DB, wanted []rowKey) (map[rowKey]fullStateRow, error) {
	out := make(map[rowKey]fullStateRow, len(wanted))
	keys := sortedUnique(append([]rowKey(nil), wanted...))
	lock := ""
	if tx.Name() == "postgres" && lockRows(tx.Statement.Context) {
		lock = lockOrder + " FOR UPDATE"
	}
	for start := 0; start < len(keys); start += maxKeysPerStatement {
		part := keys[start:min(start+maxKeysPerStatement, len(keys))]
		where, args := pkMatch(part)
		var rows []fullStateRow
		if err := tx.Raw(sqlSelectState+where+lock, args...).Scan(&rows).Error; err != nil {
			return nil, err
		}
		for _, r := range rows {
			r.exists = true
			out[r.key()] = r
		}
	}
	return out, nil
}

// deleteRows deletes the rows with these primary keys and returns how many there were.
func deleteRows(tx *gorm.DB, keys []rowKey) (int64, error) {
	keys = sortedUnique(append([]rowKey(nil), keys...))
	var n int64
	for start := 0; start < len(keys); start += maxKeysPerStatement {
		where, args := pkMatch(keys[start:min(start+maxKeysPerStatement, len(keys))])
		res := tx.Exec(sqlDeleteState+where, args...)
		if res.Error != nil {
			return n, res.Error
		}
		n += res.RowsAffected
	}
	return n, nil
}

func pkMatch(keys []rowKey) (string, []any) {
	args := make([]any, 0, 4*len(keys))
	for _, k := range keys {
		args = append(args, k.tenantID, k.name, k.key, k.shard)
	}
	return matchAll("tenant_id = ? AND name = ? AND key = ? AND shard = ?", len(keys)), args
}

// saveRows upserts the changed rows in a fixed order (fewer deadlocks between transactions),
// many rows per statement.
func saveRows(tx *gorm.DB, rows map[rowKey]algo.State) error {
	keys := make([]rowKey, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	keys = sortedUnique(keys)
	for start := 0; start < len(keys); start += maxKeysPerStatement {
		part := keys[start:min(start+maxKeysPerStatement, len(keys))]
		var sb strings.Builder
		sb.WriteString(sqlInsertState)
		args := make([]any, 0, 8*len(part))
		for i, k := range part {
			if i > 0 {
				sb.WriteString(",")
			}
			sb.WriteString("(?,?,?,?,?,?,?,?)")
			st := rows[k]
			args = append(args, k.tenantID, k.name, k.key, k.shard, st.Value, st.TS, storedCounters(st), st.PenaltyUntil)
		}
		sb.WriteString(stateUpsert)
		if err := tx.Exec(sb.String(), args...).Error; err != nil {
			return err
		}
	}
	return nil
}

// deleteState deletes the state of one key (every shard), or of every key of name when key is nil.
func deleteState(tx *gorm.DB, tenantID int64, name string, key *string) error {
	// A concurrency limit's slots live in its state: their leases end with it (leases.go).
	if err := deleteLeases(tx, tenantID, name, key); err != nil {
		return err
	}
	if err := voidCharges(tx, tenantID, name, key); err != nil { // the rows open holds took from go
		return err
	}
	if key == nil {
		return tx.Exec(sqlDeleteNameState, tenantID, name).Error
	}
	return tx.Exec(sqlDeleteKeyState, tenantID, name, *key).Error
}

// stateBatch is how many state rows dropStateBatch deletes in one transaction (a few more when
// the last key has several shards): tens of milliseconds of SQLite's write lock. Tests lower it
// (export_test.go).
var stateBatch = func() *atomic.Int64 { var n atomic.Int64; n.Store(20_000); return &n }()

// dropStateBatch deletes the state of the next keys of name in key order after after (from the
// first key when first), about stateBatch rows, with their leases and what open holds took from
// them (deleteState's work, key range by key range): every row of a key goes in the same batch.
// It returns the last key deleted and whether there may be more.
func dropStateBatch(tx *gorm.DB, tenantID int64, name, after string, first bool) (last string, more bool, err error) {
	keyAt, state, leases := sqlStateKeyAtAfter, sqlDeleteStateAfter, sqlDeleteLeasesAfter
	if first {
		keyAt, state, leases = sqlStateKeyAtFrom, sqlDeleteStateFrom, sqlDeleteLeasesFrom
	}
	args := []any{tenantID, name, after}
	var ends []string
	if err := tx.Raw(keyAt, tenantID, name, after, stateBatch.Load()-1).Scan(&ends).Error; err != nil {
		return "", false, err
	}
	if more = len(ends) == 1; more {
		last = ends[0]
		state, leases, args = state+upToKey, leases+upToKey, append(args, last)
	}
	if err := tx.Exec(leases, args...).Error; err != nil {
		return "", false, err
	}
	held, err := chargedKeys(tx, tenantID, name)
	if err != nil {
		return "", false, err
	}
	if len(held) == 0 { // no hold took from the name: no key to void charges of
		return last, more, tx.Exec(state, args...).Error
	}
	var deleted []string
	if err := tx.Raw(state+returningKey, args...).Scan(&deleted).Error; err != nil {
		return "", false, err
	}
	gone := make(map[string]bool, len(deleted))
	for _, k := range deleted {
		gone[k] = held[k]
	}
	return last, more, voidChargesOf(tx, tenantID, name, func(key string) bool { return gone[key] })
}

// manyState reports whether name has more state rows than one batch of dropStateBatch.
func manyState(tx *gorm.DB, tenantID int64, name string) (bool, error) {
	var keys []string
	err := tx.Raw(sqlStateKeyAtFrom, tenantID, name, "", stateBatch.Load()).Scan(&keys).Error
	return len(keys) > 0, err
}

// anyState reports whether name has any state row (one read, however many it has).
func anyState(tx *gorm.DB, tenantID int64, name string) (bool, error) {
	var n int64
	err := tx.Raw(sqlAnyNameState, tenantID, name).Scan(&n).Error
	return n > 0, err
}

// recentKeys lists up to n keys of name (a limit of shards shards) that have state, most
// recently written first: n×shards rows hold at least n keys, since a key has at most shards.
func recentKeys(tx *gorm.DB, tenantID int64, name string, n, shards int) ([]string, error) {
	var rows []string
	if err := tx.Raw(sqlRecentKeys, tenantID, name, n*max(shards, 1)).Scan(&rows).Error; err != nil {
		return nil, err
	}
	keys := make([]string, 0, n)
	seen := make(map[string]bool, len(rows))
	for _, k := range rows {
		if !seen[k] && len(keys) < n {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// scanState reads up to batch rows after cursor (from the start when nil) in primary-key order.
func scanState(tx *gorm.DB, cursor *fullStateRow, batch int) ([]fullStateRow, error) {
	q := sqlScanState
	var args []any
	if cursor != nil {
		q += sqlScanStateAfter
		args = append(args, cursor.TenantID, cursor.Name, cursor.Key, cursor.Shard)
	}
	args = append(args, batch)
	var rows []fullStateRow
	err := tx.Raw(q+sqlScanStateOrder, args...).Scan(&rows).Error
	return rows, err
}

func rowLess(a, b rowKey) bool {
	if a.tenantID != b.tenantID {
		return a.tenantID < b.tenantID
	}
	if a.name != b.name {
		return a.name < b.name
	}
	if a.key != b.key {
		return a.key < b.key
	}
	return a.shard < b.shard
}

// sortedUnique sorts keys in primary-key order (the order rows are locked in) without repeats.
func sortedUnique(keys []rowKey) []rowKey {
	sort.Slice(keys, func(a, b int) bool { return rowLess(keys[a], keys[b]) })
	out := keys[:0]
	for i, k := range keys {
		if i == 0 || k != keys[i-1] {
			out = append(out, k)
		}
	}
	return out
}
