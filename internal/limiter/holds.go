package limiter

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// Holds. A hold reserves amounts of several limits all or nothing, exactly like a consuming batch
// (it is one: the group commit decides it, and its step writes the hold's rows in the same
// transaction), and is later closed exactly once:
//   - settled with the actual amounts: less than held gives the difference back; more than held
//     takes the extra as a decision of its own per limit (with its ancestors) when it fits, and
//     otherwise takes none of it and records it as overage, which the answer returns and the
//     metrics count (once the close's transaction has committed, runCloses): a settle never
//     blocks;
//   - released (DELETE): everything held is given back;
//   - expired: a hold not settled by its expiry (the engine's clock) is released by SweepHolds.
//
// What is given back goes only to the limits, keys and shards the hold took from (its charges,
// recorded when it was made), each at most what it took and what of that still counts at the
// close (algo.Taken.GiveBack, with the refund's math: never above a limit's maximum), so a hold
// never lets through more than a key that never saw it; a limit whose numbers changed while the
// hold was open (even back again) gets nothing, and what other holds gave back to a key since
// counts as what it may have held (holdSnapshots). A hold made before charges were recorded
// gives back what it held, to every shard of a sharded limit (everyShard).
// Closing reads the hold and changes the state rows and the hold in one serializable transaction,
// so of two concurrent closes one finds it closed (ErrHoldClosed). Closes (and lease changes) are
// jobs of the engine's lanes (runCloses): the closes of one group share one transaction of their
// own, never beside that lane's decisions.

// Bounds on holds.
const (
	MaxHoldLimits = 64         // limits in one hold
	MaxHoldTTL    = 86_400_000 // ms: a day
	// ClosedHoldRetention is how long a closed hold's rows are kept (ms after it closed) before
	// SweepHolds deletes them: until then a second settle or release is 409 hold_closed, not 404.
	ClosedHoldRetention = 86_400_000
	// giveBacksKept is how long the numbering of holds on a key is kept untouched, and each
	// give-back logged, for other holds' closes (ms): a hold lives at most MaxHoldTTL, and the
	// sweeper may release it late. A close past it treats what others gave back as unknown and
	// gives nothing back.
	giveBacksKept = 2 * MaxHoldTTL
)

// The states of a hold.
const (
	HoldOpen     = "open"
	HoldSettled  = "settled"
	HoldReleased = "released"
	HoldExpired  = "expired"
)

// Errors of holds.
var (
	// ErrHoldNotFound: no hold of the tenant has that id.
	ErrHoldNotFound = &apperr.Error{Code: apperr.NotFound, Message: "no such hold"}
	// ErrHoldClosed: the hold was settled, released or has expired; it cannot be closed again.
	ErrHoldClosed = &apperr.Error{Code: apperr.HoldClosed, Message: "the hold is closed (settled, released or expired)"}
)

// HoldLimit is one amount a hold reserves.
type HoldLimit struct {
	Name, Key  string
	Count      float64
	Attributes map[string]string
}

// HoldResult is the outcome of Hold: when the batch is admitted, the hold's id and expiry (ms
// since the epoch); when refused, nothing is held and Decision says why.
type HoldResult struct {
	ID        string
	ExpiresAt int64
	Decision  BatchDecision
	// With is the decision of HoldWith's extra request (a plan's decision rate), nil without one.
	// It is not among Decision's results, but Decision.OK is false when it refused: then nothing
	// is held.
	With *Decision
}

// Settlement is the outcome of settling a hold, per limit in the hold's order.
type Settlement struct {
	Names, Keys            []string
	Held, Charged, Overage []float64
	// Refunded is what was given back of each limit (less than held - actual only when the limit
	// could not take it all back without exceeding its maximum).
	Refunded []float64
}

func holdProblem(field, msg string) error { return invalidRequest(field, msg) }

// Hold reserves every amount all or nothing for ttlMs (1 ms to a day). Every limit must be a
// stored definition that is not a concurrency limit.
func (e *Engine) Hold(ctx context.Context, tenantID int64, limits []HoldLimit, ttlMs int64) (HoldResult, error) {
	return e.HoldWith(ctx, tenantID, limits, ttlMs, nil)
}

