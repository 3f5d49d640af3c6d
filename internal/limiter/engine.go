package limiter

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// Engine decides limits inside serializable transactions. Several engines (in one process or
// many) may share a database: the transaction, not the engine, is what keeps limits strict.
type Engine struct {
	db         *db.DB
	testNow    func() time.Time // Options.Now: replaces every clock when set
	fastCommit bool             // Options.FastCommit
	clock      func() time.Time // this process's clock (Options.Clock)
	intN       func(n int) int
	onDecision func(tenantID int64, name string, ok bool)
	onShadow   func(tenantID int64, name string)
	onOverage  func(tenantID int64, name string, amount float64)
	quotas     Quotas // Options.Quotas; nil: no plan bounds the counts
	onKey      func(tenantID int64, o KeyOutcome)

	lanes    []*lane       // decisions waiting for a group (group.go)
	laneSeed maphash.Seed  // places jobs in lanes
	maxGroup int           // most decisions in one group transaction
	started  atomic.Bool   // Run has been called
	stopping atomic.Bool   // Run's context has ended: nobody starts another group
	stopped  chan struct{} // closed when Run has refused what was queued
	// workers are the lanes' workers, with any that gave its turn away and still runs its group;
	// givenAway the groups that gave their lane's turn away and are still running (group.go).
	workers, givenAway sync.WaitGroup
	// partSlots bounds the parts of spent groups in flight at once, the engine's together
	// (runParts): each attempt of a part holds a pooled connection.
	partSlots chan struct{}
	hints     shardHints
	// overrides holds each limit's overrides under their version (overrides.go).
	overrides overrideCache
	// betweenDefinitionAndOverrides, set by tests only, runs in the sweeper's definitionCache.get
	// between its read of a definition and its read of the overrides.
	betweenDefinitionAndOverrides func()
	groups                        atomic.Int64 // group transactions committed or failed
	jobs                          atomic.Int64 // decisions (Batch calls) they carried
	// trips and statements count what the groups sent PostgreSQL: round trips, and statements
	// in them (every attempt's; SQLite's groups count none).
	trips, statements atomic.Int64
	definitionsRead   atomic.Int64 // definitions the one-trip function returned
	// groupNanos sums the time the lanes' transactions took (GroupStats.Busy).
	groupNanos atomic.Int64

	afterIdempotentCommit func() // Options.AfterIdempotentCommit (test-only)
	afterDecide           func() // test-only (export_test.go): runs first in beforeCommit
	afterStateBatch       func() // test-only (export_test.go): runs after each batch of dropStateInBatches commits
	takeOne               string // pgTakeOne; tests replace it (export_test.go)
}

// Options tune an Engine; the zero value is production-ready.
type Options struct {
	// Now, when set, is the time of every decision, value and sweep on every dialect: tests move
	// it. Unset (production), PostgreSQL's decisions read the database's clock inside their own
	// transaction, in the same round trip as the state, so that instances whose clocks disagree
	// still agree on time; SQLite's (one process) read Clock.
	Now func() time.Time
	// Clock is this process's clock: SQLite's decision time and the time stamps of definitions;
	// time.Now when nil. Tests skew it to show that PostgreSQL's decisions do not read it.
	Clock func() time.Time
	IntN  func(n int) int // randomness for shard choice and jitter; must be goroutine-safe
	// OnDecision is told of every consumed decision of every limit: ok is whether it was
	// admitted (in a batch, whether the batch was; of a batch refused as a whole, only the
	// limits that refused are told, the tenant's plan included). A shadow limit's would-be refusal in an
	// admitted decision goes to OnShadowRefused instead, so that allowed, refused and
	// shadow-refused count each decision once.
	OnDecision      func(tenantID int64, name string, ok bool)
	OnShadowRefused func(tenantID int64, name string)
	// OnHoldOverage is told of every amount a settled hold charged beyond what it held and the
	// limit could not take (holds.go), once, after the settle's transaction has committed: an
	// attempt that was retried or rolled back is not told.
	OnHoldOverage func(tenantID int64, name string, amount float64)
	// OnKeyOutcome is told of the same decisions as OnDecision and OnShadowRefused together,
	// with the key and what it has left, for the analytics' top keys. It runs on the goroutine
	// that decides the group (a lane's worker, or a caller's), so it must be cheap and must not block.
	OnKeyOutcome func(tenantID int64, o KeyOutcome)
	// MaxGroup bounds the decisions of one group transaction; default 64.
	MaxGroup int
	// Lanes is how many group transactions may be in flight at once (group.go): default
	// DefaultLanes on PostgreSQL, always 1 on SQLite (one writer).
	Lanes int
	// FastCommit (SLUICE_COMMIT=fast) commits decision transactions on PostgreSQL without
	// waiting for their WAL to reach the disk: a database crash may lose the decisions
	// acknowledged in the last moments (the WAL writer's delay) and admit them again. Every
	// other write (definitions, keys, users, audit) stays durable. No effect on SQLite.
	FastCommit bool
	// AfterIdempotentCommit is test-only (SLUICE_TEST_HALT_AFTER_IDEMPOTENT_COMMIT): when set,
	// the goroutine deciding the group calls it after a group that stored idempotent answers commits and before it
	// answers any of them, so that a test can kill the process in between.
	AfterIdempotentCommit func()
	// Quotas, when set, bounds how many limits and overrides each tenant may hold (its plan).
	Quotas Quotas
}

