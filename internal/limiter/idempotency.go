package limiter

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
)

// Idempotent decisions. A job may carry an Idempotency record (the client's Idempotency-Key,
// the hash of its canonical request, and a function that renders the final answer from the
// decision). Inside the group's transaction, before anything is decided, the records of the
// group's keys are read (with the definitions and rows on PostgreSQL: no extra round trip): a job
// whose key holds the same request replays the stored answer and decides nothing; a job whose key
// holds another request is refused with ErrIdempotencyKeyReused. After the decisions and before
// the commit (beforeCommit) each deciding job's answer is rendered, final (jitter included), and
// written with the state it consumed: a crash after the commit loses neither, so a retry replays.
//
// Concurrency: two jobs of one group with the same key decide once (the later ones replay the
// first's answer, or get ErrIdempotencyKeyReused for another request). Two first attempts in
// different groups (or instances) both read no record and both write one: the database refuses
// the second (a serialization failure or a unique violation, both retried), and its retry reads
// the record and replays. So a retry that arrives while the first attempt is being decided waits
// for it and gets its answer (or, past the retry budget, 503 unavailable like any decision).
//
// Only decisions are stored: a job that fails (an unknown limit, a count over the capacity) or a
// group that fails stores nothing, and its retry decides again (nothing was consumed).
//
// The SQL is this file's (both dialects); requests without a key send none of it.

// IdempotencyTTL is how long a stored answer is replayed, by the engine's clock; the sweeper
// deletes it after that (SweepIdempotency).
const IdempotencyTTL = 24 * time.Hour

// ErrIdempotencyKeyReused refuses a request whose Idempotency-Key was used, within
// IdempotencyTTL, with another request.
var ErrIdempotencyKeyReused = apperr.New(apperr.IdempotencyKeyReused,
	"this Idempotency-Key was used with a different request in the last 24 hours; send a new key with a new request")

// Answer is an HTTP answer as stored for replay: status, headers and body.
type Answer struct {
	Status int
	Header map[string]string
	Body   []byte
}

// Idempotency makes one job idempotent.
type Idempotency struct {
	Key  string // the client's Idempotency-Key
	Part int    // which part of one request (the items of a bulk request); 0 otherwise
	Hash []byte // the hash of the canonical request (route, tenant, body)
	// Render renders the final answer to the request from its decision. It runs inside the
	// group's transaction, on the goroutine deciding the group: it must only compute.
	Render func(BatchDecision) Answer
	// RenderCall, for a hold or a close made idempotent through its context (WithIdempotency),
	// renders the answer from the call's result instead: a HoldResult (Hold), a Settlement
	// (SettleHold), the lease's new expiry as an int64 (ExtendLease) or nil (ReleaseHold,
	// ReleaseLease). It runs inside the call's transaction and must only compute.
	RenderCall func(result any) Answer
	// Result is set by a call made idempotent through its context once it returns without error:
	// the answer to write (rendered now, or stored by an earlier attempt and replayed).
	Result IdempotentResult
}

type idempotencyCtxKey struct{}

// WithIdempotency returns ctx carrying idem for Hold, SettleHold, ReleaseHold, ReleaseLease and
// ExtendLease, whose answers are stored and replayed like a decision's (idem.RenderCall renders
// them; idem.Result is what to write). A replayed call does nothing and returns a zero result.
func WithIdempotency(ctx context.Context, idem *Idempotency) context.Context {
	return context.WithValue(ctx, idempotencyCtxKey{}, idem)
}

func idempotencyOf(ctx context.Context) *Idempotency {
	idem, _ := ctx.Value(idempotencyCtxKey{}).(*Idempotency)
	return idem
}

// callIdempotency is idempotencyOf(ctx) made to render result() (read when the answer is
// rendered, in the call's transaction), or nil without a record.
func callIdempotency(ctx context.Context, result func() any) *Idempotency {
	idem := idempotencyOf(ctx)
	if idem == nil {
		return nil
	}
	idem.Render = func(BatchDecision) Answer { return idem.RenderCall(result()) }
	return idem
}