// HoldWith is Hold with, when with is not nil, with decided in the hold's batch, all or nothing
// with it (a plan's decision rate, Request.System, spending one decision per limit held): when
// it refuses nothing is held, and when the hold is refused it consumes nothing. It is not part
// of the hold: a settle or release gives nothing back to it.
func (e *Engine) HoldWith(ctx context.Context, tenantID int64, limits []HoldLimit, ttlMs int64, with *Request) (HoldResult, error) {
	if len(limits) == 0 || len(limits) > MaxHoldLimits {
		return HoldResult{}, holdProblem("limits", fmt.Sprintf("must hold 1 to %d limits", MaxHoldLimits))
	}
	if ttlMs < 1 || ttlMs > MaxHoldTTL {
		return HoldResult{}, holdProblem("ttl", fmt.Sprintf("must be a whole number of milliseconds from 1 to %d", MaxHoldTTL))
	}
	reqs := make([]Request, len(limits))
	for i, l := range limits {
		if !finiteAmount(l.Count) {
			return HoldResult{}, holdProblem(fmt.Sprintf("limits[%d].count", i), "must be a finite number >= 0")
		}
		reqs[i] = Request{Name: l.Name, Key: l.Key, Count: l.Count, Attributes: l.Attributes, hold: true, Field: fmt.Sprintf("limits[%d].", i)}
		if err := validateRequest(&reqs[i]); err != nil {
			return HoldResult{}, err
		}
	}
	all := reqs
	if with != nil {
		if err := validateRequest(with); err != nil {
			return HoldResult{}, err
		}
		all = append(reqs[:len(reqs):len(reqs)], *with)
	}
	var out HoldResult
	j := &job{tenantID: tenantID, reqs: all, consume: true, picks: make([][]int, len(all)), done: make(chan struct{})}
	j.step = func(j *job, now int64) []stmt {
		out.ID, out.ExpiresAt = newID("hold_"), now+ttlMs
		return holdInserts(tenantID, out.ID, limits, charges(j.out.Results[:len(limits)]), now, out.ExpiresAt)
	}
	result := func() HoldResult {
		r := out
		r.Decision, r.With = withOut(j.out, with != nil)
		if !j.out.OK {
			r.ID, r.ExpiresAt = "", 0
		}
		return r
	}
	j.idem = callIdempotency(ctx, func() any { return result() }) // rendered after the step: the hold's id is set
	if err := e.submit(ctx, j); err != nil {
		return HoldResult{}, fmt.Errorf("limiter: hold: %w", err)
	}
	if j.err != nil {
		return HoldResult{}, j.err
	}
	reportIdempotent(j)
	if j.replayed {
		return HoldResult{}, nil
	}
	return result(), nil
}

// withOut splits the decision of a batch's last request (HoldWith's with) off the batch when
// with is set; the batch keeps its OK (all or nothing) and its retryAfter.
func withOut(b BatchDecision, with bool) (BatchDecision, *Decision) {
	if !with {
		return b, nil
	}
	n := len(b.Results) - 1
	w := b.Results[n]
	b.Results = b.Results[:n:n]
	return b, &w
}

// closeJob runs fn as a close in a lane's group (runCloses) and returns its error. With
// an idempotency record in ctx (WithIdempotency) the answer rendered from result() is stored in
// the close's transaction, and a retry replays it without running fn.
func (e *Engine) closeJob(ctx context.Context, tenantID int64, fn func(tx *gorm.DB, j *job) error, result func() any) error {
	j := &job{tenantID: tenantID, close: fn, done: make(chan struct{}), sweep: db.PurposeOf(ctx) == db.PurposeSweep} // the tenant keys its Idempotency-Key
	j.idem = callIdempotency(ctx, result)
	if err := e.submit(ctx, j); err != nil {
		return err
	}
	reportIdempotent(j)
	return j.err
}

// runCloses runs the closes among jobs in one serializable transaction of their own, in arrival
// order, and returns the other jobs. A close refused for its own reason (a 4xx: not found,
// closed, bad counts) keeps only writes that stand whatever the answer (a lease row of a limit
// that is gone), and the others go on; any other error fails them all (a serialization failure
// retries them all first). Overage is reported after the commit, once per close that succeeded:
// an attempt that rolled back (retried, or failed by another close) charged nothing.
func (e *Engine) runCloses(ctx context.Context, jobs []*job) []*job {
	var closes, rest []*job
	for _, j := range jobs {
		if j.close != nil {
			closes = append(closes, j)
		} else {
			rest = append(rest, j)
		}
	}
	if len(closes) == 0 {
		return jobs
	}
	purpose := db.PurposeSweep // a give-up of sweeps alone answers no client: they run again
	if slices.ContainsFunc(closes, func(j *job) bool { return !j.sweep }) {
		purpose = db.PurposeDecision
	}
	err := e.db.Serializable(db.WithPurpose(ctx, purpose), func(tx *gorm.DB) error {
		for _, j := range closes { // this attempt's only: an earlier one rolled back
			j.overage, j.extras = nil, nil
		}
		// Before the first statement: a hold's snapshots read limit_definitions.
		if err := e.decisionSettings(tx, e.fastCommit); err != nil {
			return err
		}
		running, now := closes, int64(0)
		if anyIdempotent(closes) { // stored answers replay; new ones are written before commit
			var err error
			if now, err = e.nowIn(tx); err != nil {
				return err
			}
			if running, err = idemReadGorm(tx, closes, now); err != nil {
				return err
			}
		}
		for _, j := range running {
			j.err = j.close(tx, j)
			if j.err != nil && apperr.From(j.err).Status() >= 500 {
				return j.err
			}
		}
		if anyIdempotent(closes) {
			return e.beforeCommitGorm(tx, closes, now)
		}
		return nil
	})
	for _, j := range closes {
		if err != nil {
			j.err = err
		} else if j.err == nil {
			e.reportOverage(j.overage)
			for _, x := range j.extras { // each a decision of its own, admitted or refused
				e.finish(x.tenantID, &x.out, true)
			}
		}
		close(j.done)
	}
	return rest
}

// overage is an amount a settle charged beyond what its limit could take (settleInTx).
type overage struct {
	tenantID int64
	name     string
	amount   float64
}

func (e *Engine) reportOverage(list []overage) {
	if e.onOverage == nil {
		return
	}
	for _, o := range list {
		e.onOverage(o.tenantID, o.name, o.amount)
	}
}

func finiteAmount(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 }

