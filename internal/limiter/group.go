package limiter

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// Group commit. Every decision is a job; a worker takes every job waiting in its queue (up to
// maxGroup) and decides them all in ONE serializable transaction: one query for the definitions,
// one for the state rows, one multi-row upsert, in arrival order, each job all-or-nothing on its
// own. One worker decides every group of its engine, so a hot key's decisions are coalesced into
// one transaction instead of fighting each other with serialization failures. Strictness is
// unchanged: the transaction still reads and writes every row it decides on, and conflicting
// transactions of other processes are retried as before.

// job is one Batch call waiting for its decision.
type job struct {
	tenantID int64
	reqs     []Request
	consume  bool
	picks    [][]int // shard choices, kept across retries of the group
	out      BatchDecision
	err      error
	done     chan struct{}
}

// rowKey identifies one state row.
type rowKey struct {
	tenantID  int64
	name, key string
	shard     int
}

type defKey struct {
	tenantID int64
	name     string
}

// Run runs the engine's group-commit worker until ctx ends, then refuses what is still queued
// (those decisions fail closed with ErrUnavailable) and returns. The group in progress when ctx
// ends is finished first. Decisions need Run: without it they wait for their own context and
// then fail closed. Run may be called once per engine; it returns an error only when misused.
func (e *Engine) Run(ctx context.Context) error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("limiter: Run called twice on one engine")
	}
	defer e.refuseQueued()
	group := make([]*job, 0, e.maxGroup)
	for {
		if ctx.Err() != nil { // checked first: a busy queue must not delay the stop
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case j := <-e.queue:
			group = append(group[:0], j)
		drain:
			for len(group) < e.maxGroup {
				select {
				case next := <-e.queue:
					group = append(group, next)
				default:
					break drain
				}
			}
			e.runGroup(group)
		}
	}
}

// refuseQueued marks the engine stopped and fails every queued decision closed.
func (e *Engine) refuseQueued() {
	close(e.stopped)
	for {
		select {
		case j := <-e.queue:
			j.err = ErrUnavailable
			close(j.done)
		default:
			return
		}
	}
}

// submit queues j for the worker and waits for the decision. It fails closed with ErrUnavailable
// when Run has stopped, or when ctx ends before the decision is made (Run not running, or too slow).
func (e *Engine) submit(ctx context.Context, j *job) error {
	if err := e.enqueue(ctx, j); err != nil {
		return err
	}
	return e.await(ctx, j)
}

// enqueue hands j to the group-commit worker.
func (e *Engine) enqueue(ctx context.Context, j *job) error {
	select {
	case e.queue <- j:
		return nil
	case <-e.stopped:
		return ErrUnavailable
	case <-ctx.Done():
		return ErrUnavailable.Wrap(ctx.Err())
	}
}

// await waits for a queued job's decision.
func (e *Engine) await(ctx context.Context, j *job) error {
	// Once queued the job will be decided unless Run stops first; a caller that goes away only
	// loses the answer (and, at worst, tokens it no longer wants: an under-admission, never an
	// over-admission). A decision that was made wins over a stop or a cancellation racing it.
	select {
	case <-j.done:
		return nil
	case <-e.stopped:
	case <-ctx.Done():
	}
	select {
	case <-j.done:
		return nil
	default:
	}
	if err := ctx.Err(); err != nil {
		return ErrUnavailable.Wrap(err)
	}
	return ErrUnavailable
}

// runGroup decides jobs in one serializable transaction and completes each job.
func (e *Engine) runGroup(jobs []*job) {
	e.groups.Add(1)
	e.jobs.Add(int64(len(jobs)))
	var err error
	if e.db.Dialect == db.Postgres && !forceGormGroups {
		err = e.db.WithPgx(context.Background(), func(ctx context.Context, conn *pgx.Conn) error {
			return e.groupPgx(ctx, conn, jobs)
		})
	} else {
		err = e.db.Serializable(context.Background(), func(tx *gorm.DB) error { return e.groupGorm(tx, jobs) })
	}
	for _, j := range jobs {
		if err != nil {
			j.err = fmt.Errorf("limiter: decide: %w", err)
		}
		if j.err == nil {
			e.finish(j.tenantID, &j.out, j.consume)
		}
		close(j.done)
	}
}

// groupGorm is one attempt of a group through GORM (SQLite): definitions, rows, decisions, writes.
func (e *Engine) groupGorm(tx *gorm.DB, jobs []*job) error {
	if e.db.Dialect == db.Postgres { // see groupPgx
		if err := tx.Exec(pgNoSeqScan).Error; err != nil {
			return err
		}
		if e.fastCommit {
			if err := tx.Exec(pgFastCommit).Error; err != nil {
				return err
			}
		}
	}
	now, err := e.nowIn(tx)
	if err != nil {
		return err
	}
	defs, versions, err := loadDefinitions(tx, definitionKeys(jobs))
	if err != nil {
		return err
	}
	ovs, err := e.overrides.indexes(versions, overrideLoader(tx))
	if err != nil {
		return err
	}
	defsOf, oversOf, wanted := e.plan(jobs, defs, ovs, now)
	stored, err := loadRows(tx, wanted)
	if err != nil {
		return err
	}
	return saveRows(tx, decideGroup(jobs, defsOf, oversOf, stored, now))
}

