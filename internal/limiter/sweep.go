package limiter

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// Sweeping. A missing limit_state row means "full" (DESIGN §3), so a row whose state has become
// indistinguishable from a missing one is dead weight: Sweep deletes such rows, keeping the state
// table proportional to the keys that are actually limited right now rather than to every key
// ever seen.
//
// "Indistinguishable" is exact, not approximate (algo.ReadsAsMissing): a row is deleted only when
// the view the decision functions build from it (algo's views of each kind: the
// available tokens, the ts a write would store, the sliding window's counters, sub-interval and
// elapsed fraction) equals the view they build from no row, at the sweeping transaction's clock
// reading and SweepClockGrace before it. Every decision, check, value and retryAfter is a
// function of those views, so it comes out identical with or without the row, now and at any
// later time (each kind only gets fuller as time passes without writes). Concretely:
//   - token bucket: ts <= now and value + (now-ts)*rate/period >= max (per shard);
//   - fixed window: the windows elapsed refill it to max, and its ts is the start of the window
//     (aligned to the key's origin) containing now;
//   - sliding window: every stored counter has left the window (now's sub-interval >= the stored
//     one + resolution + 1), or the ones still inside are zero.
//
// A stored ts ahead of the clock (written by an instance whose clock runs fast) is never swept:
// it is what stops that instance's skew from minting tokens. SweepClockGrace extends the same
// protection to instances whose clock runs slightly slow: a row is swept only when it would read
// as full to them too.
//
// Rows of names without a stored definition come from inline configs, which are not stored, so
// their fullness cannot be proved. They are kept until their ts is InlineStateTTL old and then
// deleted: inline configs get "state is forgotten 24 h after the last write" as their documented
// retention. Limits whose state must outlive that (periods over a day, or reservations repaid
// over more than a day) should be stored definitions.
//
// Races: each batch is scanned without a transaction and judged at the database's clock. On
// PostgreSQL the candidates are then deleted by one statement that deletes a row only if it still
// holds exactly the scanned state and its limit still has the definition it was judged by
// (pgDeleteUnchanged): a decision that wrote the row in between keeps it, and unchanged state
// that read as full reads as full at any later time. It takes no serializable read set, so it
// never conflicts with decisions on neighbouring keys (a serializable re-read and delete of a
// batch did, and under sustained load it ran out of retries). On SQLite (one writer) the batch is
// re-read and deleted in one short transaction that re-evaluates every row and its definition at
// the transaction's own clock.

// SweepClockGrace is how far behind the sweeper's clock another instance's clock may run without
// a sweep handing it tokens it would not have had: rows must read as full that long ago too.
const SweepClockGrace = time.Second

// InlineStateTTL is how long the state of an inline-config limit (one with no stored definition)
// is kept after its ts.
const InlineStateTTL = 24 * time.Hour

// DefaultSweepBatch is the batch size Sweep uses when given batch <= 0.
const DefaultSweepBatch = 500

// maxSweepBatch keeps every statement's bind parameters well under SQLite's and PostgreSQL's limits.
const maxSweepBatch = 1000

// definitionLookup is a definition (with its overrides) or its absence.
type definitionLookup struct {
	def       Definition
	updatedAt time.Time // which version of the definition def is
	// overridesVersion and ovs are the limit's overrides, which a row must read as missing under
	// too (the sweeper's deletion checks that neither the definition nor they have changed).
	overridesVersion int64
	ovs              *algo.OverrideIndex
	ok               bool
}

// definitionCache reads each (tenant, name) definition once per pass.
type definitionCache map[defKey]definitionLookup