// The statements on holds (portable SQL).
const (
	sqlInsertHold      = "INSERT INTO holds (tenant_id, id, state, created_at, expires_at) VALUES (?, ?, 'open', ?, ?)"
	sqlInsertHoldLimit = "INSERT INTO hold_limits (tenant_id, hold_id, idx, name, key, count, attributes, charges) VALUES "
	sqlSelectHold      = "SELECT state, expires_at FROM holds WHERE tenant_id = ? AND id = ?"
	sqlSelectHoldLimit = "SELECT name, key, count, attributes, charges FROM hold_limits WHERE tenant_id = ? AND hold_id = ? ORDER BY idx"
	sqlCloseHold       = "UPDATE holds SET state = ?, closed_at = ?, settled = ? WHERE tenant_id = ? AND id = ? AND state = 'open'"
	sqlDueHolds        = "SELECT tenant_id, id FROM holds WHERE state = 'open' AND expires_at <= ? ORDER BY expires_at LIMIT ?"
	sqlOldHolds        = "SELECT tenant_id, id FROM holds WHERE state <> 'open' AND closed_at <= ? LIMIT ?"
	sqlDeleteHold      = "DELETE FROM holds WHERE tenant_id = ? AND id = ?"
	sqlDeleteHoldLimit = "DELETE FROM hold_limits WHERE tenant_id = ? AND hold_id = ?"
	// Numbering holds' takes on one limit and key (sqlNextSeq, several rows at once
	// with ", (?, ?, ?, 1, ?)" repeated, then sqlNextSeqEnd), and the numbers untouched for longer
	// than any hold may need them.
	sqlNextSeq    = "INSERT INTO hold_key_seqs (tenant_id, name, key, seq, updated_at) VALUES (?, ?, ?, 1, ?)"
	sqlNextSeqEnd = " ON CONFLICT (tenant_id, name, key) DO UPDATE SET seq = hold_key_seqs.seq + 1, updated_at = excluded.updated_at"
	// A numbering is deleted with its key's log, which may be a day younger than its last take
	// (a restarted numbering must not meet the old one's give-backs); both statements pick the
	// same keys in one transaction (oldest first, the key breaking ties: the order of the index
	// hold_key_seqs_updated, so that neither reads more than its batch).
	sqlPruneSeqsLog = `DELETE FROM hold_give_backs WHERE (tenant_id, name, key) IN
		(SELECT tenant_id, name, key FROM hold_key_seqs WHERE updated_at < ? ORDER BY updated_at, tenant_id, name, key LIMIT ?)`
	sqlPruneSeqs = `DELETE FROM hold_key_seqs WHERE (tenant_id, name, key) IN
		(SELECT tenant_id, name, key FROM hold_key_seqs WHERE updated_at < ? ORDER BY updated_at, tenant_id, name, key LIMIT ?)`
	// A hold's snapshot, per limit and key it charged, of the limit's numbers tag and of the
	// number of its take (sqlSnapshotHold, then "(?, ?)" per limit and key joined by ", ", then
	// sqlSnapshotHoldEnd), in the hold's own transaction after sqlNextSeq; read back at its close
	// beside the current tag and what holds taken before it gave back after it; deleted with it.
	sqlSnapshotHold = `INSERT INTO hold_snapshots (tenant_id, hold_id, name, key, numbers_version, seq)
		SELECT d.tenant_id, ?, d.name, q.key, d.numbers_version, q.seq
		FROM (VALUES `
	sqlSnapshotHoldEnd = `) k
		JOIN limit_definitions d ON d.tenant_id = ? AND d.name = k.column1
		JOIN hold_key_seqs q ON q.tenant_id = d.tenant_id AND q.name = d.name AND q.key = k.column2`
	// sqlHoldSnapshots reads a hold's snapshots beside the current tags and numbers, each with
	// every give-back logged since its take by a hold taken before it (one row per give-back and
	// shard, or one with none).
	sqlHoldSnapshots = `SELECT s.name, s.key, s.seq, s.numbers_version AS version,
			d.numbers_version AS version_now, q.seq AS seq_now, g.shard, g.amount
		FROM hold_snapshots s
		LEFT JOIN limit_definitions d ON d.tenant_id = s.tenant_id AND d.name = s.name
		LEFT JOIN hold_key_seqs q ON q.tenant_id = s.tenant_id AND q.name = s.name AND q.key = s.key
		LEFT JOIN hold_give_backs g ON g.tenant_id = s.tenant_id AND g.name = s.name AND g.key = s.key
			AND g.seq >= s.seq AND g.giver_seq < s.seq
		WHERE s.tenant_id = ? AND s.hold_id = ?`
	sqlDeleteHoldSnapshots = "DELETE FROM hold_snapshots WHERE tenant_id = ? AND hold_id = ?"
	// A give-back to one shard logged under the number of the last take on its limit and key (a
	// hold taken after it has a larger one, one taken before it at most that), and the log's old
	// entries. Holds made before numbers were kept all give as 0: their amounts add up.
	sqlLogGiveBack = `INSERT INTO hold_give_backs (tenant_id, name, key, seq, shard, giver_seq, amount, at)
		SELECT tenant_id, name, key, seq, ?, ?, ?, ? FROM hold_key_seqs WHERE tenant_id = ? AND name = ? AND key = ?
		ON CONFLICT (tenant_id, name, key, seq, giver_seq, shard) DO UPDATE SET amount = hold_give_backs.amount + excluded.amount`
	sqlPruneGiveBacks = `DELETE FROM hold_give_backs WHERE (tenant_id, name, key, seq, giver_seq, shard) IN
		(SELECT tenant_id, name, key, seq, giver_seq, shard FROM hold_give_backs WHERE at < ? LIMIT ?)`
	// The open holds' charges that may name a limit (LIKE: '_' in a name matches any character,
	// so voidCharges checks each one it finds), and one hold limit's charges rewritten.
	sqlChargesNaming = `SELECT l.hold_id, l.idx, l.charges FROM hold_limits l
		JOIN holds h ON h.tenant_id = l.tenant_id AND h.id = l.hold_id
		WHERE l.tenant_id = ? AND h.state = 'open' AND l.charges LIKE ?`
	sqlSetCharges = "UPDATE hold_limits SET charges = ? WHERE tenant_id = ? AND hold_id = ? AND idx = ?"
	sqlHoldStats  = `SELECT COUNT(DISTINCT h.id) AS n, MIN(h.created_at) AS oldest,
		COUNT(DISTINCT CASE WHEN h.expires_at <= ? THEN h.id END) AS soon, COALESCE(SUM(l.count), 0) AS held
		FROM holds h JOIN hold_limits l ON l.tenant_id = h.tenant_id AND l.hold_id = h.id
		WHERE h.tenant_id = ? AND l.name = ? AND h.state = 'open' AND h.expires_at > ?`
	// Open and not yet expired: an expired hold holds nothing (a close is refused, and the
	// sweeper releases it), whether or not the sweeper has come by.
	sqlOpenHolds = `SELECT h.id, l.key, l.count, h.created_at, h.expires_at
		FROM holds h JOIN hold_limits l ON l.tenant_id = h.tenant_id AND l.hold_id = h.id
		WHERE h.tenant_id = ? AND l.name = ? AND h.state = 'open' AND h.expires_at > ? ORDER BY h.created_at, h.id LIMIT ?`
	// The open holds' rows of the other limits that charged a limit as their ancestor (a hold on
	// "user" reserves from its parent "org" too): hold_snapshots names every limit a hold charged,
	// and only open holds have snapshots, so this reads open holds only. direct is 1 for a hold
	// that also holds the limit itself, which sqlHoldStats counted already.
	sqlOpenHoldsOfChildren = `SELECT h.id, h.created_at, h.expires_at, l.count, l.charges,
		CASE WHEN EXISTS (SELECT 1 FROM hold_limits d WHERE d.tenant_id = h.tenant_id AND d.hold_id = h.id AND d.name = ?) THEN 1 ELSE 0 END AS direct
		FROM holds h JOIN hold_limits l ON l.tenant_id = h.tenant_id AND l.hold_id = h.id
		WHERE h.tenant_id = ? AND h.state = 'open' AND h.expires_at > ? AND l.name <> ?
		AND EXISTS (SELECT 1 FROM hold_snapshots s WHERE s.tenant_id = h.tenant_id AND s.hold_id = h.id AND s.name = ?)
		ORDER BY h.id` // a hold's rows one after the other, so that counting holds needs only the last id
)

