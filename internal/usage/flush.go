package usage

// This file writes what the aggregator holds: Flush cuts it into chunks, each written in a short
// transaction of its own by multi-row upserts, and is the one home of the usage tables' writes.

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
)

// chunkRows bounds the rows one flush transaction writes, the four tables together (a counter is
// two rows, its minute's and its hour's, and so is each key a sketch follows). A transaction
// then takes milliseconds whatever the flush's size, far inside the retry budget that bounds
// every transaction (db.DefaultRetryPolicy), and SQLite's one writer is never held for long.
const chunkRows = 1_000

// stmtRows bounds the rows of one statement: 128 rows of top keys are 896 bind parameters, far
// from SQLite's 32,766 and PostgreSQL's 65,535. Larger statements are no faster on PostgreSQL and
// slower on SQLite, whose driver binds each parameter by a search through all of them
// (docs/performance.md).
const stmtRows = 128

// unit is one limit's minute in a flush: its counts and its top-keys sketches, never split
// between chunks, so that OnMinute hears of the minute's refusals and near keys together.
type unit struct {
	key      counterKey
	counts   counts
	sketches []kindSketch // in kind order
}

type kindSketch struct {
	kind Kind
	t    *topN
}

// rows is how many rows u writes: its minute's and its hour's, and as many for each key followed.
func (u *unit) rows() int {
	n := 2
	for _, s := range u.sketches {
		n += 2 * len(s.t.m)
	}
	return n
}

// Flush writes the counts and top keys recorded so far, with the threshold events OnMinute
// derives from them, in chunks of at most chunkRows rows, each its own transaction, in (tenant,
// name, minute) order. A chunk that fails ends the flush. The chunks before it stay written; the
// chunks after it are held again for the next one (within the shares: what finds no room is
// dropped and logged). The chunk that failed may have committed all the same (its COMMIT sent,
// the answer lost), so it is held as it is, under the ID its transaction recorded
// (usage_flushes), and the next flush writes it first, under that ID, unless it finds the ID
// stored: nothing is counted twice or lost while the process lives. Nothing is written for a
// tenant that no longer exists.
func (a *Aggregator) Flush(ctx context.Context) error {
	a.flushMu.Lock()
	defer a.flushMu.Unlock()
	a.mu.Lock()
	folded, dropped, droppedKeys := a.folded, a.dropped, a.droppedKeys
	a.dropped, a.droppedKeys = 0, 0
	batch, sketches := a.takeLocked()
	a.mu.Unlock()
	if len(folded) > 0 {
		a.log.Warn("usage: tenants past their share of distinct counters between flushes; their other limits were counted under "+OtherName, "decisions", folded)
	}
	if dropped > 0 {
		a.log.Warn("usage: too many distinct counters between flushes; some decisions were not counted", "dropped", dropped)
	}
	if droppedKeys > 0 {
		a.log.Warn("usage: too many top-keys sketches between flushes; some decisions' keys were not followed", "dropped", droppedKeys)
	}
	ctx = db.WithPurpose(ctx, db.PurposeUsage)
	chunks := chunksOf(batch, sketches)
	if a.unsure != nil { // the last flush's failed chunk first, under its ID
		if err := a.writeOnce(ctx, a.unsure); err != nil {
			a.keep(chunks)
			return fmt.Errorf("usage: flush: the chunk an earlier flush could not confirm: %w", err)
		}
		a.unsure = nil
	}
	for i, units := range chunks {
		c := &chunk{id: newChunkID(), units: units}
		if err := a.writeOnce(ctx, c); err != nil {
			a.unsure = c
			a.keep(chunks[i+1:])
			return fmt.Errorf("usage: flush: chunk %d of %d: %w", i+1, len(chunks), err)
		}
	}
	now := a.now()
	if now.Sub(a.lastPrune) <= time.Hour {
		return nil
	}
	done, err := a.prune(ctx, now)
	if err != nil {
		return fmt.Errorf("usage: prune: %w", err)
	}
	if done { // else the next flush goes on
		a.lastPrune = now
	}
	return nil
}

