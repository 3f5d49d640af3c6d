package limiter

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// PostgreSQL's decision hot path (group_pg.go): every statement it sends through pgx, and how
// their arguments and rows are laid out. The column lists are state_sql.go's.
//
// Arrays through unnest keep each statement a single prepared statement whatever the group size
// (pgx caches them per connection). The lookups join the arrays rather than test membership
// (IN (SELECT unnest ...)): the keys are distinct, so the rows are the same, and PostgreSQL then
// runs a plain nested loop of primary-key lookups instead of hashing the arrays and memoizing
// each lookup first. Measured on 14 keys: 0.14 ms instead of 0.19 ms, on the statement that is
// the largest part of a group's time in PostgreSQL.
const (
	pgBegin = "BEGIN ISOLATION LEVEL SERIALIZABLE"
	// pgSettings follows pgBegin in every decision transaction, one statement for its settings:
	//   - enable_seqscan off: pgx prepares statements once per connection, and PostgreSQL may then
	//     settle on a generic plan chosen while limit_state was small: a sequential scan, kept
	//     while the table grows to millions of rows (measured: throughput fell several-fold until
	//     an autoanalyze happened to replan), and a whole-table SIREAD lock besides. Every lookup
	//     here is by primary key, so the index is always right: forbid sequential scans for the
	//     transaction. (Forcing custom plans also works but re-plans three statements per group:
	//     about 7% slower.)
	//   - lock_timeout (decisionLockTimeout): a decision waits for a row lock only while its holder
	//     is plausibly committing. A holder that stalls (an instance paused or cut off in the middle
	//     of a transaction that locked its rows) would otherwise keep the waiting decision, and
	//     every decision queued behind it in its lane, waiting for the whole retry budget. Ended,
	//     the wait is a retryable error (55P03): the group backs off, giving its lane's turn away.
	pgSettings = "SELECT set_config('enable_seqscan', 'off', true), set_config('lock_timeout', '" + decisionLockTimeout + "', true)"
	// pgSettingsFast is pgSettings under SLUICE_COMMIT=fast: the decision's COMMIT returns before
	// its WAL reaches the disk. A database crash may lose the last decisions acknowledged within
	// the WAL writer's delay (they can be admitted again); state is never corrupted.
	pgSettingsFast = pgSettings + ", set_config('synchronous_commit', 'off', true)"
	// decisionLockTimeout is how long a decision's statement waits for a row lock: far longer
	// than a holder that is committing takes (a round trip and a WAL flush), far shorter than the
	// retry budget.
	decisionLockTimeout = "1s"
	pgCommit            = "COMMIT"
	pgSelectDefinitions = "SELECT " + definitionColumns + `
		FROM unnest($1::bigint[], $2::text[]) AS u(tenant_id, name)
		JOIN limit_definitions USING (tenant_id, name)`
	pgSelectRows = "SELECT " + stateColumns + `
		FROM unnest($1::bigint[], $2::text[], $3::text[], $4::int[]) AS u(` + statePrimaryKey + `)
		JOIN limit_state USING (` + statePrimaryKey + `)`
	// pgSelectRowsLocked is pgSelectRows for a transaction that lost its rows before (lockRows),
	// locking in lockOrder.
	pgSelectRowsLocked = pgSelectRows + lockOrder + " FOR UPDATE OF limit_state"
	pgSelectOverrides  = "SELECT " + overrideColumns + " FROM limit_overrides WHERE tenant_id = $1 AND name = $2"
	pgUpsertRows       = "INSERT INTO limit_state (" + stateColumns + `)
		SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::int[], $5::float8[], $6::bigint[], $7::text[], $8::bigint[])` + stateUpsert
)

// pgSettingsFor is the settings statement of a decision transaction under the commit mode.
func pgSettingsFor(fastCommit bool) string {
	if fastCommit {
		return pgSettingsFast
	}
	return pgSettings
}