func holdInserts(tenantID int64, id string, limits []HoldLimit, took [][]charge, now, expiresAt int64) []stmt {
	ss := []stmt{{sqlInsertHold, []any{tenantID, id, now, expiresAt}}}
	var b strings.Builder
	b.WriteString(sqlInsertHoldLimit)
	args := make([]any, 0, 8*len(limits))
	for i, l := range limits {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?)")
		attrs := ""
		if len(l.Attributes) > 0 {
			a, _ := json.Marshal(l.Attributes) // strings only: cannot fail
			attrs = string(a)
		}
		c, _ := json.Marshal(took[i]) // strings and finite numbers: cannot fail
		args = append(args, tenantID, id, i, l.Name, l.Key, l.Count, attrs, string(c))
	}
	ss = append(ss, stmt{b.String(), args})
	// Number this take on each limit and key charged, and keep the snapshot of them, as this
	// transaction decided with them.
	var pairs [][2]string
	for _, cs := range took {
		for _, c := range cs {
			if k := [2]string{c.Name, c.Key}; c.Took != nil && !slices.Contains(pairs, k) {
				pairs = append(pairs, k)
			}
		}
	}
	if len(pairs) == 0 {
		return ss
	}
	return append(ss, nextSeqs(tenantID, pairs, now), snapshotHold(tenantID, id, pairs))
}

// nextSeqs numbers, at now, the next take of each limit and key in pairs.
func nextSeqs(tenantID int64, pairs [][2]string, now int64) stmt {
	sql := sqlNextSeq + strings.Repeat(", (?, ?, ?, 1, ?)", len(pairs)-1) + sqlNextSeqEnd
	args := make([]any, 0, 4*len(pairs))
	for _, p := range pairs {
		args = append(args, tenantID, p[0], p[1], now)
	}
	return stmt{sql, args}
}

// snapshotHold is the statement that keeps hold id's snapshot of each limit and key in pairs.
func snapshotHold(tenantID int64, id string, pairs [][2]string) stmt {
	args := make([]any, 0, 2+2*len(pairs))
	args = append(args, id)
	for _, p := range pairs {
		args = append(args, p[0], p[1])
	}
	values := strings.Repeat(", (?, ?)", len(pairs))[2:]
	return stmt{sqlSnapshotHold + values + sqlSnapshotHoldEnd, append(args, tenantID)}
}

// holdSnapshot is what changed for one limit and key since a hold took from it.
type holdSnapshot struct {
	seq int64 // the number of the hold's take on it (hold_key_seqs)
	// numbersChanged: the limit's numbers changed (its tag differs, or it is gone): a key's
	// history under other numbers says nothing of what the hold's amount would have become, even
	// when they were changed back.
	numbersChanged bool
	// givenSince is what holds taken before this one gave back to each shard of the key after
	// this one's take. Those alone can have raised a shard above what it held just after the
	// hold: a hold taken after it took first what it gives back. lost: no longer known.
	givenSince map[int]float64
	lost       bool
}