// chunk is the units one flush transaction writes, and the ID it records (usage_flushes).
type chunk struct {
	id    string
	units []*unit
}

func newChunkID() string { return rand.Text() }

// The statements on usage_flushes: a chunk's ID, recorded unless it is there already (the
// chunk then committed before), and whether it is (the readers'); prune removes old IDs.
const (
	sqlRecordChunk   = "INSERT INTO usage_flushes (id, flushed_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING"
	sqlChunkRecorded = "SELECT COUNT(*) FROM usage_flushes WHERE id = ?"
	// chunkIDsKeptFor is as long as the rows an ID protects are kept: a chunk held by an
	// instance that cannot write for longer (its ID pruned meanwhile by another's flush) could
	// be written twice, but only into buckets past their retention, which the next prune removes.
	chunkIDsKeptFor = Retention
)

// writeOnce writes c in a transaction of its own, which first records c's ID: a chunk whose ID
// is recorded already committed before (a flush that took its error for a failure), and is not
// written again.
func (a *Aggregator) writeOnce(ctx context.Context, c *chunk) error {
	err := a.db.Serializable(ctx, func(tx *gorm.DB) error {
		res := tx.Exec(sqlRecordChunk, c.id, a.now().UnixMilli())
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return nil
		}
		return a.writeChunk(tx, c.units)
	})
	if err == nil && a.afterChunk != nil {
		err = a.afterChunk()
	}
	return err
}

// unsureUnits are the units of the chunk the last flush could not confirm (Aggregator.unsure)
// when tx does not find its ID stored: then its counts are in neither table nor memory, and a
// reader adds them as it adds memory's. nil when there is no such chunk or it committed. The
// caller holds flushMu.
func (a *Aggregator) unsureUnits(tx *gorm.DB) ([]*unit, error) {
	if a.unsure == nil {
		return nil, nil
	}
	var n int64
	if err := tx.Raw(sqlChunkRecorded, a.unsure.id).Scan(&n).Error; err != nil {
		return nil, err
	}
	if n > 0 {
		return nil, nil
	}
	return a.unsure.units, nil
}

// chunksOf orders a flush's counters and sketches by (tenant, name, minute), so that concurrent
// flushes of several instances lock rows in the same order, and cuts them into chunks of at most
// chunkRows rows (a unit, at most 2 + 2·3·TopN = 194 rows, is never split).
func chunksOf(batch map[counterKey]counts, sketches map[sketchKey]*topN) [][]*unit {
	units := make(map[counterKey]*unit, len(batch))
	for k, c := range batch {
		units[k] = &unit{key: k, counts: c}
	}
	for k, t := range sketches {
		u := units[k.counterKey]
		if u == nil { // not expected: a key is followed only when its decision is counted
			u = &unit{key: k.counterKey}
			units[k.counterKey] = u
		}
		u.sketches = append(u.sketches, kindSketch{kind: k.kind, t: t})
	}
	var chunks [][]*unit
	var chunk []*unit
	rows := 0
	for _, u := range slices.SortedFunc(maps.Values(units), func(x, y *unit) int { return x.key.compare(y.key) }) {
		slices.SortFunc(u.sketches, func(x, y kindSketch) int { return cmp.Compare(x.kind, y.kind) })
		n := u.rows()
		if len(chunk) > 0 && rows+n > chunkRows {
			chunks = append(chunks, chunk)
			chunk, rows = nil, 0
		}
		chunk = append(chunk, u)
		rows += n
	}
	if len(chunk) > 0 {
		chunks = append(chunks, chunk)
	}
	return chunks
}

// keep holds the units of chunks that were not written again, for the next flush, as Observe
// would: a counter new to what is held takes its room in its tenant's share, or goes under the
// tenant's catch-all, or is dropped, and its sketches with it.
func (a *Aggregator) keep(chunks [][]*unit) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, units := range chunks {
		for _, u := range units {
			k, counted := a.addLocked(u.key, u.counts)
			for _, s := range u.sketches {
				var t *topN
				if counted {
					t = a.sketchLocked(sketchKey{counterKey: k, kind: s.kind})
				}
				if t == nil {
					a.droppedKeys += s.t.hits()
					continue
				}
				t.merge(s.t)
			}
		}
	}
}