// get reads the definition of r's limit and its overrides in tx, which must be one transaction:
// the overrides go into the engine's cache, which every decision reads, under the version the
// definition read, and two statements outside a transaction could see an override change commit
// between them and cache its overrides under the version before it.
func (c definitionCache) get(e *Engine, tx *gorm.DB, r fullStateRow) (definitionLookup, error) {
	k := defKey{r.TenantID, r.Name}
	if d, seen := c[k]; seen {
		return d, nil
	}
	def, ok, err := loadDefinition(tx, r.TenantID, r.Name)
	if err != nil {
		return definitionLookup{}, err
	}
	if e.betweenDefinitionAndOverrides != nil {
		e.betweenDefinitionAndOverrides()
	}
	ovs, err := e.overridesOf(tx, k, def.OverridesVersion)
	if err != nil {
		return definitionLookup{}, err
	}
	c[k] = definitionLookup{def.Definition, def.UpdatedAt, def.OverridesVersion, ovs, ok}
	return c[k], nil
}

// Sweep deletes limit_state rows whose state is provably the same as no row (see the comment
// above), in batches of at most batch rows, each deleted in its own short serializable
// transaction. It returns how many rows it deleted; on error, the rows deleted before it.
func (e *Engine) Sweep(ctx context.Context, batch int) (deleted int, err error) {
	return e.SweepPaced(ctx, batch, 1)
}