// since is what older holds gave back since to each of t's shards, for algo.Taken.GiveBack.
func (s holdSnapshot) since(t *algo.Taken) []float64 {
	out := make([]float64, len(t.Shards))
	for k, sh := range t.Shards {
		out[k] = s.givenSince[sh.Shard]
		if s.lost {
			out[k] = math.Inf(1)
		}
	}
	return out
}

// holdSnapshots reads, for each limit and key hold id charged, what changed since (in tx). A
// hold made before snapshots were kept has none.
func holdSnapshots(tx *gorm.DB, tenantID int64, id string) (map[[2]string]holdSnapshot, error) {
	var rows []struct {
		Name, Key  string
		Seq        int64
		Version    int64
		VersionNow *int64
		SeqNow     *int64
		Shard      *int
		Amount     *float64
	}
	if err := tx.Raw(sqlHoldSnapshots, tenantID, id).Scan(&rows).Error; err != nil {
		return nil, err
	}
	out := make(map[[2]string]holdSnapshot, len(rows))
	for _, r := range rows {
		k := [2]string{r.Name, r.Key}
		s, ok := out[k]
		if !ok {
			s = holdSnapshot{seq: r.Seq, givenSince: map[int]float64{},
				numbersChanged: r.VersionNow == nil || *r.VersionNow != r.Version,
				lost:           r.SeqNow == nil || *r.SeqNow < r.Seq} // the numbering was deleted (untouched for long) since
			out[k] = s
		}
		if r.Shard != nil && r.Amount != nil {
			s.givenSince[*r.Shard] += *r.Amount
		}
	}
	return out, nil
}

// charge is what a hold took from one limit and key: the limit it holds, or one of that limit's
// ancestors. Closing the hold gives back to exactly these, each at most what of its amount still
// counts (algo.Taken.GiveBack), to the shards it took from: not to parents added since, and
// nothing where a decision wrote nothing (an allow override, a shadow limit's would-be refusal).
type charge struct {
	Name string      `json:"name"`
	Key  string      `json:"key"`
	Took *algo.Taken `json:"took,omitempty"` // nil: the decision wrote nothing
}

// charges lists, for each of a hold's decisions, the charges it made: the limit's own first,
// then its ancestors'.
func charges(results []Decision) [][]charge {
	out := make([][]charge, len(results))
	for i := range results {
		for _, d := range append([]Decision{results[i]}, results[i].Parents...) {
			out[i] = append(out[i], charge{Name: d.Name, Key: d.Key, Took: d.taken})
		}
	}
	return out
}

// voidCharges forgets, in tx, what open holds took from limit name (one key of it, or every key
// with key nil): its state is being reset or dropped, and from then on the key's history says
// nothing of what the hold's amount would have become, so closing those holds gives nothing back
// to it (the rest of each hold is unchanged). A change of the limit's numbers is not voided here
// (a definition or override write would then read every open hold of the tenant, and conflict
// with the holds being made): it replaces the limit's numbers tag, which the close compares with
// the hold's copy (holdSnapshots), and the close compares the numbers themselves too
// (algo.Taken.GiveBack), which sees an override that expired meanwhile.
func voidCharges(tx *gorm.DB, tenantID int64, name string, key *string) error {
	return voidChargesOf(tx, tenantID, name, func(k string) bool { return key == nil || k == *key })
}

// chargeRow is a hold's limit whose charges may name a limit (chargesNaming).
type chargeRow struct {
	HoldID  string
	Idx     int
	Charges string
}

// chargesNaming reads the hold limits of the tenant whose charges may name limit name.
func chargesNaming(tx *gorm.DB, tenantID int64, name string) ([]chargeRow, error) {
	var rows []chargeRow
	quoted, _ := json.Marshal(name) // a string: cannot fail
	err := tx.Raw(sqlChargesNaming, tenantID, `%"name":`+string(quoted)+`%`).Scan(&rows).Error
	return rows, err
}

// chargedKeys is the set of name's keys that open holds took from.
func chargedKeys(tx *gorm.DB, tenantID int64, name string) (map[string]bool, error) {
	rows, err := chargesNaming(tx, tenantID, name)
	if err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	for _, r := range rows {
		var cs []charge
		if json.Unmarshal([]byte(r.Charges), &cs) != nil {
			continue
		}
		for _, c := range cs {
			if c.Name == name && c.Took != nil {
				keys[c.Key] = true
			}
		}
	}
	return keys, nil
}

// voidChargesOf is voidCharges of the keys of name that of reports.
func voidChargesOf(tx *gorm.DB, tenantID int64, name string, of func(key string) bool) error {
	rows, err := chargesNaming(tx, tenantID, name)
	if err != nil {
		return err
	}
	for _, r := range rows {
		var cs []charge
		if json.Unmarshal([]byte(r.Charges), &cs) != nil {
			continue
		}
		changed := false
		for i, c := range cs {
			if c.Name == name && of(c.Key) && c.Took != nil {
				cs[i].Took, changed = nil, true
			}
		}
		if !changed {
			continue
		}
		b, _ := json.Marshal(cs) // strings and finite numbers: cannot fail
		if err := tx.Exec(sqlSetCharges, string(b), tenantID, r.HoldID, r.Idx).Error; err != nil {
			return err
		}
	}
	return nil
}