type countRow struct {
	key counterKey
	c   counts
}

type topRow struct {
	key             sketchKey
	limitKey        string
	hits, overcount int64
}

func (r topRow) compare(o topRow) int {
	if c := r.key.compare(o.key.counterKey); c != 0 {
		return c
	}
	if c := cmp.Compare(r.key.kind, o.key.kind); c != 0 {
		return c
	}
	return cmp.Compare(r.limitKey, o.limitKey)
}

// writeChunk writes units in tx: each minute's counts and its hour's (in one transaction, so
// that the hourly rows plus the counts in memory are complete, the current hour included), the
// keys followed, and the threshold events OnMinute derives from them; nothing of a tenant that
// no longer exists. It runs again on a retry, so it builds everything afresh.
func (a *Aggregator) writeChunk(tx *gorm.DB, units []*unit) error {
	live, err := liveTenants(tx, units)
	if err != nil {
		return err
	}
	var minutes, hours []countRow
	var tops, topHours []topRow
	hourRow := map[counterKey]int{}
	topHourRow := map[topRow]int{} // keyed by the row with hits and overcount 0
	for _, u := range units {
		if !live[u.key.tenantID] {
			continue
		}
		minutes = append(minutes, countRow{key: u.key, c: u.counts})
		// One statement may not update a row twice (PostgreSQL refuses it), so each hour's row
		// gets its minutes' counts summed.
		hk := u.key
		hk.bucket = hourStart(hk.bucket)
		if i, ok := hourRow[hk]; ok {
			hours[i].c.add(u.counts)
		} else {
			hourRow[hk] = len(hours)
			hours = append(hours, countRow{key: hk, c: u.counts})
		}
		for _, s := range u.sketches {
			sk := sketchKey{counterKey: u.key, kind: s.kind}
			hsk := sketchKey{counterKey: hk, kind: s.kind}
			for key, e := range s.t.m {
				tops = append(tops, topRow{key: sk, limitKey: key, hits: e.hits, overcount: e.overcount})
				id := topRow{key: hsk, limitKey: key}
				if i, ok := topHourRow[id]; ok {
					topHours[i].hits += e.hits
					topHours[i].overcount += e.overcount
				} else {
					topHourRow[id] = len(topHours)
					topHours = append(topHours, topRow{key: hsk, limitKey: key, hits: e.hits, overcount: e.overcount})
				}
			}
		}
	}
	// minutes and hours follow the units' order; a sketch's keys come from a map.
	slices.SortFunc(tops, topRow.compare)
	slices.SortFunc(topHours, topRow.compare)
	var refused map[counterKey]int64 // each minute's refusals so far, for OnMinute
	if a.onMinute != nil {
		refused = make(map[counterKey]int64, len(minutes))
	}
	if err := upsertCountRows(tx, "usage_stats_hourly", hours, nil); err != nil {
		return err
	}
	if err := upsertCountRows(tx, "usage_stats", minutes, refused); err != nil {
		return err
	}
	if err := upsertTopRows(tx, "usage_top_keys", tops); err != nil {
		return err
	}
	if err := upsertTopRows(tx, "usage_top_keys_hourly", topHours); err != nil {
		return err
	}
	if a.onMinute == nil {
		return nil
	}
	if err := a.tellMinutes(tx, units, live, refused); err != nil {
		return fmt.Errorf("threshold events: %w", err)
	}
	return nil
}

// liveTenants reads which of units' tenants still exist. It is read in the writing transaction:
// a flush that wrote a tenant's rows then comes before DeleteTenant's last transaction, which
// deletes them, or after it, and writes none (both are serializable).
func liveTenants(tx *gorm.DB, units []*unit) (map[int64]bool, error) {
	var ids []int64
	for _, u := range units { // in tenant order
		if len(ids) == 0 || ids[len(ids)-1] != u.key.tenantID {
			ids = append(ids, u.key.tenantID)
		}
	}
	var found []int64
	if err := tx.Raw(`SELECT id FROM tenants WHERE id IN ?`, ids).Scan(&found).Error; err != nil {
		return nil, err
	}
	live := make(map[int64]bool, len(found))
	for _, id := range found {
		live[id] = true
	}
	return live, nil
}