// Quotas is what the engine needs of tenants' plans (package tenants implements it).
type Quotas interface {
	// MaxCount is the most of quota ("limits", "overrides") the tenant may hold; 0 is no limit.
	MaxCount(ctx context.Context, tenantID int64, quota string) (int64, error)
	// QuotaUsed is told, inside the transaction that created one more, how many the tenant now
	// holds of quota, whose max is max (it may queue a "near its quota" event there).
	QuotaUsed(tx *gorm.DB, tenantID int64, quota string, used, max int64) error
}

// NewEngine returns an engine on d. It starts nothing: decisions are made while Run runs.
func NewEngine(d *db.DB, opts Options) *Engine {
	e := &Engine{db: d, testNow: opts.Now, clock: opts.Clock, fastCommit: opts.FastCommit, intN: opts.IntN, onDecision: opts.OnDecision, onShadow: opts.OnShadowRefused, onOverage: opts.OnHoldOverage, onKey: opts.OnKeyOutcome, quotas: opts.Quotas, stopped: make(chan struct{}), partSlots: make(chan struct{}, maxParallelParts),
		afterIdempotentCommit: opts.AfterIdempotentCommit}
	if e.clock == nil {
		e.clock = time.Now
	}
	if e.intN == nil {
		e.intN = rand.IntN
	}
	maxGroup := opts.MaxGroup
	if maxGroup <= 0 {
		maxGroup = 64
	}
	lanes := opts.Lanes
	switch {
	case d.Dialect != db.Postgres:
		lanes = 1
	case lanes <= 0:
		lanes = DefaultLanes
	}
	e.maxGroup, e.laneSeed, e.takeOne = maxGroup, maphash.MakeSeed(), pgTakeOne
	for range lanes {
		e.lanes = append(e.lanes, &lane{queue: make(chan *job, 4*maxGroup), token: make(chan struct{}, 1), wake: make(chan struct{}, 1)})
	}
	return e
}

// DefaultLanes is how many group transactions an engine on PostgreSQL has in flight at once
// unless Options.Lanes says otherwise: on 2 cores shared with PostgreSQL, two lanes' half-size
// groups cost more per decision than they gained by overlapping (docs/performance.md).
const DefaultLanes = 1

// Request asks for one limit.
type Request struct {
	Name    string
	Key     string // "" is the limit's single global key
	Count   float64
	Reserve bool
	Config  *Definition // inline definition, used only when name has no stored definition
	// Attributes fill the {placeholders} of the keys of the limit's parents (nested budgets).
	Attributes map[string]string
	// Refund gives Count back instead of taking it (Engine.Refund): never above the maximum,
	// always decided OK.
	Refund bool
	hold   bool // part of a hold (Engine.Hold): amounts only, no concurrency limit
	// giveBack is, on a hold's give-back (Refund and hold set), what the hold took from this very
	// limit and key: at most what of it still counts is given back (algo.Taken.GiveBack), to
	// this limit alone; the hold recorded its ancestors' takings as give-backs of their own.
	giveBack *algo.Taken
	// givenSince is what older holds gave back to each shard of giveBack since it was taken
	// (+Inf when no longer known; nil: nothing): see algo.Taken.GiveBack.
	givenSince []float64
	// Field is where the request sits in the caller's body ("limits[1]."), put before the
	// fields of its problems so that the client can tell which item one is about; "" for a body
	// that is the request itself.
	Field string
	// System decides this request in the system tenant's key space (SystemTenant) with its inline
	// Config, whatever tenant the batch is for. It lets a limit Sluice keeps on a tenant (its
	// plan's decision rate) ride in the tenant's own batch, all or nothing with it, at no extra
	// round trip. Only the server sets it; a System request needs a Config and no Refund.
	System bool
}

// SystemTenant is the tenant ID of the limits Sluice keeps on its own behalf (login attempts,
// captcha challenges, plans' decision rates); no real tenant has it.
const SystemTenant int64 = 0