type holdLimitRow struct {
	Name, Key  string
	Count      float64
	Attributes string
	Charges    string // JSON []charge; "" for holds made before they were recorded
}

// charges reads what the hold took; ok is false for a hold made before that was recorded.
func (r holdLimitRow) charges() (cs []charge, ok bool) {
	if r.Charges == "" {
		return nil, false
	}
	if err := json.Unmarshal([]byte(r.Charges), &cs); err != nil || len(cs) == 0 {
		return nil, false // written by holdInserts; unreadable reads as not recorded
	}
	return cs, true
}

func (r holdLimitRow) attributes() map[string]string {
	if r.Attributes == "" {
		return nil
	}
	var m map[string]string
	_ = json.Unmarshal([]byte(r.Attributes), &m) // written by holdInserts; unreadable reads as none
	return m
}

// SettleHold charges a hold's actual amounts (counts, in the hold's order) exactly once.
func (e *Engine) SettleHold(ctx context.Context, tenantID int64, id string, counts []float64) (Settlement, error) {
	for i, c := range counts {
		if !finiteAmount(c) || c > MaxAmount {
			return Settlement{}, holdProblem(fmt.Sprintf("counts[%d]", i), fmt.Sprintf("must be a finite number >= 0 and <= %g", float64(MaxAmount)))
		}
	}
	var out Settlement
	err := e.closeHolds(ctx, tenantID, id, func(held []holdLimitRow) error {
		if len(counts) != len(held) {
			return holdProblem("counts", fmt.Sprintf("must give one actual count per limit of the hold (%d)", len(held)))
		}
		return nil
	}, counts, &out)
	if err != nil {
		return Settlement{}, fmt.Errorf("limiter: settle hold: %w", err)
	}
	return out, nil
}

// ReleaseHold gives everything a hold reserved back.
func (e *Engine) ReleaseHold(ctx context.Context, tenantID int64, id string) error {
	if err := e.closeHolds(ctx, tenantID, id, nil, nil, nil); err != nil {
		return fmt.Errorf("limiter: release hold: %w", err)
	}
	return nil
}

// closeHolds settles (counts set) or releases one open hold in a serializable transaction.
func (e *Engine) closeHolds(ctx context.Context, tenantID int64, id string, check func([]holdLimitRow) error, counts []float64, out *Settlement) error {
	if !validHandle(id, "hold_") {
		return ErrHoldNotFound
	}
	return e.closeJob(ctx, tenantID, func(tx *gorm.DB, j *job) error {
		now, err := e.nowIn(tx)
		if err != nil {
			return err
		}
		var hs []struct {
			State     string
			ExpiresAt int64
		}
		if err := tx.Raw(sqlSelectHold, tenantID, id).Scan(&hs).Error; err != nil {
			return err
		}
		if len(hs) == 0 {
			return ErrHoldNotFound
		}
		if hs[0].State != HoldOpen || hs[0].ExpiresAt <= now { // expired: the sweeper releases it
			return ErrHoldClosed
		}
		var held []holdLimitRow
		if err := tx.Raw(sqlSelectHoldLimit, tenantID, id).Scan(&held).Error; err != nil {
			return err
		}
		if check != nil {
			if err := check(held); err != nil {
				return err
			}
		}
		state := HoldReleased
		actual := make([]float64, len(held))
		if counts != nil {
			state = HoldSettled
			copy(actual, counts)
		}
		s, err := e.settleInTx(tx, j, tenantID, id, now, held, actual)
		if err != nil {
			return err
		}
		if out != nil {
			*out = s
		}
		return closeHold(tx, tenantID, id, state, now, s)
	}, func() any {
		if out != nil {
			return *out
		}
		return nil
	})
}

func closeHold(tx *gorm.DB, tenantID int64, id, state string, now int64, s Settlement) error {
	rec, _ := json.Marshal(map[string][]float64{"charged": s.Charged, "overage": s.Overage}) // numbers only
	res := tx.Exec(sqlCloseHold, state, now, string(rec), tenantID, id)
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected != 1 { // read open in this very transaction: only a damaged database gets here
		return fmt.Errorf("limiter: close hold %s: %d rows changed", id, res.RowsAffected)
	}
	return nil
}