// tellMinutes calls onMinute once per live tenant of units whose minutes in them have refusals
// or near-limit keys, in tenant, name and minute order. The catch-all (OtherName) is not told:
// its refusals are several limits' together, and no limit refused that many.
func (a *Aggregator) tellMinutes(tx *gorm.DB, units []*unit, live map[int64]bool, refused map[counterKey]int64) error {
	for i := 0; i < len(units); {
		tenantID := units[i].key.tenantID
		var limits []LimitMinute
		for ; i < len(units) && units[i].key.tenantID == tenantID; i++ {
			u := units[i]
			if u.key.name == OtherName { // many limits' sums, not a limit: it refused nothing itself
				continue
			}
			m := LimitMinute{Name: u.key.name, Minute: time.UnixMilli(u.key.bucket).UTC()}
			if u.counts.refused > 0 {
				m.Refused = refused[u.key]
			}
			for _, s := range u.sketches {
				if s.kind == KindNear {
					m.Near = s.t.entries(u.key.name)
				}
			}
			if m.Refused > 0 || len(m.Near) > 0 {
				limits = append(limits, m)
			}
		}
		if live[tenantID] && len(limits) > 0 {
			if err := a.onMinute(tx, tenantID, limits); err != nil {
				return err
			}
		}
	}
	return nil
}

// inStatements calls write for consecutive pieces of n rows, each at most stmtRows and a power of
// two in size: pgx prepares and caches every statement text it runs (per connection, on the
// server too), and a handful of sizes keeps that to ten texts a statement, not one per count of
// rows.
func inStatements(n int, write func(from, to int) error) error {
	for from := 0; from < n; {
		size := stmtRows
		for size > n-from {
			size /= 2
		}
		if err := write(from, from+size); err != nil {
			return err
		}
		from += size
	}
	return nil
}

// values is the VALUES list of rows rows of cols bind parameters each.
func values(rows, cols int) string {
	row := "(?" + strings.Repeat(", ?", cols-1) + ")"
	return row + strings.Repeat(", "+row, rows-1)
}

// upsertCounts adds rows rows of counts to the stored counters, in the minute or the hourly
// table, returning each row's refusals so far when returning; portable to PostgreSQL, SQLite and
// CockroachDB.
func upsertCounts(table string, rows int, returning bool) string {
	q := `INSERT INTO ` + table + ` (tenant_id, name, bucket_start, allowed, refused, shadow_refused) VALUES ` + values(rows, 6) + `
ON CONFLICT (tenant_id, name, bucket_start) DO UPDATE SET
	allowed = ` + table + `.allowed + excluded.allowed,
	refused = ` + table + `.refused + excluded.refused,
	shadow_refused = ` + table + `.shadow_refused + excluded.shadow_refused`
	if returning {
		q += `
RETURNING tenant_id, name, bucket_start, refused`
	}
	return q
}

// upsertTop adds rows rows of top keys' hits to the stored ones, in the minute or the hourly
// table; portable like upsertCounts.
func upsertTop(table string, rows int) string {
	return `INSERT INTO ` + table + ` (tenant_id, name, kind, bucket_start, limit_key, hits, overcount) VALUES ` + values(rows, 7) + `
ON CONFLICT (tenant_id, name, kind, bucket_start, limit_key) DO UPDATE SET
	hits = ` + table + `.hits + excluded.hits,
	overcount = ` + table + `.overcount + excluded.overcount`
}

