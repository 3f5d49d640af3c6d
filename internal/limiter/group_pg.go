package limiter

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
)

// The PostgreSQL hot path: a group transaction in two round trips, pipelined with pgx.
//
//	RT1: BEGIN ISOLATION LEVEL SERIALIZABLE; SET LOCAL enable_seqscan; SELECT definitions (with
//	     the version of their overrides); SELECT state rows
//	RT2: INSERT ... ON CONFLICT DO UPDATE (every changed row); COMMIT
//
// A limit's overrides come from memory (overrides.go); only when RT1 shows that their version
// changed does the group read them, once, in between.
//
// The rows of RT1 are chosen from the shard count last seen for each limit (shardHints); the
// definitions read in the same transaction are what decide, so a stale hint only costs one more
// round trip for the rows it missed. The statements are state_sql_pg.go's.

// shardHints remembers the shard count of each limit for choosing rows before the definition is read.
type shardHints struct {
	mu sync.RWMutex
	m  map[defKey]int
}

func (h *shardHints) get(k defKey) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if n, ok := h.m[k]; ok {
		return n
	}
	return 1
}

func (h *shardHints) set(defs map[defKey]Definition) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) > 100_000 {
		h.m = map[defKey]int{}
	}
	for k, d := range defs {
		h.m[k] = d.Shards
	}
}

// groupPgx is one attempt of a group on PostgreSQL.
func (e *Engine) groupPgx(ctx context.Context, conn *pgx.Conn, jobs []*job) error {
	keys := definitionKeys(jobs)
	var guess []rowKey
	for _, j := range jobs {
		for i, req := range j.reqs {
			shards := e.hints.get(defKey{j.tenantID, req.Name})
			if req.Config != nil {
				shards = max(req.Config.Shards, 1)
			}
			e.ensurePicks(j, i, shards)
			for _, s := range j.picks[i] {
				guess = append(guess, rowKey{j.tenantID, req.Name, req.Key, s})
			}
		}
	}
	guess = sortedUnique(guess)

	b := &pgx.Batch{}
	queueGroupReads(b, keys, guess, e.fastCommit)
	br := conn.SendBatch(ctx, b)
	now, defs, versions, stored, err := readGroupReads(br, e.fastCommit)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	e.hints.set(defs)
	if e.testNow != nil {
		now = e.testNow().UnixMilli()
	}
	// Overrides come from memory unless their version changed (then one more round trip).
	ovs, err := e.overrides.indexes(versions, func(k defKey) ([]Override, error) { return selectOverridesPg(ctx, conn, k) })
	if err != nil {
		return err
	}

	defsOf, oversOf, wanted := e.plan(jobs, defs, ovs, now)
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
		if err := selectRowsPg(ctx, conn, missing, stored); err != nil {
			return err
		}
	}

	writes := decideGroup(jobs, defsOf, oversOf, stored, now)
	b = &pgx.Batch{}
	queueGroupWrites(b, writes)
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