// settleInTx charges actual[i] for each held limit of hold holdID in tx, a transaction of
// close's, at now: the difference from what is held is given back (less) or taken (more, or
// recorded as overage on closing when the limit cannot take it, for runCloses to report once the
// transaction commits). What it gives back is logged (hold_give_backs) for the other holds' closes.
func (e *Engine) settleInTx(tx *gorm.DB, closing *job, tenantID int64, holdID string, now int64, held []holdLimitRow, actual []float64) (Settlement, error) {
	n := len(held)
	s := Settlement{Names: make([]string, n), Keys: make([]string, n), Held: make([]float64, n), Charged: make([]float64, n), Overage: make([]float64, n), Refunded: make([]float64, n)}
	of := map[*job]int{}
	own := map[*job]bool{} // the give-backs to a held limit itself (not to an ancestor)
	// Every give-back goes before any extra is taken, whatever the limits' order: what one limit
	// of the hold gives back can make room for another's extra on the same key or parent.
	var giveBacks, takes []*job
	var snaps map[[2]string]holdSnapshot // read at the first give-back
	for i, h := range held {
		s.Names[i], s.Keys[i], s.Held[i], s.Charged[i] = h.Name, h.Key, h.Count, actual[i]
		diff := actual[i] - h.Count
		if diff == 0 {
			continue
		}
		add := func(req Request, isOwn bool) {
			j := &job{tenantID: tenantID, reqs: []Request{req}, consume: true, picks: make([][]int, 1)}
			if req.Refund {
				giveBacks = append(giveBacks, j)
			} else {
				takes = append(takes, j)
			}
			of[j], own[j] = i, isOwn
		}
		if cs, ok := h.charges(); ok && diff < 0 {
			if snaps == nil {
				var err error
				if snaps, err = holdSnapshots(tx, tenantID, holdID); err != nil {
					return Settlement{}, err
				}
			}
			for k, c := range cs {
				snap, ok := snaps[[2]string{c.Name, c.Key}]
				if c.Took == nil || len(c.Took.Shards) == 0 || snap.numbersChanged {
					continue
				}
				if !ok || now-c.Took.At >= giveBacksKept {
					// Made before snapshots were kept (migration 00020), or so long ago that the
					// log may have been pruned: what older holds gave back since is not known.
					snap.lost = true
				}
				add(Request{Name: c.Name, Key: c.Key, Count: -diff, Refund: true, hold: true, giveBack: c.Took, givenSince: snap.since(c.Took)}, k == 0)
			}
			continue
		}
		add(Request{Name: h.Name, Key: h.Key, Count: math.Abs(diff), Attributes: h.attributes(), Refund: diff < 0, hold: true}, true)
	}
	jobs := append(giveBacks, takes...)
	if len(jobs) > 0 {
		if err := e.groupGorm(tx, jobs); err != nil {
			return Settlement{}, err
		}
	}
	given := map[[2]string]map[int]float64{} // per limit, key and shard, logged below
	for _, j := range jobs {
		i := of[j]
		req := j.reqs[0]
		switch {
		case req.Refund && j.err == nil:
			if own[j] {
				s.Refunded[i] = j.out.Results[0].Refunded
			}
			pk := [2]string{req.Name, req.Key}
			if given[pk] == nil {
				given[pk] = map[int]float64{}
			}
			for k, g := range j.out.Results[0].givenShards {
				given[pk][req.giveBack.Shards[k].Shard] += g
			}
			if req.giveBack == nil {
				// A hold made before charges were recorded gives back to every shard its way:
				// logged as the whole amount to each, the most it may have given one.
				for _, shard := range j.picks[0] {
					given[pk][shard] += j.out.Results[0].Refunded
				}
			}
		case req.Refund:
			// The limit went (or changed kind) since the hold: there is nothing to give back to.
		case j.err != nil || !j.out.OK:
			s.Overage[i], s.Charged[i] = req.Count, s.Held[i]
			closing.overage = append(closing.overage, overage{tenantID, req.Name, req.Count})
		}
		if !req.Refund && j.err == nil {
			closing.extras = append(closing.extras, j)
		}
	}
	for k, shards := range given {
		giver := snaps[k].seq // 0 for a hold made before numbers were kept: before every other
		for shard, g := range shards {
			if g <= 0 {
				continue
			}
			if err := tx.Exec(sqlLogGiveBack, shard, giver, g, now, tenantID, k[0], k[1]).Error; err != nil {
				return Settlement{}, err
			}
		}
	}
	return s, nil
}

// SweepHolds releases up to batch open holds whose expiry has passed by the engine's clock, in
// one serializable transaction, marking them expired, and deletes up to batch holds closed more
// than ClosedHoldRetention ago, and up to batch of the give-backs and numberings older than
// giveBacksKept. It returns how many it released, and whether any of these found a full batch
// (more may be due: call it again).
func (e *Engine) SweepHolds(ctx context.Context, batch int) (released int, more bool, err error) {
	if batch <= 0 {
		batch = DefaultSweepBatch
	}
	var n int
	err = e.closeJob(db.WithPurpose(ctx, db.PurposeSweep), SystemTenant, func(tx *gorm.DB, j *job) error { // every tenant's
		n, more = 0, false
		now, err := e.nowIn(tx)
		if err != nil {
			return err
		}
		var due []struct {
			TenantID int64
			ID       string
		}
		if err := tx.Raw(sqlDueHolds, now, batch).Scan(&due).Error; err != nil {
			return err
		}
		for _, h := range due {
			var held []holdLimitRow
			if err := tx.Raw(sqlSelectHoldLimit, h.TenantID, h.ID).Scan(&held).Error; err != nil {
				return err
			}
			s, err := e.settleInTx(tx, j, h.TenantID, h.ID, now, held, make([]float64, len(held)))
			if err != nil {
				return err
			}
			if err := closeHold(tx, h.TenantID, h.ID, HoldExpired, now, s); err != nil {
				return err
			}
			n++
		}
		var old []struct {
			TenantID int64
			ID       string
		}
		if err := tx.Raw(sqlOldHolds, now-ClosedHoldRetention, batch).Scan(&old).Error; err != nil {
			return err
		}
		more = len(old) >= batch
		for _, prune := range []string{sqlPruneGiveBacks, sqlPruneSeqsLog, sqlPruneSeqs} {
			res := tx.Exec(prune, now-giveBacksKept, batch)
			if res.Error != nil {
				return res.Error
			}
			more = more || (prune != sqlPruneSeqsLog && res.RowsAffected >= int64(batch))
		}
		for _, h := range old {
			if err := tx.Exec(sqlDeleteHoldLimit, h.TenantID, h.ID).Error; err != nil {
				return err
			}
			if err := tx.Exec(sqlDeleteHoldSnapshots, h.TenantID, h.ID).Error; err != nil {
				return err
			}
			if err := tx.Exec(sqlDeleteHold, h.TenantID, h.ID).Error; err != nil {
				return err
			}
		}
		return nil
	}, nil) // a sweep has no answer to store
	if err != nil {
		return 0, false, fmt.Errorf("limiter: sweep holds: %w", err)
	}
	return n, more || n >= batch, nil
}