// Decision is the outcome of one limit.
type Decision struct {
	Name       string
	Key        string
	OK         bool
	RetryAfter *int64 // ms, rounded up; nil when there is nothing to wait for
	Remaining  float64
	// Refunded is, for a refund, what was given back (at most the count asked).
	Refunded float64
	refund   bool // a refund, which counts as no decision in the metrics
	// givenShards is, on a hold's give-back, what each shard it took from got back (in the
	// order of Request.giveBack's shards).
	givenShards []float64
	Definition  Definition // the definition that decided: the stored one with the override's numbers
	// Override is the match of the override that applied ("org:acme:*"), "" when none did.
	Override string
	denied   bool // refused by a deny override: its retryAfter is exact, never jittered
	// refused is whether this limit itself refused its part, where OK is the whole family's
	// (familyOutcome): in a batch refused as a whole, only the limits that refused are reported.
	refused bool
	// retryFrom is, when the family's RetryAfter is an ancestor's (familyOutcome), how that one
	// jitters: the ancestor's own jitter, or none when a deny refused it.
	retryFrom *retrySource
	// ownRetryAfter is, on a limit with ancestors, this limit's own RetryAfter, where RetryAfter
	// is the family's (familyOutcome): its RateLimit header entry describes the limit itself.
	ownRetryAfter *int64
	// Window is the calendar window a quota's decision counted in; nil for the other kinds.
	Window *QuotaWindow
	// Parents are the decisions on the limit's ancestors (nested budgets), breadth first: the
	// parents, then theirs. OK and RetryAfter above are the whole family's: the request passed
	// only if the limit and every ancestor allowed it.
	Parents []Decision
	system  bool // decided for the system tenant (Request.System)
	// Shadow is what enforcement would have answered, for a limit in shadow mode (nil
	// otherwise): OK and RetryAfter are then always true and nil, whatever Shadow says.
	Shadow *ShadowOutcome
	// LeaseID and LeaseExpiresAt (ms since the epoch) are, for an admitted decision on a
	// concurrency limit, the lease it acquired (leases.go); "" and 0 otherwise.
	LeaseID        string
	LeaseExpiresAt int64
	leaseSlot      bool // a concurrency slot was taken: a lease is handed out if the job's writes are kept
	// fullIn is, when fullSet, how long (ms) until the shards the decision used are whole again:
	// RateLimit's t where it is not the token bucket's arithmetic on Remaining (headers.go).
	fullIn  float64
	fullSet bool
	// usedMax is, for a sharded limit, the most the shards the decision used hold (Remaining is
	// theirs); 0 for an unsharded one, whose Definition.Max() it is.
	usedMax float64
	// taken is, for a hold's request or ancestor, what the decision took (nil: nothing written),
	// which the hold records to give back no more than that (holds.go).
	taken *algo.Taken
}

// ShadowOutcome is the decision a shadow-mode limit would have made if it were enforced.
type ShadowOutcome struct {
	OK         bool
	RetryAfter *int64 // ms: when a refused caller should retry, or reserved work run
}

// KeyOutcome is one consumed decision of one limit and key, as Options.OnKeyOutcome hears it.
type KeyOutcome struct {
	Name, Key string
	OK        bool // admitted (in a batch, whether the batch was: a refused one reports its refusing limits only)
	// ShadowRefused: admitted only because the limit is in shadow mode.
	ShadowRefused bool
	// Remaining is what the key has left after the decision; Max the most it holds (the
	// definition's capacity, or rate; on a sharded limit, that of the one or two shards the
	// decision used, whose balance Remaining is), so that Remaining/Max says how near the key is
	// to its limit.
	Remaining, Max float64
}

// QuotaWindow is a quota's calendar window [Start, End) and the time of the decision, in ms
// since the epoch.
type QuotaWindow struct {
	Start, End, Now int64
}

// RefusedBy names the limit of a refused decision's family whose refusal it answers: its own,
// unless an ancestor's wait is the family's RetryAfter (the longest, familyOutcome) or only
// ancestors refused. A 429 names it, so that a client is told which budget to wait for.
func (d Decision) RefusedBy() string {
	if d.OK || (d.refused && d.retryFrom == nil) {
		return d.Name
	}
	by := ""
	var wait *int64
	for _, p := range d.Parents {
		if p.OK {
			continue
		}
		if by == "" || (p.RetryAfter != nil && (wait == nil || *p.RetryAfter > *wait)) {
			by, wait = p.Name, p.RetryAfter
		}
	}
	if by == "" {
		return d.Name
	}
	return by
}

// WithParents lists decisions followed by their ancestors', each with its own outcome (where a
// decision with ancestors answers the family's), for the RateLimit headers: a limit whole
// under a parent that refused reports itself whole, not the parent's wait.
func WithParents(ds []Decision) []Decision {
	n := len(ds)
	for _, d := range ds {
		n += len(d.Parents)
	}
	if n == len(ds) {
		return ds
	}
	out := make([]Decision, 0, n)
	for _, d := range ds {
		if len(d.Parents) > 0 {
			d.OK, d.RetryAfter = !d.refused, d.ownRetryAfter
		}
		out = append(out, d)
		out = append(out, d.Parents...)
	}
	return out
}