// plan resolves every job's definitions, the overrides that apply at now and shard choices, and
// lists the rows they need. A job whose definitions do not resolve gets its error and no rows.
func (e *Engine) plan(jobs []*job, defs map[defKey]Definition, ovs map[defKey]*algo.OverrideIndex, now int64) ([][]Definition, [][]*algo.Override, []rowKey) {
	defsOf := make([][]Definition, len(jobs))
	oversOf := make([][]*algo.Override, len(jobs))
	var wanted []rowKey
	for ji, j := range jobs {
		defsOf[ji], oversOf[ji], j.err = resolveDefinitions(j, defs, ovs, now)
		if j.err != nil {
			continue
		}
		for i, req := range j.reqs {
			e.ensurePicks(j, i, defsOf[ji][i].Shards)
			for _, s := range j.picks[i] {
				wanted = append(wanted, rowKey{j.tenantID, req.Name, req.Key, s})
			}
		}
	}
	return defsOf, oversOf, wanted
}

// ensurePicks keeps a request's shard choice across retries unless the shard count changed.
func (e *Engine) ensurePicks(j *job, i, shards int) {
	p := j.picks[i]
	if len(p) == min(shards, 2) && maxIndex(p) < shards {
		return
	}
	j.picks[i] = e.pickShards(shards)
}

// decideGroup decides the jobs in arrival order and returns the rows to write.
func decideGroup(jobs []*job, defsOf [][]Definition, oversOf [][]*algo.Override, stored map[rowKey]fullStateRow, now int64) map[rowKey]algo.State {
	overlay := map[rowKey]algo.State{}
	for ji, j := range jobs {
		if j.err == nil {
			j.out, j.err = decideJob(j, defsOf[ji], oversOf[ji], stored, overlay, now)
		}
	}
	return overlay
}

func definitionKeys(jobs []*job) []defKey {
	seen := map[defKey]bool{}
	var keys []defKey
	for _, j := range jobs {
		for _, r := range j.reqs {
			k := defKey{j.tenantID, r.Name}
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// resolveDefinitions picks each request's definition (the stored one, or its inline config) and
// the override that applies to its key at now: an override's numbers replace the definition's;
// an allow or deny override is returned for decideJob to act on.
func resolveDefinitions(j *job, stored map[defKey]Definition, ovs map[defKey]*algo.OverrideIndex, now int64) ([]Definition, []*algo.Override, error) {
	out := make([]Definition, len(j.reqs))
	var overs []*algo.Override
	for i, req := range j.reqs {
		k := defKey{j.tenantID, req.Name}
		d, ok := stored[k]
		var ov *algo.Override
		switch {
		case ok && req.Config != nil:
			return nil, nil, ErrDefinitionExists
		case ok:
			out[i] = d
			if ov = ovs[k].Lookup(req.Key, now); ov != nil {
				if overs == nil {
					overs = make([]*algo.Override, len(j.reqs))
				}
				overs[i] = ov
				out[i] = ov.Apply(d)
			}
		case req.Config != nil:
			out[i] = req.Config.Normalized()
		default:
			return nil, nil, ErrLimitNotFound
		}
		err := out[i].CheckCount(req.Count, req.Reserve)
		if ov != nil && ov.Action != algo.ActionNone && errors.Is(err, algo.ErrCountExceedsCapacity) {
			err = nil // allow and deny never weigh the count against the capacity
		}
		if err != nil {
			return nil, nil, fromAlgo(err)
		}
	}
	return out, overs, nil
}

// decideJob decides one job against the rows as the jobs before it in the group left them. Its
// writes join the overlay only if every one of its limits allowed (all or nothing) and it consumes.
func decideJob(j *job, defs []Definition, overs []*algo.Override, stored map[rowKey]fullStateRow, overlay map[rowKey]algo.State, now int64) (BatchDecision, error) {
	out := BatchDecision{OK: true, Results: make([]Decision, len(j.reqs))}
	local := map[rowKey]algo.State{}
	for i, req := range j.reqs {
		def := defs[i]
		var ov *algo.Override
		if overs != nil {
			ov = overs[i]
		}
		if ov != nil && ov.Action == algo.ActionDeny {
			ra := ov.DenyRetryAfter(now)
			out.Results[i] = Decision{Name: req.Name, Key: req.Key, RetryAfter: &ra, Definition: def, Override: ov.Match, denied: true}
			out.OK = false
			continue
		}
		states := make([]algo.State, len(j.picks[i]))
		for k, s := range j.picks[i] {
			rk := rowKey{j.tenantID, req.Name, req.Key, s}
			if st, ok := local[rk]; ok {
				states[k] = st
			} else if st, ok := overlay[rk]; ok {
				states[k] = st
			} else {
				states[k] = stored[rk].state(def)
			}
		}
		origin := algo.Origin(def, j.tenantID, req.Name, req.Key)
		if ov != nil && ov.Action == algo.ActionAllow {
			// Admitted without counting: nothing is written; remaining is the key's balance as it stands.
			d := algo.Decide(def, states, 0, false, now, origin)
			out.Results[i] = Decision{Name: req.Name, Key: req.Key, OK: true, Remaining: d.Remaining, Definition: def, Override: ov.Match}
			continue
		}
		d := algo.Decide(def, states, req.Count, req.Reserve, now, origin)
		out.Results[i] = Decision{Name: req.Name, Key: req.Key, OK: d.OK, Remaining: d.Remaining, Definition: def}
		if ov != nil {
			out.Results[i].Override = ov.Match
		}
		if !math.IsNaN(d.RetryAfter) {
			ra := algo.RetryAfterMillis(d.RetryAfter)
			out.Results[i].RetryAfter = &ra
		}
		if !d.OK {
			out.OK = false
			continue
		}
		for k, w := range d.Writes {
			if w.Exists {
				local[rowKey{j.tenantID, req.Name, req.Key, j.picks[i][k]}] = w
			}
		}
	}
	if j.consume && out.OK {
		for k, st := range local {
			overlay[k] = st
		}
	}
	return out, nil
}