// HoldLimitNames returns the names of the limits a hold of the tenant reserves amounts of, each
// once, in the hold's order and then their ancestors' (which the hold reserved from too),
// whatever its state (until SweepHolds deletes it). A hold's limits never change after it is
// made, so the answer stays true for its release. ErrHoldNotFound when the tenant has no such
// hold.
func (e *Engine) HoldLimitNames(ctx context.Context, tenantID int64, id string) ([]string, error) {
	if !validHandle(id, "hold_") {
		return nil, ErrHoldNotFound
	}
	var held []holdLimitRow
	err := e.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		return tx.Raw(sqlSelectHoldLimit, tenantID, id).Scan(&held).Error
	})
	if err != nil {
		return nil, fmt.Errorf("limiter: hold limits: %w", err)
	}
	if len(held) == 0 {
		return nil, ErrHoldNotFound
	}
	var names []string
	for _, h := range held {
		if !slices.Contains(names, h.Name) {
			names = append(names, h.Name)
		}
	}
	for _, h := range held { // then the ancestors it reserved from, which its release gives back to
		cs, _ := h.charges()
		for _, c := range cs {
			if !slices.Contains(names, c.Name) {
				names = append(names, c.Name)
			}
		}
	}
	return names, nil
}

// HoldStats summarises the open holds on a limit: how many, the oldest's creation (ms since the
// epoch, 0 when none), how many expire within the given time, and the amount they hold.
type HoldStats struct {
	Open, ExpiringSoon int64
	Oldest             int64
	Held               float64
	More               bool // OpenHolds listed only some of the entries (a hold can have several)
}

// OpenHold is one open hold's amount on a limit, for the dashboard.
type OpenHold struct {
	ID, Key              string
	Count                float64
	CreatedAt, ExpiresAt int64
}

// OpenHolds summarises the open holds on a limit that have not expired (the engine's clock) and
// lists up to n, oldest first: the holds of the limit itself and those of the limits it is an
// ancestor of, which reserve from it too (one entry for each of their limits that charged it).
func (e *Engine) OpenHolds(ctx context.Context, tenantID int64, name string, soonMs int64, n int) (HoldStats, []OpenHold, error) {
	var stats HoldStats
	var out []OpenHold
	err := e.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		now, err := e.nowIn(tx)
		if err != nil {
			return err
		}
		var s struct {
			N      int64
			Oldest *int64
			Soon   int64
			Held   float64
		}
		if err := tx.Raw(sqlHoldStats, now+soonMs, tenantID, name, now).Scan(&s).Error; err != nil {
			return err
		}
		stats = HoldStats{Open: s.N, ExpiringSoon: s.Soon, Held: s.Held}
		if s.Oldest != nil {
			stats.Oldest = *s.Oldest
		}
		if err := tx.Raw(sqlOpenHolds, tenantID, name, now, n+1).Scan(&out).Error; err != nil {
			return err
		}
		// The children's rows are read one at a time and only the n+1 oldest entries are kept,
		// so a limit with a great many open holds below it costs the read's time, not its size
		// in memory.
		rows, err := tx.Raw(sqlOpenHoldsOfChildren, name, tenantID, now, name, name).Rows()
		if err != nil {
			return err
		}
		defer rows.Close()
		last := "" // the hold counted last: its rows come together (ORDER BY h.id)
		for rows.Next() {
			var h struct {
				ID                   string
				CreatedAt, ExpiresAt int64
				Count                float64
				Charges              string
				Direct               int
			}
			if err := tx.ScanRows(rows, &h); err != nil {
				return err
			}
			cs, _ := holdLimitRow{Count: h.Count, Charges: h.Charges}.charges()
			for _, c := range cs[min(1, len(cs)):] { // its ancestors', after the limit's own
				if c.Name != name {
					continue
				}
				stats.Held += h.Count
				out = append(out, OpenHold{ID: h.ID, Key: c.Key, Count: h.Count, CreatedAt: h.CreatedAt, ExpiresAt: h.ExpiresAt})
				if len(out) > 2*(n+1) {
					out = oldestHolds(out, n+1)
				}
				if h.Direct == 1 || last == h.ID {
					continue
				}
				last = h.ID
				stats.Open++
				if stats.Oldest == 0 || h.CreatedAt < stats.Oldest {
					stats.Oldest = h.CreatedAt
				}
				if h.ExpiresAt <= now+soonMs {
					stats.ExpiringSoon++
				}
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		stats.More = len(out) > n
		out = oldestHolds(out, n)
		return nil
	})
	if err != nil {
		return HoldStats{}, nil, fmt.Errorf("limiter: open holds: %w", err)
	}
	return stats, out, nil
}

// oldestHolds sorts hs oldest first (by creation, then id) and keeps the first n.
func oldestHolds(hs []OpenHold, n int) []OpenHold {
	slices.SortStableFunc(hs, func(a, b OpenHold) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return hs[:min(len(hs), n)]
}