// BatchDecision is the all-or-nothing outcome of several limits.
type BatchDecision struct {
	OK         bool
	RetryAfter *int64 // the largest retryAfter among refusals (or among reservations when all pass)
	Results    []Decision
}

// wallClock is the process's time, for time stamps that decide nothing (a definition's
// created_at): the test clock when set, else Clock.
func (e *Engine) wallClock() time.Time {
	if e.testNow != nil {
		return e.testNow()
	}
	return e.clock()
}

// nowIn is the time of a decision, value or sweep made in tx: the test clock when set, the
// database's on PostgreSQL, the process's on SQLite.
func (e *Engine) nowIn(tx *gorm.DB) (int64, error) {
	if e.testNow != nil {
		return e.testNow().UnixMilli(), nil
	}
	return e.db.TimeIn(tx, e.clock)
}

// Limit consumes count tokens of one limit if it allows them.
func (e *Engine) Limit(ctx context.Context, tenantID int64, req Request) (Decision, error) {
	b, err := e.Batch(ctx, tenantID, []Request{req}, true)
	if err != nil {
		return Decision{}, err
	}
	return b.Results[0], nil
}

// Refund gives count tokens back to one key of a stored limit, and to the same key of each of its
// ancestors (nested budgets), in one group transaction like a decision: a token bucket, a fixed
// window or a quota gains them up to its maximum; a sliding window takes them off the counts of
// its current window, never below zero. It never creates more than a limit's maximum; a key whose
// override allows or denies it (nothing counted) is left as it is. Decision.Refunded says what was
// given back.
func (e *Engine) Refund(ctx context.Context, tenantID int64, req Request) (Decision, error) {
	req.Refund = true
	b, err := e.Batch(ctx, tenantID, []Request{req}, true)
	if err != nil {
		return Decision{}, err
	}
	return b.Results[0], nil
}

// Check computes Limit's decision without consuming anything.
func (e *Engine) Check(ctx context.Context, tenantID int64, req Request) (Decision, error) {
	b, err := e.Batch(ctx, tenantID, []Request{req}, false)
	if err != nil {
		return Decision{}, err
	}
	return b.Results[0], nil
}

// Batch decides several limits in one transaction, all or nothing: when any refuses, nothing is
// written. With consume=false it only checks. Requests naming the same key see each other's
// consumption in order. Concurrent calls are grouped into shared transactions (group.go) while
// Run runs; without it, the call fails closed with ErrUnavailable when ctx ends.
func (e *Engine) Batch(ctx context.Context, tenantID int64, reqs []Request, consume bool) (BatchDecision, error) {
	return e.batch(ctx, &job{tenantID: tenantID, reqs: reqs, consume: consume})
}

// CheckRefused checks reqs as a batch its caller refuses as a whole whatever they decide (the
// Envoy adapter's request that names an unknown limit it denies): nothing is counted, and each
// limit reports its balance as it stands, as in a decision refused as a whole, where a check
// says what its count would leave. OK and each result's OK say whether the limits would fit.
func (e *Engine) CheckRefused(ctx context.Context, tenantID int64, reqs []Request) (BatchDecision, error) {
	return e.batch(ctx, &job{tenantID: tenantID, reqs: reqs, refused: true})
}

func (e *Engine) batch(ctx context.Context, j *job) (BatchDecision, error) {
	reqs := j.reqs
	if len(reqs) == 0 {
		return BatchDecision{}, invalidRequest("limits", "must name at least one limit")
	}
	for i := range reqs {
		if err := validateRequest(&reqs[i]); err != nil {
			return BatchDecision{}, err
		}
	}
	j.picks, j.done = make([][]int, len(reqs)), make(chan struct{})
	if err := e.submit(ctx, j); err != nil {
		return BatchDecision{}, fmt.Errorf("limiter: decide: %w", err)
	}
	if j.err != nil {
		return BatchDecision{}, j.err
	}
	return j.out, nil
}

// Outcome is one result of Each: a decision, or why the request got none.
type Outcome struct {
	Decision Decision
	// With is the decision of EachWith's added request (nil without one): when it refused, so was
	// the job, and Decision.OK says only what the request's own limit said.
	With *Decision
	Err  error
	// Answer and Replayed are an idempotent request's (EachIdempotent): its answer, and whether
	// it was replayed.
	Answer   Answer
	Replayed bool
}

// Each decides every request on its own, not all or nothing: each valid request is its own job,
// so they share group transactions with each other and with concurrent calls, and are decided
// in order (requests naming the same key see each other's consumption). An invalid request, or
// one that fails (an unknown limit), gets its error and the others are still decided. The
// result is in the order of reqs.
func (e *Engine) Each(ctx context.Context, tenantID int64, reqs []Request, consume bool) []Outcome {
	return e.EachWith(ctx, tenantID, reqs, nil, consume)
}