// pgTakeTokens decides a group of single-shard token bucket requests in the database
// (group_onetrip_pg.go); its arguments and rows are described in migrations 00015 and 00016
// (p_known, $8: the versions of the definitions the engine holds; the body is 00024's). Each row ends with the
// definition's version and the definition, its columns in definitionColumns' order, or NULLs
// where the function did not return it.
var pgTakeTokens = "SELECT ord, now_ms, ok, existed, pre_value, pre_ts, pre_penalty, post_value, post_ts, def_version, (def)." +
	strings.ReplaceAll(definitionColumns, ", ", ", (def).") + " FROM sluice_take_tokens($1, $2, $3, $4, $5, $6, $7, $8)"

// pgTakeOne is sluice_take_tokens for a group of one request, as one statement: the same
// arguments ($1 the frozen time or NULL, then one tenant, name, key, count, reserve, consume and
// known version instead of arrays), the same checks of the definition (no row back when it
// does not fit, and nothing written), the same float8 math in the same order, and the same row.
// PostgreSQL runs it with a quarter less CPU than the plpgsql function (docs/performance.md,
// session 5), which pays for each of its statements; a lone request is the whole transaction
// at low load, where this is its latency. Sent after pgSettings, whose enable_seqscan the function sets
// itself. The engine replays it as it replays the function (replayOneTrip).
var pgTakeOne = `WITH d AS (
	SELECT d AS def, d.xmin::text::bigint AS version, d.rate, d.period,
		coalesce(d.capacity, d.rate) + 0 AS capacity, coalesce(d.max_reserved, 'Infinity'::float8) AS reserve
	FROM limit_definitions d
	WHERE d.tenant_id = $2::bigint AND d.name = $3::text AND d.kind IN ('token bucket', 'gcra') AND d.shards = 1
		AND d.parents = '' AND d.penalty = 0 AND d.overrides_version = 0 AND d.rate >= 1e-290),
s AS (
	SELECT st.value, st.ts, st.penalty_until FROM limit_state st
	WHERE st.tenant_id = $2::bigint AND st.name = $3::text AND st.key = $4::text AND st.shard = 0),
c AS (
	SELECT d.*, t.t, s.value IS NOT NULL AS existed, s.value, s.ts, s.penalty_until,
		CASE WHEN s.value IS NULL THEN t.t ELSE greatest(t.t, s.ts) END AS new_ts,
		CASE WHEN s.value IS NULL THEN d.capacity
			ELSE least(s.value + (greatest(t.t, s.ts) - s.ts)::float8 * d.rate / d.period::float8, d.capacity)
		END - $5::float8 AS rest
	FROM d CROSS JOIN (SELECT coalesce($1::bigint, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS t) t
	LEFT JOIN s ON true),
o AS (
	SELECT c.*, (c.rest >= 0 OR ($6::boolean AND -c.rest <= c.reserve)) AND NOT (c.existed AND c.penalty_until > c.t) AS ok,
		$8::bigint IS DISTINCT FROM c.version AS send
	FROM c),
w AS (
	INSERT INTO limit_state AS st (tenant_id, name, key, shard, value, ts, counters, penalty_until)
	SELECT $2::bigint, $3::text, $4::text, 0, o.rest, o.new_ts, '', 0 FROM o WHERE o.ok AND $7::boolean
	ON CONFLICT (tenant_id, name, key, shard) DO UPDATE
	SET value = excluded.value, ts = excluded.ts, counters = excluded.counters, penalty_until = excluded.penalty_until)
SELECT 1, r.t, r.ok, r.existed, r.value, r.ts, r.penalty_until,
	CASE WHEN r.took THEN r.rest ELSE r.value END, CASE WHEN r.took THEN r.new_ts ELSE r.ts END,
	CASE WHEN r.send THEN r.version END, (r.sent).` + strings.ReplaceAll(definitionColumns, ", ", ", (r.sent).") + `
FROM (SELECT o.*, o.ok AND $7::boolean AS took, CASE WHEN o.send THEN o.def END AS sent FROM o) r`

