package limiter

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// The PostgreSQL hot path: a group transaction in two round trips, pipelined with pgx (a group
// of plain single-shard token bucket decisions takes one instead: group_onetrip_pg.go).
//
//	RT1: BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT set_config(...) (pgSettingsFor);
//	     SELECT definitions (with the version of their overrides); SELECT state rows
//	RT2: INSERT ... ON CONFLICT DO UPDATE (every changed row); COMMIT
//
// A limit's overrides come from memory (overrides.go); only when RT1 shows that their version
// changed does the group read them, once, in between.
//
// The rows of RT1 are chosen from the shard count last seen for each limit (shardHints); the
// definitions read in the same transaction are what decide, so a stale hint only costs one more
// round trip for the rows it missed. The statements are state_sql_pg.go's.

// shardHints remembers the definition of each limit last read, for choosing rows (and, with
// nested budgets, the parents' definitions and rows) before the definitions are read, and the
// version of its overrides then, for choosing the one-trip path (group_onetrip_pg.go).
type shardHints struct {
	mu sync.RWMutex
	m  map[defKey]hint
}

type hint struct {
	def              Definition
	overridesVersion int64
	// version is the definition's row version (migration 00016) when the one-trip path read
	// it, 0 when the general path did: the one-trip function returns a definition only when the
	// stored one's differs.
	version int64
}

// snapshot is a copy of the hints, which expand reads like definitions.
func (h *shardHints) snapshot(keys []defKey) map[defKey]Definition {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make(map[defKey]Definition, len(keys))
	// Follow parents a few generations: a parent's hint is needed for its own parents.
	for range algo.MaxParentDepth + 1 {
		var next []defKey
		for _, k := range keys {
			if _, done := out[k]; done {
				continue
			}
			d, ok := h.m[k]
			if !ok {
				continue
			}
			out[k] = d.def
			for _, p := range d.def.Parents {
				next = append(next, defKey{k.tenantID, p.Name})
			}
		}
		if len(next) == 0 {
			break
		}
		keys = next
	}
	return out
}

// set remembers what a group read: defs, each with the version of its overrides in versions
// (0 when absent, or versions nil), and drops the hints of the keys in asked that have no
// definition now (a limit deleted since), so that no decision is planned from one that is gone.
func (h *shardHints) set(asked []defKey, defs map[defKey]Definition, versions map[defKey]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.makeRoom()
	for k, d := range defs {
		h.m[k] = hint{def: d, overridesVersion: versions[k]}
	}
	for _, k := range asked {
		if _, ok := defs[k]; !ok {
			delete(h.m, k)
		}
	}
}

// makeRoom starts the hints afresh when there are none yet or too many (limits deleted or never
// used again); h.mu must be held.
func (h *shardHints) makeRoom() {
	if h.m == nil || len(h.m) > 100_000 {
		h.m = map[defKey]hint{}
	}
}

// setRead remembers the hints of definitions the one-trip path read, with their versions.
func (h *shardHints) setRead(read map[defKey]hint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.makeRoom()
	for k, d := range read {
		h.m[k] = d
	}
}

// lookup is the hint for k.
func (h *shardHints) lookup(k defKey) (hint, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	d, ok := h.m[k]
	return d, ok
}

// groupPgx is one attempt of a group on PostgreSQL.
func (e *Engine) groupPgx(ctx context.Context, conn *pgx.Conn, jobs []*job) error {
	if held, ok := e.oneTripCase(jobs); ok {
		decided, err := e.groupOneTrip(ctx, conn, jobs, held)
		if err != nil || decided {
			return err
		}
		// A limit changed since its hint: the function decided nothing; decide the general way.
	}
	keys := definitionKeys(jobs)
	guess, keys := e.guess(jobs, keys)
	guess = sortedUnique(guess)

	b := &pgx.Batch{}
	lock := lockRows(ctx)
	queueGroupReads(b, keys, guess, e.fastCommit, lock)
	pending := idemKeys(jobs)
	if len(pending) > 0 {
		queueIdemRead(b, pending)
	}
	e.sent(b.Len())
	br := conn.SendBatch(ctx, b)
	now, defs, versions, stored, err := readGroupReads(br)
	var answers map[idemKey]idemRecord
	if err == nil && len(pending) > 0 {
		answers, err = readIdemPg(br)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	asked := make(map[defKey]bool, len(keys))
	for _, k := range keys {
		asked[k] = true
	}
	// Parents the hints did not foresee: one more query per generation (only after a change).
	if err := readParents(jobs, defs, asked, func(k []defKey) (map[defKey]Definition, error) {
		e.sent(1)
		return selectDefinitionsPg(ctx, conn, k, versions)
	}); err != nil {
		return err
	}
	e.hints.set(keys, defs, versions)
	if e.testNow != nil {
		now = e.testNow().UnixMilli()
	}
	// Overrides come from memory unless their version changed (then one more round trip).
	ovs, err := e.overrides.indexes(versions, func(k defKey) ([]Override, error) {
		e.sent(1)
		return selectOverridesPg(ctx, conn, k)
	})
	if err != nil {
		return err
	}

	deciding := idemBefore(jobs, answers, now) // replays decide nothing
	wanted := e.plan(deciding, defs, ovs, now)
	var missing []rowKey
	have := make(map[rowKey]bool, len(guess))
	for _, k := range guess {
		have[k] = true
	}
	for _, k := range sortedUnique(wanted) {
		if !have[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 { // a shard count changed since the hint: fetch what it missed
		e.sent(1)
		if err := selectRowsPg(ctx, conn, missing, stored, lock); err != nil {
			return err
		}
	}

	writes := decideGroup(deciding, stored, now)
	b = &pgx.Batch{}
	queueGroupWrites(b, writes, afterDecisions(deciding, now))
	e.beforeCommitPg(b, jobs, now) // after the leases: an idempotent answer carries its lease
	b.Queue(pgCommit)
	e.sent(b.Len())
	br = conn.SendBatch(ctx, b)
	for range b.Len() {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("limiter: commit group: %w", err)
	}
	return nil
}

// guess lists the rows and definitions the first round trip reads: each request's rows and,
// through the hints, its ancestors' definitions and rows. What the hints miss is read after.
func (e *Engine) guess(jobs []*job, keys []defKey) ([]rowKey, []defKey) {
	hint := e.hints.snapshot(keys)
	seen := make(map[defKey]bool, len(keys))
	for _, k := range keys {
		seen[k] = true
	}
	var rows []rowKey
	for _, j := range jobs {
		exp, missing, err := expand(j, hint, nil, 0, false) // overrides change numbers, never the shards
		if err != nil {                                     // no (or a stale) hint: the requests' own rows, as one shard or their config's
			for i, req := range j.reqs {
				shards, tenant := 1, j.tenantID
				if req.System {
					tenant = SystemTenant
				}
				if d, ok := hint[defKey{j.tenantID, req.Name}]; ok && !req.System {
					shards = d.Shards
				}
				if req.Config != nil {
					shards = max(req.Config.Shards, 1)
				}
				e.ensurePicks(j, i, shards, req)
				for _, s := range j.picks[i] {
					rows = append(rows, rowKey{tenant, req.Name, req.Key, s})
				}
			}
			continue
		}
		for x, r := range exp {
			e.ensurePicks(j, x, r.def.Shards, j.reqs[r.of])
			for _, s := range j.picks[x] {
				rows = append(rows, rowKey{r.tenantID, r.name, r.key, s})
			}
			if k := (defKey{j.tenantID, r.name}); !seen[k] && !j.reqs[r.of].System {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		for _, k := range missing {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return sortedUnique(rows), keys
}