// EachWith is Each with, when with is not nil, a copy of with added to each request's job, all
// or nothing with it (a plan's decision rate, Request.System): Outcome.With is its decision.
func (e *Engine) EachWith(ctx context.Context, tenantID int64, reqs []Request, with *Request, consume bool) []Outcome {
	return e.each(ctx, tenantID, reqs, with, consume, nil)
}

// each is EachWith, with an idempotency record for each request when idems is not nil.
func (e *Engine) each(ctx context.Context, tenantID int64, reqs []Request, with *Request, consume bool, idems []*Idempotency) []Outcome {
	out := make([]Outcome, len(reqs))
	if with != nil {
		if err := validateRequest(with); err != nil {
			for i := range out {
				out[i].Err = err
			}
			return out
		}
	}
	jobs := make([]*job, len(reqs))
	for i := range reqs {
		if err := validateRequest(&reqs[i]); err != nil {
			out[i].Err = err
			continue
		}
		jr := reqs[i : i+1]
		if with != nil {
			jr = []Request{reqs[i], *with}
		}
		j := &job{tenantID: tenantID, reqs: jr, consume: consume, picks: make([][]int, len(jr)), done: make(chan struct{})}
		if idems != nil {
			j.idem = idems[i]
		}
		if err := e.enqueue(ctx, e.laneOf(j), j); err != nil {
			out[i].Err = err
			continue
		}
		jobs[i] = j
	}
	for i, j := range jobs {
		if j == nil {
			continue
		}
		switch err := e.await(ctx, j); {
		case err != nil:
			out[i].Err = err
		case j.err != nil:
			out[i].Err = j.err
		case j.replayed:
			out[i].Answer, out[i].Replayed = j.answer, true
		default:
			out[i].Decision, out[i].Answer = j.out.Results[0], j.answer
			if with != nil {
				w := j.out.Results[1]
				out[i].With = &w
			}
		}
	}
	return out
}

// settle adds jitter to refusals and picks the batch retryAfter. It runs inside the group's
// transaction, so that an answer stored there (an idempotent decision's) is the final one.
func (e *Engine) settle(out *BatchDecision) {
	for i := range out.Results {
		r := &out.Results[i]
		jitter, denied := r.Definition.Jitter, r.denied
		if r.retryFrom != nil {
			jitter, denied = r.retryFrom.jitter, r.retryFrom.denied
		}
		if !r.OK && r.RetryAfter != nil && jitter > 0 && !denied {
			// Reservations are never jittered: their retryAfter is when the reserved work is due.
			// The jitter keeps within the cap every retryAfter has (the contract's maximum).
			j := min(*r.RetryAfter+int64(e.intN(int(jitter))), algo.MaxRetryAfter)
			r.RetryAfter = &j
		}
		if sh := r.Shadow; sh != nil && !sh.OK && sh.RetryAfter != nil && r.Definition.Jitter > 0 && !r.denied {
			j := min(*sh.RetryAfter+int64(e.intN(int(r.Definition.Jitter))), algo.MaxRetryAfter)
			sh.RetryAfter = &j
		}
		if out.OK && r.Shadow != nil && !r.Shadow.OK {
			continue // a shadow limit's would-be refusal paces nothing (its RetryAfter is nil anyway)
		}
		// A refused batch carries the largest retryAfter among its refusals; an admitted one the
		// largest among its reservations (when all of the reserved work may run).
		if r.RetryAfter != nil && (out.OK || !r.OK) && (out.RetryAfter == nil || *r.RetryAfter > *out.RetryAfter) {
			v := *r.RetryAfter
			out.RetryAfter = &v
		}
	}
}

// finish reports a committed group's consumed outcomes (settle made them final): every limit of
// every decision once, its ancestors included, each by its own mode (a shadow limit's would-be
// refusal of an admitted request is shadow-refused, whichever of the family it is).
func (e *Engine) finish(tenantID int64, out *BatchDecision, consume bool) {
	if !consume {
		return
	}
	for i := range out.Results {
		r := &out.Results[i]
		if r.refund {
			continue
		}
		owner := tenantID
		if r.system { // a plan's decision rate: the system tenant's limit
			owner = SystemTenant
		}
		e.report(owner, r, out.OK)
		for j := range r.Parents {
			e.report(owner, &r.Parents[j], out.OK)
		}
	}
}