// pgDeleteUnchanged is the sweeper's deletion on PostgreSQL (sweep.go): it deletes each
// candidate row only if the row still holds exactly the state the sweeper judged full (every
// state column compared) and its limit still has the definition the sweeper judged it by (the
// same updated_at and overrides_version, or still none for an inline config). It runs on its own, in READ COMMITTED:
// a row changed by a decision since the scan is re-checked against its new version and kept.
// Unchanged state that reads as full under an unchanged definition reads as full at any later
// time, so deleting it is the same as leaving it whenever the deletion lands; no read set is
// needed, and none is taken — a serializable deletion of hundreds of rows took predicate locks
// on the index pages that the decisions write to, and failed (and gave up) under load.
const pgDeleteUnchanged = `DELETE FROM limit_state s
	USING unnest($1::bigint[], $2::text[], $3::text[], $4::int[], $5::float8[], $6::bigint[], $7::text[], $8::bigint[], $9::timestamptz[], $10::bigint[])
		AS c(` + stateColumns + `, defined_at, overrides_version)
	WHERE (s.tenant_id, s.name, s.key, s.shard) = (c.tenant_id, c.name, c.key, c.shard)
	AND (s.value, s.ts, s.counters, s.penalty_until) IS NOT DISTINCT FROM (c.value, c.ts, c.counters, c.penalty_until)
	AND CASE WHEN c.defined_at IS NULL
		THEN NOT EXISTS (SELECT 1 FROM limit_definitions d WHERE d.tenant_id = s.tenant_id AND d.name = s.name)
		ELSE EXISTS (SELECT 1 FROM limit_definitions d
			WHERE d.tenant_id = s.tenant_id AND d.name = s.name AND d.updated_at = c.defined_at
			AND d.overrides_version = c.overrides_version) END`

// deleteUnchangedPg runs pgDeleteUnchanged on rows, each judged under the definition updated at
// definedAt[i] (nil: no stored definition) with the overrides of version overridesVersion[i],
// and returns how many rows it deleted.
func deleteUnchangedPg(ctx context.Context, conn *pgx.Conn, rows []fullStateRow, definedAt []*time.Time, overridesVersion []int64) (int64, error) {
	keys := make([]rowKey, len(rows))
	values, ts, counters, penalties := make([]float64, len(rows)), make([]int64, len(rows)), make([]string, len(rows)), make([]int64, len(rows))
	for i, r := range rows {
		keys[i] = r.key()
		values[i], ts[i], counters[i], penalties[i] = r.Value, r.TS, r.Counters, r.PenaltyUntil
	}
	tag, err := conn.Exec(ctx, pgDeleteUnchanged, append(rowArgs(keys), values, ts, counters, penalties, definedAt, overridesVersion)...)
	return tag.RowsAffected(), err
}

// queueGroupReads queues the first round trip of a group: the transaction, the database's clock
// (the time of every decision of the group), the definitions of keys and the state rows guessed.
func queueGroupReads(b *pgx.Batch, keys []defKey, guess []rowKey, fastCommit, lock bool) {
	b.Queue(pgBegin)
	b.Queue(pgSettingsFor(fastCommit))
	b.Queue(db.SQLNow)
	tenantIDs, names := make([]int64, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		tenantIDs[i], names[i] = k.tenantID, k.name
	}
	b.Queue(pgSelectDefinitions, tenantIDs, names)
	b.Queue(selectRowsSQL(lock), rowArgs(guess)...)
}

// readGroupReads reads the results of queueGroupReads: the database's time (ms), definitions,
// the versions of their overrides and rows.
func readGroupReads(br pgx.BatchResults) (int64, map[defKey]Definition, map[defKey]int64, map[rowKey]fullStateRow, error) {
	for range 2 { // BEGIN and the settings
		if _, err := br.Exec(); err != nil {
			return 0, nil, nil, nil, err
		}
	}
	var now int64
	if err := br.QueryRow().Scan(&now); err != nil {
		return 0, nil, nil, nil, err
	}
	defRows, err := br.Query()
	if err != nil {
		return 0, nil, nil, nil, err
	}
	versions := map[defKey]int64{}
	defs, err := scanDefinitions(defRows, versions)
	if err != nil {
		return 0, nil, nil, nil, err
	}
	stateRows, err := br.Query()
	if err != nil {
		return 0, nil, nil, nil, err
	}
	stored := map[rowKey]fullStateRow{}
	if err := scanRows(stateRows, stored); err != nil {
		return 0, nil, nil, nil, err
	}
	return now, defs, versions, stored, nil
}