// rest waits after worked so that the work takes at most dutyCycle (0 < dutyCycle <= 1) of the
// time, at most 5 s; it returns ctx's error if ctx ends first.
func rest(ctx context.Context, worked time.Duration, dutyCycle float64) error {
	if dutyCycle >= 1 {
		return nil
	}
	pause := time.Duration(float64(worked) * (1 - dutyCycle) / dutyCycle)
	t := time.NewTimer(min(pause, 5*time.Second))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// SweepPaced is Sweep that rests between batches so that the sweeper takes at most dutyCycle
// (0 < dutyCycle <= 1) of one connection's time: a sweep over a large table must not starve the
// decisions it shares the database with (measured: an unpaced sweep of 300,000 full rows cut
// decision throughput several-fold while it ran).
func (e *Engine) SweepPaced(ctx context.Context, batch int, dutyCycle float64) (deleted int, err error) {
	ctx = db.WithPurpose(ctx, db.PurposeSweep)
	if batch <= 0 {
		batch = DefaultSweepBatch
	}
	batch = min(batch, maxSweepBatch)
	if dutyCycle <= 0 || dutyCycle > 1 {
		dutyCycle = 1
	}
	// Definitions seen by the scan; the deleting transaction reads them again.
	scanDefs := definitionCache{}
	var cursor *fullStateRow
	for {
		if err := ctx.Err(); err != nil {
			return deleted, fmt.Errorf("limiter: sweep: %w", err)
		}
		started := time.Now()
		// The scan runs outside any transaction: what it returns is only a list of candidates.
		rows, err := scanState(e.db.Gorm.WithContext(ctx), cursor, batch)
		if err != nil {
			return deleted, fmt.Errorf("limiter: sweep: scan: %w", err)
		}
		if len(rows) == 0 {
			return deleted, nil
		}
		cursor = &rows[len(rows)-1]
		// A first, lock-free look; deleteIfStillFull decides at its own transaction's time.
		now, err := e.nowIn(e.db.Gorm.WithContext(ctx))
		if err != nil {
			return deleted, fmt.Errorf("limiter: sweep: clock: %w", err)
		}
		// The definitions of the batch's limits not seen yet in this pass, each with its
		// overrides, in one snapshot (definitionCache.get).
		if slices.ContainsFunc(rows, func(r fullStateRow) bool { _, seen := scanDefs[defKey{r.TenantID, r.Name}]; return !seen }) {
			err := e.db.ReadOnly(ctx, func(tx *gorm.DB) error {
				for _, r := range rows {
					if _, err := scanDefs.get(e, tx, r); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return deleted, fmt.Errorf("limiter: sweep: definition: %w", err)
			}
		}
		var candidates []fullStateRow
		var definedAt []*time.Time
		var versions []int64
		for _, r := range rows {
			d := scanDefs[defKey{r.TenantID, r.Name}]
			if sweepable(d, r, now) {
				candidates = append(candidates, r)
				var at *time.Time
				if d.ok {
					at = &d.updatedAt
				}
				definedAt, versions = append(definedAt, at), append(versions, d.overridesVersion)
			}
		}
		if len(candidates) > 0 {
			var n int
			var err error
			if e.db.Dialect == db.Postgres {
				n, err = e.deleteUnchanged(ctx, candidates, definedAt, versions)
			} else {
				n, err = e.deleteIfStillFull(ctx, candidates)
			}
			deleted += n
			if err != nil {
				return deleted, fmt.Errorf("limiter: sweep: delete: %w", err)
			}
		}
		if len(rows) < batch {
			return deleted, nil
		}
		if err := rest(ctx, time.Since(started), dutyCycle); err != nil {
			return deleted, fmt.Errorf("limiter: sweep: %w", err)
		}
	}
}

// deleteUnchanged deletes the candidates that still hold their scanned state under the
// definition and the overrides they were judged by (PostgreSQL; see pgDeleteUnchanged).
func (e *Engine) deleteUnchanged(ctx context.Context, candidates []fullStateRow, definedAt []*time.Time, overridesVersion []int64) (int, error) {
	var deleted int64
	err := e.db.WithPgx(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		var err error
		deleted, err = deleteUnchangedPg(ctx, conn, candidates, definedAt, overridesVersion)
		return err
	})
	return int(deleted), err
}

// deleteIfStillFull re-reads candidates and their definitions in one serializable transaction
// and deletes those still provably full at the transaction's clock.
func (e *Engine) deleteIfStillFull(ctx context.Context, candidates []fullStateRow) (int, error) {
	keys := make([]rowKey, len(candidates))
	for i, r := range candidates {
		keys[i] = r.key()
	}
	var deleted int
	err := e.db.Serializable(ctx, func(tx *gorm.DB) error {
		deleted = 0
		now, err := e.nowIn(tx)
		if err != nil {
			return err
		}
		current, err := loadRows(tx, keys)
		if err != nil {
			return err
		}
		defs := definitionCache{}
		var doomed []rowKey
		for _, k := range keys {
			r, ok := current[k]
			if !ok {
				continue
			}
			d, err := defs.get(e, tx, r)
			if err != nil {
				return err
			}
			if sweepable(d, r, now) {
				doomed = append(doomed, k)
			}
		}
		n, err := deleteRows(tx, doomed)
		deleted = int(n)
		return err
	})
	return deleted, err
}

// sweepable reports whether row r reads exactly like no row at now and SweepClockGrace before,
// under the definition and under the numbers of every override that matches the key: whichever
// of them decides the key next (the winner may expire, or be deleted, leaving a shorter prefix or
// the definition), the row must make no difference. A row that reads as full under a raised
// capacity may still be short of a lower one.
func sweepable(d definitionLookup, r fullStateRow, now int64) bool {
	if r.PenaltyUntil > now-SweepClockGrace.Milliseconds() {
		return false // a running penalty is state no missing row has
	}
	if !d.ok {
		if r.TenantID == SystemTenant && r.Name == PlanLimitName && r.Value < 1 {
			// A plan's decision rate (PlanRequest), whose numbers the row does not carry: a plan
			// slower than a decision a day refills its burst of one in more than InlineStateTTL,
			// so a row written below one decision is kept (until the tenant's next decision
			// rewrites it, or its deletion deletes it: one row per tenant at most).
			return false
		}
		return r.TS <= now-InlineStateTTL.Milliseconds()
	}
	def := d.def.Normalized()
	if r.Shard < 0 || r.Shard >= def.Shards {
		return false // cannot happen (a shard count change drops state); keep what we do not understand
	}
	r.exists = true
	then := now - SweepClockGrace.Milliseconds()
	defs := []Definition{def}
	for _, o := range d.ovs.Matching(r.Key, then) {
		if o.Action == algo.ActionNone {
			defs = append(defs, o.Apply(def))
		}
	}
	for _, dd := range defs {
		if !algo.ReadsAsMissing(dd, r.state(dd), algo.Origin(dd, r.TenantID, r.Name, r.Key), then, now) {
			return false
		}
	}
	return true
}