// report gives one limit's part in a committed decision to the hooks (ok: whether the decision
// was admitted). In a decision refused as a whole, a limit that would have admitted its part (a
// sibling, an ancestor or the tenant's plan refused) neither admitted nor refused anything: it is
// not reported (refusal counts, top refused keys and limit.refusals events are of what each limit
// refused); the limits that refused are.
func (e *Engine) report(owner int64, d *Decision, ok bool) {
	if !ok && !d.refused {
		return
	}
	if ok && d.Shadow != nil && !d.Shadow.OK {
		if e.onShadow != nil {
			e.onShadow(owner, d.Name)
		}
		if e.onKey != nil {
			e.onKey(owner, KeyOutcome{Name: d.Name, Key: d.Key, OK: true, ShadowRefused: true, Remaining: d.Remaining, Max: d.maxOfRemaining()})
		}
		return
	}
	if e.onDecision != nil {
		e.onDecision(owner, d.Name, ok)
	}
	if e.onKey != nil {
		e.onKey(owner, KeyOutcome{Name: d.Name, Key: d.Key, OK: ok, Remaining: d.Remaining, Max: d.maxOfRemaining()})
	}
}

// maxOfRemaining is the most the shards behind d.Remaining hold: the limit's maximum, or on a
// sharded limit that of the one or two shards the decision used, so that Remaining/Max says how
// near the key is to its limit.
func (d *Decision) maxOfRemaining() float64 {
	if d.usedMax > 0 {
		return d.usedMax
	}
	return d.Definition.Max()
}

func maxIndex(s []int) int {
	m := 0
	for _, v := range s {
		m = max(m, v)
	}
	return m
}

// pickShards picks one random shard, plus a second distinct one when there are two or more.
func (e *Engine) pickShards(n int) []int {
	if n <= 1 {
		return []int{0}
	}
	a := e.intN(n)
	b := e.intN(n - 1)
	if b >= a {
		b++
	}
	return []int{a, b}
}

// validateRequest checks a request before it is decided; its problems name their fields after
// r.Field.
func validateRequest(r *Request) error { return apperr.At(r.Field, checkRequest(r)) }

// CheckCount refuses a count no limit takes (below 0, above MaxAmount), as every request's is
// checked (validateRequest): the API checks it first, before a plan's rate is spent on it.
func CheckCount(count float64) error { return fromAlgo(algo.CheckCountRange(count)) }

func checkRequest(r *Request) error {
	if !ValidName(r.Name) {
		return invalidRequest("name", "must match ^[A-Za-z0-9_.:-]{1,128}$")
	}
	if r.Key != "" && !ValidKey(r.Key) {
		return invalidRequest("key", KeyRule)
	}
	if err := CheckCount(r.Count); err != nil {
		return err
	}
	if err := algo.CheckAttributes(r.Attributes); err != nil {
		return fromAlgo(err)
	}
	if r.System && (r.Config == nil || r.Refund) {
		return invalidRequest("config", "a system request needs an inline config and cannot be a refund")
	}
	if r.Refund && (r.Reserve || r.Config != nil) {
		return invalidRequest("count", "a refund gives tokens back to a stored limit: no reserve, no inline config")
	}
	if r.Config != nil {
		if r.Config.Kind == Concurrency {
			return fromAlgo(&algo.ValidationError{Code: algo.CodeInvalidConfig, Fields: []FieldError{{Field: "config",
				Message: "concurrency limits need a stored definition (PUT /v1/limits/{name}): their leases are released and extended by it"}}})
		}
		if len(r.Config.Parents) > 0 {
			return fromAlgo(&algo.ValidationError{Code: algo.CodeInvalidConfig, Fields: []FieldError{{Field: "parents",
				Message: "inline configs cannot have parents: store the definition (PUT /v1/limits/{name}) to give it parents"}}})
		}
		return fromAlgo(r.Config.Validate())
	}
	return nil
}

// loadStates reads the given shards of one key; shards without a row read as "no row" (full).
func loadStates(tx *gorm.DB, tenantID int64, def Definition, name, key string, shards []int) ([]algo.State, error) {
	keys := make([]rowKey, len(shards))
	for i, s := range shards {
		keys[i] = rowKey{tenantID, name, key, s}
	}
	rows, err := loadRows(tx, keys)
	if err != nil {
		return nil, err
	}
	out := make([]algo.State, len(shards))
	for i, k := range keys {
		out[i] = rows[k].state(def)
	}
	return out, nil
}

