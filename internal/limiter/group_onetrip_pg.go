package limiter

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// The one-trip path: a group whose every job is one plain request on a single-shard token
// bucket (the common case) is decided in one round trip on PostgreSQL, by the server-side
// function sluice_take_tokens (migrations 00015 and 00016; its body since 00024), pipelined with pgx:
//
//	BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT set_config(...);
//	SELECT ... FROM sluice_take_tokens(...); COMMIT
//
// (the settings, pgSettingsFor: a lock timeout, and an asynchronous commit under
// SLUICE_COMMIT=fast). The function reads the definitions, the rows and the database's clock,
// applies the token bucket's math in float8, writes, and returns what it saw, all inside the one
// serializable transaction; the group is retried on serialization failure like any other. The
// engine then replays the group in Go (plan and decideGroup, as on the two-trip path) from the
// states the function returned and the definitions it found (returned only where the engine's hint
// is not that very version), and builds the answers from that: the function only saves the round
// trip that carried the Go math's writes. If the function's admissions or writes ever differ from
// the Go math's, the group fails closed (503): nothing is answered as admitted that the Go math
// did not admit, and the group's limits lose their hints, so that the next groups on them read
// their definitions the general way.
//
// Which groups take it is chosen from the hints (the definitions last read); the function checks
// the stored definitions again and, when one no longer fits, writes nothing and returns no rows,
// and the group is decided the general way in a new transaction.

// minOneTripRate is the smallest rate the function decides: PostgreSQL raises an error where a
// float8 product or quotient underflows to zero (Go rounds it to 0), and above this rate the
// refill elapsed * rate / period is at least a normal float64 for every period validation allows.
const minOneTripRate = 1e-290

// errOneTripDiffers fails a group whose server-side decisions differ from the Go math's.
var errOneTripDiffers = errors.New("the database's token bucket decisions differ from the engine's")

// oneTripCase reports whether every job of the group is one plain request (no inline config,
// refund, hold, idempotency key or system limit) whose limit was, when last read, a
// single-shard token bucket without parents, penalty or overrides, with a valid count and a rate
// of at least minOneTripRate; and if so, those hints, which the function is told of (p_known).
func (e *Engine) oneTripCase(jobs []*job) (map[defKey]hint, bool) {
	held := make(map[defKey]hint, 1)
	for _, j := range jobs {
		if len(j.reqs) != 1 || j.idem != nil || j.step != nil {
			return nil, false
		}
		req := j.reqs[0]
		if req.System || req.Config != nil || req.Refund || req.hold {
			return nil, false
		}
		k := defKey{j.tenantID, req.Name}
		h, ok := held[k]
		if !ok {
			if h, ok = e.hints.lookup(k); !ok {
				return nil, false
			}
			held[k] = h
		}
		def := h.def
		if h.overridesVersion != 0 || def.Kind.Algorithm() != TokenBucket || def.Shards != 1 || def.Rate < minOneTripRate ||
			len(def.Parents) > 0 || def.Penalty != 0 || def.CheckCount(req.Count, req.Reserve) != nil {
			return nil, false
		}
	}
	return held, true
}

// takeRow is one row of sluice_take_tokens: one request's outcome.
type takeRow struct {
	ord               int // the request's place in the group, from 1
	now               int64
	ok, existed       bool
	preValue          *float64
	preTS, prePenalty *int64
	postValue         *float64
	postTS            *int64
	defVersion        *int64         // the definition's version, with def
	def               *definitionRow // the limit's definition; nil when the caller holds it (p_known)
}