// reportIdempotent tells an idempotent call's caller what to answer.
func reportIdempotent(j *job) {
	if j.idem != nil && j.err == nil {
		j.idem.Result = IdempotentResult{Answer: j.answer, Replayed: j.replayed}
	}
}

// IdempotentResult is what an idempotent job answers: the answer, and whether it was replayed
// (stored by an earlier attempt; nothing was decided now).
type IdempotentResult struct {
	Answer   Answer
	Replayed bool
}

// idemKey identifies one stored answer.
type idemKey struct {
	tenantID int64
	key      string
	part     int
}

// idemRecord is one stored answer as read.
type idemRecord struct {
	hash      []byte
	answer    Answer
	expiresAt int64
}

// idemWrite is one answer to store.
type idemWrite struct {
	k         idemKey
	hash      []byte
	answer    Answer
	headers   string
	expiresAt int64
}

// LimitIdempotent is Batch (consuming) with an idempotency record: the answer idem.Render gave
// to the first attempt, stored in the deciding transaction, or that stored answer replayed.
func (e *Engine) LimitIdempotent(ctx context.Context, tenantID int64, reqs []Request, idem *Idempotency) (IdempotentResult, error) {
	if len(reqs) == 0 {
		return IdempotentResult{}, invalidRequest("limits", "must name at least one limit")
	}
	for i := range reqs {
		if err := validateRequest(&reqs[i]); err != nil {
			return IdempotentResult{}, err
		}
	}
	j := &job{tenantID: tenantID, reqs: reqs, consume: true, picks: make([][]int, len(reqs)), done: make(chan struct{}), idem: idem}
	if err := e.submit(ctx, j); err != nil {
		return IdempotentResult{}, fmt.Errorf("limiter: decide: %w", err)
	}
	if j.err != nil {
		return IdempotentResult{}, j.err
	}
	return IdempotentResult{Answer: j.answer, Replayed: j.replayed}, nil
}

// EachIdempotent is EachWith (consuming) with an idempotency record per request (idems[i] for
// reqs[i]): each outcome's Answer is the one its record's Render gave the first attempt, and
// Replayed says whether it was stored by an earlier attempt.
func (e *Engine) EachIdempotent(ctx context.Context, tenantID int64, reqs []Request, with *Request, idems []*Idempotency) []Outcome {
	return e.each(ctx, tenantID, reqs, with, true, idems)
}

// ClaimIdempotencyKey claims key for the request hashed to hash, whose parts (the items of a
// bulk request) are decided each in its own job: it fails with ErrIdempotencyKeyReused when key
// holds, unexpired, an answer to another request (any part), and otherwise stores the claim (part
// claimPart). Every idempotent job reads the claim with its own part and is refused under another
// request's, so no request is decided under a key a bulk request holds even where that request
// stored no answer of its own part (an invalid item), and of two requests claiming one key at once
// the serializable transactions let one through.
func (e *Engine) ClaimIdempotencyKey(ctx context.Context, tenantID int64, key string, hash []byte) error {
	err := e.db.Serializable(db.WithPurpose(ctx, db.PurposeDecision), func(tx *gorm.DB) error {
		if err := e.decisionSettings(tx, false); err != nil {
			return err
		}
		now, err := e.nowIn(tx)
		if err != nil {
			return err
		}
		var n int64
		if err := tx.Raw(sqlIdemOther, tenantID, key, hash, now).Scan(&n).Error; err != nil {
			return err
		}
		if n > 0 {
			return ErrIdempotencyKeyReused
		}
		return tx.Exec(sqlIdemClaim, tenantID, key, claimPart, hash, 0, "{}", []byte{}, now+IdempotencyTTL.Milliseconds(), now).Error
	})
	if err != nil {
		return fmt.Errorf("limiter: claim idempotency key: %w", err)
	}
	return nil
}

// claimPart is the part of a key that ClaimIdempotencyKey stores: no answer, only whose key it is.
const claimPart = -1