// Reset deletes the state of one key (every shard; "" is the limit's global key) whether or not
// any exists, or of every key of name when key is nil; the latter returns ErrLimitNotFound when
// name has neither a definition nor any state. then, when not nil, is called in the same
// transaction once the state is deleted.
func (e *Engine) Reset(ctx context.Context, tenantID int64, name string, key *string, then OnReset) error {
	if !ValidName(name) {
		return ErrLimitNotFound
	}
	if key != nil && *key != "" && !ValidKey(*key) {
		return invalidRequest("key", KeyRule)
	}
	if key == nil {
		// Every key of a name that has neither a stored definition nor any state is not found;
		// the first batch checks, and is audited.
		err := e.dropStateInBatches(db.WithPurpose(ctx, db.PurposeDecision), tenantID, name, func(tx *gorm.DB, first bool) (bool, error) {
			if !first {
				return false, nil
			}
			if err := requireDefinitionOrState(tx, tenantID, name); err != nil || then == nil {
				return false, err
			}
			return false, then(tx)
		})
		if err != nil {
			return fmt.Errorf("limiter: reset: %w", err)
		}
		return nil
	}
	err := e.db.Serializable(db.WithPurpose(ctx, db.PurposeDecision), func(tx *gorm.DB) error {
		if err := e.decisionSettings(tx, false); err != nil {
			return err
		}
		// One key (or the global one) is reset whether or not the name has a stored definition
		// or any state (idempotent: inline-config limits have neither until used).
		if err := deleteState(tx, tenantID, name, key); err != nil || then == nil {
			return err
		}
		return then(tx)
	})
	if err != nil {
		return fmt.Errorf("limiter: reset: %w", err)
	}
	return nil
}

// stateDropDutyCycle is the share of the time dropStateInBatches takes at most.
const stateDropDutyCycle = 0.5

// dropStateInBatches deletes every key's state of name (deleteState's work) in transactions of
// about stateBatch rows (dropStateBatch), in key order, so that no transaction holds SQLite's write
// lock, or a PostgreSQL transaction its rows, for long however many keys the limit has (one
// transaction of millions of rows outlasted the retry budget every time, and stalled every other
// decision on SQLite meanwhile). Each key is reset at one moment, all of its rows together;
// different keys at different moments while it runs, so a key decided on after its batch keeps
// that decision. each runs first in every batch's transaction (first for the first), and can
// stop the batches (stop) or fail them.
func (e *Engine) dropStateInBatches(ctx context.Context, tenantID int64, name string, each func(tx *gorm.DB, first bool) (stop bool, err error)) error {
	after, first := "", true
	for {
		var last string
		var more, stop bool
		started := time.Now()
		err := e.db.Serializable(ctx, func(tx *gorm.DB) error {
			if err := e.decisionSettings(tx, false); err != nil {
				return err
			}
			var err error
			if stop, err = each(tx, first); err != nil || stop {
				return err
			}
			last, more, err = dropStateBatch(tx, tenantID, name, after, first)
			return err
		})
		if err != nil || stop || !more {
			return err
		}
		if e.afterStateBatch != nil {
			e.afterStateBatch()
		}
		// Half the time at most: on SQLite the next batch would otherwise take the write lock
		// back before a decision waiting for it looks again (it polls), and starve it.
		if err := rest(ctx, time.Since(started), stateDropDutyCycle); err != nil {
			return err
		}
		after, first = last, false
	}
}

// requireDefinitionOrState returns ErrLimitNotFound when name has neither a stored definition
// nor any state.
func requireDefinitionOrState(tx *gorm.DB, tenantID int64, name string) error {
	_, ok, err := loadDefinition(tx, tenantID, name)
	if err != nil || ok {
		return err
	}
	some, err := anyState(tx, tenantID, name)
	if err == nil && !some {
		err = ErrLimitNotFound
	}
	return err
}

// ShardValue is one shard's value computed to now.
type ShardValue struct {
	Shard int
	Value float64
	TS    int64
}

// Value is a key's current value: the sum over shards and each shard.
type Value struct {
	Value      float64
	TS         int64
	Shards     []ShardValue
	Definition Definition
	// WindowStart and ResetAt (quotas only) are the current calendar window's start and end,
	// the instant the quota is whole again, in ms since the epoch.
	WindowStart, ResetAt *int64
	// FullAt is when (ms since the epoch) every shard of the key is full again if nothing more is
	// consumed (algo.FullAt); 0 when it is full already.
	FullAt int64
	// PenaltyUntil is when the key's running penalty ends (ms since the epoch); 0 when none runs.
	PenaltyUntil int64
	Override     string // the match of the override that applies to the key, "" when none
}