// scanDefinitions reads rows of pgSelectDefinitions: the definitions, and the versions of their
// overrides into versions.
func scanDefinitions(rows pgx.Rows, versions map[defKey]int64) (map[defKey]Definition, error) {
	defer rows.Close()
	defs := map[defKey]Definition{}
	for rows.Next() {
		var r definitionRow
		if err := rows.Scan(r.fields()...); err != nil {
			return nil, err
		}
		k := defKey{r.TenantID, r.Name}
		defs[k], versions[k] = r.toDomain().Definition, r.OverridesVersion
	}
	return defs, rows.Err()
}

// selectOverridesPg reads every override of one limit within the group's transaction.
func selectOverridesPg(ctx context.Context, conn *pgx.Conn, k defKey) ([]Override, error) {
	rows, err := conn.Query(ctx, pgSelectOverrides, k.tenantID, k.name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Override
	for rows.Next() {
		var r overrideRow
		if err := rows.Scan(r.fields()...); err != nil {
			return nil, err
		}
		out = append(out, r.override())
	}
	return out, rows.Err()
}

// selectDefinitionsPg reads more definitions within the group's transaction (parents the
// hints did not foresee).
func selectDefinitionsPg(ctx context.Context, conn *pgx.Conn, keys []defKey, versions map[defKey]int64) (map[defKey]Definition, error) {
	tenantIDs, names := make([]int64, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		tenantIDs[i], names[i] = k.tenantID, k.name
	}
	rows, err := conn.Query(ctx, pgSelectDefinitions, tenantIDs, names)
	if err != nil {
		return nil, err
	}
	return scanDefinitions(rows, versions)
}

// selectRowsPg reads more state rows within the group's transaction.
func selectRowsPg(ctx context.Context, conn *pgx.Conn, keys []rowKey, into map[rowKey]fullStateRow, lock bool) error {
	rows, err := conn.Query(ctx, selectRowsSQL(lock), rowArgs(keys)...)
	if err != nil {
		return err
	}
	return scanRows(rows, into)
}

func selectRowsSQL(lock bool) string {
	if lock {
		return pgSelectRowsLocked
	}
	return pgSelectRows
}

// queueGroupWrites queues the changed rows and the jobs' own writes in the second round trip of
// a group (its COMMIT follows them).
func queueGroupWrites(b *pgx.Batch, writes map[rowKey]algo.State, extra []stmt) {
	if len(writes) > 0 {
		b.Queue(pgUpsertRows, writeArgs(writes)...)
	}
	for _, st := range extra { // the jobs' own writes (afterDecisions), in the same round trip
		b.Queue(st.pg(), st.args...)
	}
}

func scanRows(rows pgx.Rows, into map[rowKey]fullStateRow) error {
	defer rows.Close()
	for rows.Next() {
		var r fullStateRow
		if err := rows.Scan(r.fields()...); err != nil {
			return err
		}
		r.exists = true
		into[r.key()] = r
	}
	return rows.Err()
}

func rowArgs(keys []rowKey) []any {
	t, n, k, s := make([]int64, len(keys)), make([]string, len(keys)), make([]string, len(keys)), make([]int32, len(keys))
	for i, r := range keys {
		t[i], n[i], k[i], s[i] = r.tenantID, r.name, r.key, int32(r.shard)
	}
	return []any{t, n, k, s}
}

// writeArgs lists the rows to write in a fixed order, so that concurrent groups take row locks in
// the same order and do not deadlock.
func writeArgs(rows map[rowKey]algo.State) []any {
	keys := make([]rowKey, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	keys = sortedUnique(keys)
	args := rowArgs(keys)
	values, ts, counters, penalties := make([]float64, len(keys)), make([]int64, len(keys)), make([]string, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		st := rows[k]
		values[i], ts[i], counters[i], penalties[i] = st.Value, st.TS, storedCounters(st), st.PenaltyUntil
	}
	return append(args, values, ts, counters, penalties)
}