// idemKeys lists the keys of the group's idempotent jobs; none in the common case.
func idemKeys(jobs []*job) []idemKey {
	var out []idemKey
	seen := map[idemKey]bool{}
	for _, j := range jobs {
		if j.idem == nil {
			continue
		}
		// Its own part, and the key's claim (ClaimIdempotencyKey).
		for _, k := range []idemKey{{j.tenantID, j.idem.Key, j.idem.Part}, {j.tenantID, j.idem.Key, claimPart}} {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

// idemBefore runs first in each attempt of a group: it resets the jobs' idempotency outcomes,
// answers the jobs whose key holds an unexpired answer (a replay, or ErrIdempotencyKeyReused),
// and returns the jobs left to decide. A job with the same key as an earlier job of the group is
// not decided either: beforeCommit gives it that job's outcome.
func idemBefore(jobs []*job, records map[idemKey]idemRecord, now int64) []*job {
	if len(records) == 0 && !anyIdempotent(jobs) {
		return jobs
	}
	active := make([]*job, 0, len(jobs))
	first := map[idemKey]*job{}
	for _, j := range jobs {
		j.answer, j.replayed, j.twinOf = Answer{}, false, nil
		if j.idem == nil {
			active = append(active, j)
			continue
		}
		j.err = nil
		k := idemKey{j.tenantID, j.idem.Key, j.idem.Part}
		if rec, ok := records[k]; ok && rec.expiresAt > now {
			if bytes.Equal(rec.hash, j.idem.Hash) {
				j.answer, j.replayed = rec.answer, true
			} else {
				j.err = ErrIdempotencyKeyReused
			}
			continue
		}
		if rec, ok := records[idemKey{j.tenantID, j.idem.Key, claimPart}]; ok && rec.expiresAt > now && !bytes.Equal(rec.hash, j.idem.Hash) {
			j.err = ErrIdempotencyKeyReused // claimed by another (bulk) request
			continue
		}
		if f, ok := first[k]; ok {
			j.twinOf = f
			continue
		}
		first[k] = j
		active = append(active, j)
	}
	return active
}

func anyIdempotent(jobs []*job) bool {
	for _, j := range jobs {
		if j.idem != nil {
			return true
		}
	}
	return false
}

// beforeCommit is the group's in-transaction work after every job is decided and before the
// commit, on both dialects: each decided job's answer is made final (settle), an idempotent
// job's answer rendered, and the answers to store returned (written by beforeCommitGorm or
// beforeCommitPg in the same transaction).
func (e *Engine) beforeCommit(jobs []*job, now int64) []idemWrite {
	if e.afterDecide != nil {
		e.afterDecide()
	}
	var writes []idemWrite
	for _, j := range jobs {
		if j.err != nil || j.replayed || j.twinOf != nil {
			continue
		}
		e.settle(&j.out)
		if j.idem == nil || (!j.consume && j.close == nil) {
			continue
		}
		j.answer = j.idem.Render(j.out)
		headers, _ := json.Marshal(j.answer.Header) // a map of strings always encodes
		writes = append(writes, idemWrite{k: idemKey{j.tenantID, j.idem.Key, j.idem.Part}, hash: j.idem.Hash,
			answer: j.answer, headers: string(headers), expiresAt: now + IdempotencyTTL.Milliseconds()})
	}
	for _, j := range jobs {
		f := j.twinOf
		switch {
		case f == nil:
		case !bytes.Equal(f.idem.Hash, j.idem.Hash):
			j.err = ErrIdempotencyKeyReused
		case f.err != nil:
			j.err = f.err // decided together: the same outcome, nothing stored for either
		default:
			j.answer, j.replayed = f.answer, true
		}
	}
	return writes
}

// The statements on idempotency_keys, each once per dialect (GORM's ? for SQLite and the
// portable path, pgx's $n for PostgreSQL's hot path).
const (
	idemColumns  = "tenant_id, key, part, request_hash, status, headers, body, expires_at"
	idemUpsert   = " ON CONFLICT (tenant_id, key, part) DO UPDATE SET request_hash = excluded.request_hash, status = excluded.status, headers = excluded.headers, body = excluded.body, expires_at = excluded.expires_at"
	sqlIdemRead  = "SELECT " + idemColumns + " FROM idempotency_keys WHERE "
	sqlIdemWrite = "INSERT INTO idempotency_keys (" + idemColumns + ") VALUES "
	// sqlIdemSweep deletes up to ? expired answers (by the primary key, so that both dialects
	// delete a bounded batch).
	sqlIdemSweep = `DELETE FROM idempotency_keys WHERE (tenant_id, key, part) IN
		(SELECT tenant_id, key, part FROM idempotency_keys WHERE expires_at <= ? LIMIT ?)`
	// sqlIdemClaim stores a bulk request's claim. A retry of that request leaves an unexpired
	// claim as it is: the key expires 24 hours after its first decision, not after its last retry.
	sqlIdemClaim = sqlIdemWrite + "(?,?,?,?,?,?,?,?)" + idemUpsert + " WHERE idempotency_keys.expires_at <= ?"
	// sqlIdemStored reads a key's unexpired stored answers, not a bulk request's claim (part -1).
	sqlIdemStored = sqlIdemRead + "tenant_id = ? AND key = ? AND part >= 0 AND expires_at > ?"
	sqlIdemOther  = "SELECT COUNT(*) FROM idempotency_keys WHERE tenant_id = ? AND key = ? AND request_hash <> ? AND expires_at > ?"
	pgIdemRead    = "SELECT " + idemColumns + `
		FROM unnest($1::bigint[], $2::text[], $3::int[]) AS u(tenant_id, key, part)
		JOIN idempotency_keys USING (tenant_id, key, part)`
	pgIdemWrite = "INSERT INTO idempotency_keys (" + idemColumns + `)
		SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[], $4::bytea[], $5::int[], $6::text[], $7::bytea[], $8::bigint[])` + idemUpsert
)

// idemRow is one idempotency_keys row as scanned.
type idemRow struct {
	TenantID    int64
	Key         string
	Part        int
	RequestHash []byte
	Status      int
	Headers     string
	Body        []byte
	ExpiresAt   int64
}

func (r *idemRow) fields() []any {
	return []any{&r.TenantID, &r.Key, &r.Part, &r.RequestHash, &r.Status, &r.Headers, &r.Body, &r.ExpiresAt}
}

func (r idemRow) record() (idemKey, idemRecord, error) {
	var h map[string]string
	if err := json.Unmarshal([]byte(r.Headers), &h); err != nil {
		return idemKey{}, idemRecord{}, fmt.Errorf("limiter: stored answer's headers: %w", err)
	}
	return idemKey{r.TenantID, r.Key, r.Part}, idemRecord{hash: r.RequestHash, answer: Answer{Status: r.Status, Header: h, Body: r.Body}, expiresAt: r.ExpiresAt}, nil
}

// idemReadGorm reads the stored answers of the group's idempotent jobs and returns the jobs left
// to decide (idemBefore). Without idempotent jobs it sends nothing.
func idemReadGorm(tx *gorm.DB, jobs []*job, now int64) ([]*job, error) {
	keys := idemKeys(jobs)
	if len(keys) == 0 {
		return jobs, nil
	}
	args := make([]any, 0, 3*len(keys))
	for _, k := range keys {
		args = append(args, k.tenantID, k.key, k.part)
	}
	var rows []idemRow
	if err := tx.Raw(sqlIdemRead+matchAll("tenant_id = ? AND key = ? AND part = ?", len(keys)), args...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("limiter: read idempotency keys: %w", err)
	}
	records := make(map[idemKey]idemRecord, len(rows))
	for _, r := range rows {
		k, rec, err := r.record()
		if err != nil {
			return nil, err
		}
		records[k] = rec
	}
	return idemBefore(jobs, records, now), nil
}

// beforeCommitGorm is beforeCommit on the GORM path: the answers are written in tx.
func (e *Engine) beforeCommitGorm(tx *gorm.DB, jobs []*job, now int64) error {
	writes := e.beforeCommit(jobs, now)
	if len(writes) == 0 {
		return nil
	}
	var sb strings.Builder
	sb.WriteString(sqlIdemWrite)
	args := make([]any, 0, 8*len(writes))
	for i, w := range writes {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString("(?,?,?,?,?,?,?,?)")
		args = append(args, w.k.tenantID, w.k.key, w.k.part, w.hash, w.answer.Status, w.headers, w.answer.Body, w.expiresAt)
	}
	sb.WriteString(idemUpsert)
	if err := tx.Exec(sb.String(), args...).Error; err != nil {
		return fmt.Errorf("limiter: store idempotent answers: %w", err)
	}
	return nil
}

// queueIdemRead queues the read of the group's stored answers in the first round trip (only when
// the group has idempotent jobs); readIdemPg reads its result.
func queueIdemRead(b *pgx.Batch, keys []idemKey) {
	t, k, p := make([]int64, len(keys)), make([]string, len(keys)), make([]int32, len(keys))
	for i, x := range keys {
		t[i], k[i], p[i] = x.tenantID, x.key, int32(x.part)
	}
	b.Queue(pgIdemRead, t, k, p)
}

func readIdemPg(br pgx.BatchResults) (map[idemKey]idemRecord, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[idemKey]idemRecord{}
	for rows.Next() {
		var r idemRow
		if err := rows.Scan(r.fields()...); err != nil {
			return nil, err
		}
		k, rec, err := r.record()
		if err != nil {
			return nil, err
		}
		out[k] = rec
	}
	return out, rows.Err()
}

// beforeCommitPg is beforeCommit on PostgreSQL's hot path: the answers join the second round
// trip, before its COMMIT.
func (e *Engine) beforeCommitPg(b *pgx.Batch, jobs []*job, now int64) {
	writes := e.beforeCommit(jobs, now)
	if len(writes) == 0 {
		return
	}
	n := len(writes)
	t, k, p, h, st, hd, body, exp := make([]int64, n), make([]string, n), make([]int32, n), make([][]byte, n), make([]int32, n), make([]string, n), make([][]byte, n), make([]int64, n)
	for i, w := range writes {
		t[i], k[i], p[i], h[i], st[i], hd[i], body[i], exp[i] = w.k.tenantID, w.k.key, int32(w.k.part), w.hash, int32(w.answer.Status), w.headers, w.answer.Body, w.expiresAt
	}
	b.Queue(pgIdemWrite, t, k, p, h, st, hd, body, exp)
}

// SweepIdempotency deletes the stored answers that expired (IdempotencyTTL after their
// decision, by the engine's clock), in batches of at most batch, and returns how many it deleted.
func (e *Engine) SweepIdempotency(ctx context.Context, batch int) (int, error) {
	ctx = db.WithPurpose(ctx, db.PurposeSweep)
	if batch <= 0 {
		batch = DefaultSweepBatch
	}
	batch = min(batch, maxSweepBatch)
	total := 0
	for {
		n := 0
		err := e.db.Serializable(ctx, func(tx *gorm.DB) error {
			now, err := e.nowIn(tx)
			if err != nil {
				return err
			}
			res := tx.Exec(sqlIdemSweep, now, batch)
			n = int(res.RowsAffected)
			return res.Error
		})
		if err != nil {
			return total, fmt.Errorf("limiter: sweep idempotency keys: %w", err)
		}
		total += n
		if n < batch || ctx.Err() != nil {
			return total, nil
		}
	}
}

// StoredAnswers returns the unexpired answers stored for tenantID's Idempotency-Key key under
// the request hashed to hash, by part (0, or a bulk request's items); none when the key holds
// another request. A caller about to refuse a request before deciding it (by a check of
// something that may have changed since the first attempt: the plan's burst, an anonymous
// session's authorization) asks it first, so that a retry is replayed as the contract says.
func (e *Engine) StoredAnswers(ctx context.Context, tenantID int64, key string, hash []byte) (map[int]Answer, error) {
	var rows []idemRow
	err := e.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		now, err := e.nowIn(tx)
		if err != nil {
			return err
		}
		return tx.Raw(sqlIdemStored, tenantID, key, now).Scan(&rows).Error
	})
	if err != nil {
		return nil, err
	}
	out := map[int]Answer{}
	for _, r := range rows {
		if !bytes.Equal(r.RequestHash, hash) {
			continue
		}
		_, rec, err := r.record()
		if err != nil {
			return nil, err
		}
		out[r.Part] = rec.answer
	}
	return out, nil
}