// upsertCountRows adds rows to table; with refused not nil, it records there each row's
// refusals so far.
func upsertCountRows(tx *gorm.DB, table string, rows []countRow, refused map[counterKey]int64) error {
	return inStatements(len(rows), func(from, to int) error {
		args := make([]any, 0, 6*(to-from))
		for _, r := range rows[from:to] {
			args = append(args, r.key.tenantID, r.key.name, r.key.bucket, r.c.allowed, r.c.refused, r.c.shadowRefused)
		}
		// Only the minutes with refusals in them are told of (tellMinutes).
		returning := refused != nil && slices.ContainsFunc(rows[from:to], func(r countRow) bool { return r.c.refused > 0 })
		q := upsertCounts(table, to-from, returning)
		if !returning {
			return tx.Exec(q, args...).Error
		}
		stored, err := tx.Raw(q, args...).Rows()
		if err != nil {
			return err
		}
		defer stored.Close()
		for stored.Next() {
			var k counterKey
			var n int64
			if err := stored.Scan(&k.tenantID, &k.name, &k.bucket, &n); err != nil {
				return err
			}
			refused[k] = n
		}
		return stored.Err()
	})
}

func upsertTopRows(tx *gorm.DB, table string, rows []topRow) error {
	return inStatements(len(rows), func(from, to int) error {
		args := make([]any, 0, 7*(to-from))
		for _, r := range rows[from:to] {
			args = append(args, r.key.tenantID, r.key.name, string(r.key.kind), r.key.bucket, r.limitKey, r.hits, r.overcount)
		}
		return tx.Exec(upsertTop(table, to-from), args...).Error
	})
}

// pruneRows bounds the rows one prune transaction deletes, and pruneBatches the transactions
// one flush runs. After a flood the expired rows of a table can be more than one transaction
// deletes within the retry budget, and one long DELETE would meanwhile conflict with every other
// instance's flush; what one flush leaves, the next ones delete.
const (
	pruneRows    = 2_000
	pruneBatches = 25
)

// The prune statements: up to pruneRows rows of a table whose bucket began before a cut (of
// usage_flushes, IDs recorded before it).
const (
	sqlPruneStats         = "DELETE FROM usage_stats WHERE (tenant_id, name, bucket_start) IN (SELECT tenant_id, name, bucket_start FROM usage_stats WHERE bucket_start < ? LIMIT ?)"
	sqlPruneStatsHourly   = "DELETE FROM usage_stats_hourly WHERE (tenant_id, name, bucket_start) IN (SELECT tenant_id, name, bucket_start FROM usage_stats_hourly WHERE bucket_start < ? LIMIT ?)"
	sqlPruneTopKeys       = "DELETE FROM usage_top_keys WHERE (tenant_id, name, kind, bucket_start, limit_key) IN (SELECT tenant_id, name, kind, bucket_start, limit_key FROM usage_top_keys WHERE bucket_start < ? LIMIT ?)"
	sqlPruneChunkIDs      = "DELETE FROM usage_flushes WHERE id IN (SELECT id FROM usage_flushes WHERE flushed_at < ? LIMIT ?)"
	sqlPruneTopKeysHourly = "DELETE FROM usage_top_keys_hourly WHERE (tenant_id, name, kind, bucket_start, limit_key) IN (SELECT tenant_id, name, kind, bucket_start, limit_key FROM usage_top_keys_hourly WHERE bucket_start < ? LIMIT ?)"
)

// prune deletes the rows past their retention, pruneRows at a time, in at most pruneBatches
// transactions; done is false when rows past retention may be left.
func (a *Aggregator) prune(ctx context.Context, now time.Time) (done bool, err error) {
	cut := now.Add(-Retention).UnixMilli()
	tables := []struct {
		stmt string
		cut  int64
	}{
		{sqlPruneTopKeys, now.Add(-MinuteKeysRetention).UnixMilli()},
		{sqlPruneTopKeysHourly, cut},
		{sqlPruneStatsHourly, cut},
		{sqlPruneStats, cut},
		{sqlPruneChunkIDs, now.Add(-chunkIDsKeptFor).UnixMilli()},
	}
	batches := 0
	for _, t := range tables {
		for deleted := int64(pruneRows); deleted == pruneRows; {
			if batches == pruneBatches {
				return false, nil
			}
			batches++
			err := a.db.Serializable(ctx, func(tx *gorm.DB) error {
				res := tx.Exec(t.stmt, t.cut, pruneRows)
				deleted = res.RowsAffected
				return res.Error
			})
			if err != nil {
				return false, err
			}
		}
	}
	return true, nil
}