// GetValue computes a key's value to now without writing, under the key's override when one
// applies. It needs a stored definition.
func (e *Engine) GetValue(ctx context.Context, tenantID int64, name, key string) (Value, error) {
	if !ValidName(name) {
		return Value{}, ErrLimitNotFound
	}
	if key != "" && !ValidKey(key) {
		return Value{}, invalidRequest("key", KeyRule)
	}
	var out Value
	err := e.db.ReadOnly(db.WithPurpose(ctx, db.PurposeDecision), func(tx *gorm.DB) error {
		now, err := e.nowIn(tx)
		if err != nil {
			return err
		}
		stored, ok, err := loadDefinition(tx, tenantID, name)
		if err != nil {
			return err
		}
		if !ok {
			return ErrLimitNotFound
		}
		def := stored.Definition
		// The key's override, if any, decides its numbers here as in a decision.
		ovs, err := e.overridesOf(tx, defKey{tenantID, name}, stored.OverridesVersion)
		if err != nil {
			return err
		}
		ov := ovs.Lookup(key, now)
		if ov != nil {
			def = ov.Apply(def)
		}
		all := make([]int, def.Shards)
		for i := range all {
			all[i] = i
		}
		states, err := loadStates(tx, tenantID, def, name, key, all)
		if err != nil {
			return err
		}
		out = Value{Definition: def, Shards: make([]ShardValue, len(states))}
		if ov != nil {
			out.Override = ov.Match
		}
		origin := algo.Origin(def, tenantID, name, key)
		for i, st := range states {
			v, ts := algo.Peek(def, st, now, origin)
			out.Shards[i] = ShardValue{Shard: i, Value: v, TS: ts}
			out.Value += v
			out.TS = max(out.TS, ts)
			if at := algo.FullAt(def, st, now, origin); at > now {
				out.FullAt = max(out.FullAt, at)
			}
			if st.PenaltyUntil > now {
				out.PenaltyUntil = max(out.PenaltyUntil, st.PenaltyUntil)
			}
		}
		// The shards' parts add up to at most the maximum in real numbers; their floating-point
		// sum can be over it (1e7 in 7 shards sums to 10000000.000000002).
		out.Value = min(out.Value, def.Max())
		if def.Kind == Quota {
			start, end := def.WindowAt(out.TS)
			out.WindowStart, out.ResetAt = &start, &end
		}
		return nil
	})
	if err != nil {
		return Value{}, fmt.Errorf("limiter: get value: %w", err)
	}
	return out, nil
}

// KeyValue is one key of a limit with its current value (summed over the shards that have state).
type KeyValue struct {
	Key        string
	Value      float64
	TS         int64
	Definition Definition // with the numbers of the key's override, if one applies
	Override   string     // the match of the override that applies to the key, "" when none
}

// RecentKeys lists up to n keys of name that have state, most recently written first, with their
// values computed to now under each key's override. Shards without state count as full.
func (e *Engine) RecentKeys(ctx context.Context, tenantID int64, name string, n int) ([]KeyValue, error) {
	var out []KeyValue
	err := e.db.ReadOnly(db.WithPurpose(ctx, db.PurposeDecision), func(tx *gorm.DB) error {
		stored, ok, err := loadDefinition(tx, tenantID, name)
		if err != nil {
			return err
		}
		if !ok {
			return ErrLimitNotFound
		}
		keys, err := recentKeys(tx, tenantID, name, n, stored.Definition.Shards)
		if err != nil {
			return err
		}
		now, err := e.nowIn(tx)
		if err != nil {
			return err
		}
		ovs, err := e.overridesOf(tx, defKey{tenantID, name}, stored.OverridesVersion)
		if err != nil {
			return err
		}
		all := make([]int, stored.Definition.Shards)
		for i := range all {
			all[i] = i
		}
		for _, k := range keys {
			def := stored.Definition
			kv := KeyValue{Key: k}
			if ov := ovs.Lookup(k, now); ov != nil {
				def, kv.Override = ov.Apply(def), ov.Match
			}
			kv.Definition = def
			states, err := loadStates(tx, tenantID, def, name, k, all)
			if err != nil {
				return err
			}
			origin := algo.Origin(def, tenantID, name, k)
			for _, st := range states {
				v, ts := algo.Peek(def, st, now, origin)
				kv.Value += v
				kv.TS = max(kv.TS, ts)
			}
			out = append(out, kv)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("limiter: recent keys: %w", err)
	}
	return out, nil
}

// GroupStats counts the group transactions: how many ran, the decisions they carried (their
// ratio is the average coalescing factor), and on PostgreSQL the round trips and statements
// their attempts sent.
type GroupStats struct {
	Groups, Jobs, RoundTrips, Statements int64
	// DefinitionsRead counts the definitions the one-trip function returned: one per limit
	// whose version this instance did not hold.
	DefinitionsRead int64
	// Busy is the time the lanes' transactions took, summed: for each group, its closes of holds
	// and leases (run before its decisions, in the lane) and its decisions, from the first
	// attempt's start to the last attempt's end, retries and waits between them included, unless
	// the group gave its lane's turn away before backing off (then up to that moment). Over a
	// span of wall time it says how busy the lanes were: near the number of lanes, every lane was
	// always in a transaction, and the database's turn was the decisions' ceiling.
	Busy time.Duration
}

// GroupStats reports the counts so far.
func (e *Engine) GroupStats() GroupStats {
	return GroupStats{Groups: e.groups.Load(), Jobs: e.jobs.Load(), RoundTrips: e.trips.Load(), Statements: e.statements.Load(),
		DefinitionsRead: e.definitionsRead.Load(), Busy: time.Duration(e.groupNanos.Load())}
}

// sent counts one round trip of n statements.
func (e *Engine) sent(n int) {
	e.trips.Add(1)
	e.statements.Add(int64(n))
}