// groupOneTrip decides the group in one round trip, telling the function which definitions
// held (oneTripCase) it need not return. decided is false when the function found a definition
// that does not fit (it wrote nothing; the caller decides the general way).
func (e *Engine) groupOneTrip(ctx context.Context, conn *pgx.Conn, jobs []*job, held map[defKey]hint) (decided bool, err error) {
	n := len(jobs)
	var frozen *int64 // tests freeze the engine's clock; production reads the database's
	if e.testNow != nil {
		ms := e.testNow().UnixMilli()
		frozen = &ms
	}
	b := &pgx.Batch{}
	b.Queue(pgBegin)
	b.Queue(pgSettingsFor(e.fastCommit))
	if n == 1 {
		j, r := jobs[0], jobs[0].reqs[0]
		b.Queue(e.takeOne, frozen, j.tenantID, r.Name, r.Key, r.Count, r.Reserve, j.consume, held[defKey{j.tenantID, r.Name}].version)
	} else {
		tenants, names, keys := make([]int64, n), make([]string, n), make([]string, n)
		counts, reserves, consumes := make([]float64, n), make([]bool, n), make([]bool, n)
		known := make([]int64, n)
		for i, j := range jobs {
			r := j.reqs[0]
			tenants[i], names[i], keys[i] = j.tenantID, r.Name, r.Key
			counts[i], reserves[i], consumes[i] = r.Count, r.Reserve, j.consume
			known[i] = held[defKey{j.tenantID, r.Name}].version
		}
		b.Queue(pgTakeTokens, frozen, tenants, names, keys, counts, reserves, consumes, known)
	}
	b.Queue(pgCommit)
	e.sent(b.Len())
	br := conn.SendBatch(ctx, b)
	var rows []takeRow
	for range b.Len() - 2 { // BEGIN and the settings
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if err == nil {
		rows, err = readTakeRows(br, n)
	}
	if err == nil {
		_, err = br.Exec() // COMMIT
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, err
	}
	if len(rows) == 0 {
		return false, nil
	}
	byRequest := make([]takeRow, n) // the function returns them in the order it decided them
	for _, r := range rows {
		if r.ord < 1 || r.ord > n || byRequest[r.ord-1].ord != 0 || len(rows) != n {
			return false, fmt.Errorf("limiter: one-trip group: %w: %d outcomes for %d requests", ErrUnavailable, len(rows), n)
		}
		byRequest[r.ord-1] = r
	}
	return true, e.replayOneTrip(jobs, byRequest, held)
}

// replayOneTrip decides the group in Go from the states the function saw, exactly as the
// two-trip path would have, and checks that the function admitted and wrote the same. Each
// limit's definition is the one the function returned or, where it returned none, the one held.
func (e *Engine) replayOneTrip(jobs []*job, rows []takeRow, held map[defKey]hint) error {
	now := rows[0].now
	defs := make(map[defKey]Definition, len(held))
	for k, h := range held {
		defs[k] = h.def
	}
	read := map[defKey]hint{}
	for _, r := range rows {
		if r.def != nil && r.defVersion != nil {
			d := r.def.toDomain().Definition
			k := defKey{r.def.TenantID, r.def.Name}
			defs[k], read[k] = d, hint{def: d, overridesVersion: r.def.OverridesVersion, version: *r.defVersion}
		}
	}
	if len(read) > 0 {
		e.definitionsRead.Add(int64(len(read)))
		e.hints.setRead(read) // the function decided only limits without overrides, all found
	}
	stored := make(map[rowKey]fullStateRow, len(jobs))
	written := map[rowKey]algo.State{} // the function's writes, the last per row
	for i, j := range jobs {
		rk := rowKey{j.tenantID, j.reqs[0].Name, j.reqs[0].Key, 0}
		r := rows[i]
		if _, seen := stored[rk]; !seen { // the row as the group found it
			st := fullStateRow{TenantID: rk.tenantID, Name: rk.name, Key: rk.key, exists: r.existed}
			if r.existed {
				st.Value, st.TS, st.PenaltyUntil = *r.preValue, *r.preTS, *r.prePenalty
			}
			stored[rk] = st
		}
		if r.ok && j.consume {
			written[rk] = algo.State{Value: *r.postValue, TS: *r.postTS, Exists: true}
		}
	}
	e.plan(jobs, defs, nil, now)
	overlay := decideGroup(jobs, stored, now)
	same := len(overlay) == len(written)
	for rk, w := range overlay {
		got, ok := written[rk]
		same = same && ok && math.Float64bits(got.Value) == math.Float64bits(w.Value) && got.TS == w.TS &&
			w.PenaltyUntil == 0 && w.Counters == nil
	}
	for i, j := range jobs {
		same = same && rows[i].ok == admitted(j)
	}
	if !same {
		// Whatever the cause, the next groups on these limits read their definitions afresh.
		e.hints.set(definitionKeys(jobs), nil, nil)
		return fmt.Errorf("limiter: one-trip group: %w: %w", ErrUnavailable, errOneTripDiffers)
	}
	// The answers made final (jitter, the batch's retryAfter); with no idempotent job there is
	// nothing of them to store, so this may follow the commit.
	e.beforeCommit(jobs, now)
	return nil
}

// admitted is whether the Go math admitted a one-request job, shadow mode aside (a shadow
// limit's would-be refusal writes nothing, as an enforced one's).
func admitted(j *job) bool {
	if j.err != nil {
		return false
	}
	d := j.out.Results[0]
	if d.Shadow != nil {
		return d.Shadow.OK
	}
	return d.OK
}

// readTakeRows reads the function's rows, n of them when it decided. A row whose definition is
// NULL (the caller holds it, or an earlier row of the group carried it) skips its columns.
func readTakeRows(br pgx.BatchResults, n int) ([]takeRow, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]takeRow, 0, n)
	var dest []any
	for rows.Next() {
		var r takeRow
		dest = append(dest[:0], &r.ord, &r.now, &r.ok, &r.existed, &r.preValue, &r.preTS, &r.prePenalty, &r.postValue, &r.postTS, &r.defVersion)
		defAt := len(dest)
		if raw := rows.RawValues(); len(raw) > defAt && raw[defAt] != nil { // (def).tenant_id is NOT NULL in a definition
			r.def = &definitionRow{}
			dest = append(dest, r.def.fields()...)
		} else {
			dest = append(dest, skipDefinition...)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// skipDefinition scans none of a row's definition columns: pgx skips a nil destination.
var skipDefinition = make([]any, len((&definitionRow{}).fields()))
