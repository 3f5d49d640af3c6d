package limiter

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// Group commit. Every decision is a job; whoever holds a lane's token (below) takes every job waiting in
// it (up to maxGroup) and decides them all in ONE serializable transaction: one query for the
// definitions, one for the state rows, one multi-row upsert (on PostgreSQL, a group of plain
// token bucket decisions is one function call instead: group_onetrip_pg.go), in arrival order,
// each job all-or-nothing on its own. One lane has one group in flight at a time, so a hot key's
// decisions are coalesced into one transaction instead of fighting each other with
// serialization failures. Strictness is unchanged: the transaction still reads and writes every
// row it decides on, and conflicting transactions (another lane's, another process's) are retried
// as before.

// job is one Batch call waiting for its decision.
type job struct {
	tenantID int64
	reqs     []Request
	consume  bool
	refused  bool       // a check its caller refuses as a whole (CheckRefused): reported as it stands
	exp      []limitRef // the limits it decides: its requests and their ancestors (expand)
	picks    [][]int    // shard choices of each of exp, kept across retries of the group
	out      BatchDecision
	err      error
	done     chan struct{}
	state    atomic.Int32 // jobQueued, jobTaken or jobAbandoned
	// queuedAt is when the job was queued for the lane's worker (zero when its caller decided it
	// at once): a job queued for longer than the retry budget fails closed when its group starts,
	// and its group gives up at the end of its youngest job's budget (expireQueued).
	queuedAt time.Time
	// step, when set, is the job's own writes (a hold's row, holds.go), made in its group's
	// transaction after every decision and before commit (afterDecisions).
	step func(j *job, now int64) []stmt
	// close, when set, makes the job a close (a hold settled, released or expired, a lease
	// released or extended, holds.go): whoever decides the lane's group runs it in a transaction of its own, never
	// beside a decision group (runCloses).
	close func(tx *gorm.DB, j *job) error
	// sweep marks a close the sweepers made (expired holds and leases): a transaction of sweeps
	// alone counts its retries and give-ups as the sweepers' (db.PurposeSweep), not decisions'.
	sweep bool
	// overage is what the close's settles recorded as overage in the transaction's current
	// attempt; runCloses reports it (Options.OnHoldOverage) only once that attempt committed.
	overage []overage
	// extras are the decisions the close's settles took beyond what was held, in the
	// transaction's current attempt; runCloses reports them (finish) once that attempt committed.
	extras []*job
	// Idempotent decisions (idempotency.go): the job's record, its answer (rendered in the
	// transaction, or replayed), and the earlier job of the group with the same key, if any.
	idem     *Idempotency
	answer   Answer
	replayed bool
	twinOf   *job
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

// Lanes. Decisions wait in lanes; whoever holds a lane's token decides a group of its jobs:
// every job queued there (up to maxGroup) in one group transaction. A decision that finds its
// lane idle (no group in flight, nothing queued) takes the token and is decided at once on its
// caller's goroutine, with no hand-off; otherwise it queues, and the lane's worker (one per lane,
// while Run runs) decides what queued, group after group, as one worker did before lanes. A job
// goes to the lane of its first request's row (or of its tenant when it carries the tenant's
// plan, whose row every decision of the tenant writes), so a hot key's decisions meet in one
// lane and are coalesced into one group instead of conflicting. Only the first row chooses: a
// key decided alone and inside a batch led by another key can be in two lanes at once, whose
// groups then conflict on it and retry.
type lane struct {
	queue chan *job
	// token holds one token while Run runs and no group of the lane is in flight: empty before
	// Run, taken back by Run when it stops.
	token chan struct{}
	// waiting is whether the lane's worker holds a job it took from the queue while it waits for
	// the token (tests count it as queued).
	waiting atomic.Bool
	// wake tells the lane's worker that jobs are ready (ready) with nothing queued to wake it.
	wake chan struct{}

	// Groups given away (turn.giveAway) are still retrying. Until one ends, the lane's later jobs
	// that would write what it writes (its awayKeys) wait in held instead of joining a group that
	// would fight it for the row: one instance keeps one group in flight per contended row, as
	// when the lane waited for it, while other keys' and tenants' decisions go on. When it ends,
	// the jobs it held go to ready, and the lane's next group takes them first. mu guards away,
	// held and ready; awayN and readyN let the common path (nothing away) skip the lock.
	mu     sync.Mutex
	away   map[awayKey]int // how many away groups hold each key back
	held   []*job
	ready  []*job
	awayN  atomic.Int32 // groups given away and not ended
	readyN atomic.Int32 // len(ready)
}

// awayKey is something an away group writes, which the lane's later jobs that would write it too
// wait for (lane.heldBack).
type awayKey struct {
	tenantID  int64
	kind      awayKind
	name, key string // awayRow's
}

type awayKind uint8

const (
	// awayRow: a request's row: its tenant's (the system tenant's for a System request, such as
	// the plan's), its name and key. Decisions with a request on it wait.
	awayRow awayKind = iota
	// awayTenant: any job of the tenant. Its closes wait: the rows a close writes are unknown until
	// it runs.
	awayTenant
	// awayCloses: a close of the tenant. Its decisions wait, for the same reason.
	awayCloses
	// awayParents: a decision of the tenant that writes a parent's row. Its decisions wait: a
	// parent is shared by many keys, and which a waiting decision writes is unknown until its
	// definitions are read.
	awayParents
)

// awayKeys are what j's group holds back while it is away, read when it gives its turn away
// (after an attempt, so that a decision's parents are known).
func (j *job) awayKeys() []awayKey {
	keys := []awayKey{{tenantID: j.tenantID, kind: awayTenant}}
	if j.close != nil {
		return append(keys, awayKey{tenantID: j.tenantID, kind: awayCloses})
	}
	if slices.ContainsFunc(j.exp, func(r limitRef) bool { return r.parent }) {
		keys = append(keys, awayKey{tenantID: j.tenantID, kind: awayParents})
	}
	return append(keys, j.rowKeys()...)
}

// rowKeys are the awayRow keys of j's requests.
func (j *job) rowKeys() []awayKey {
	keys := make([]awayKey, 0, len(j.reqs))
	for _, r := range j.reqs {
		owner := j.tenantID
		if r.System {
			owner = SystemTenant
		}
		keys = append(keys, awayKey{tenantID: owner, kind: awayRow, name: r.Name, key: r.Key})
	}
	return keys
}

// heldBack reports whether an away group holds j back: a close while its tenant has a job away;
// a decision while its tenant has a close or a decision on a parent away, or one of its
// requests' rows is away. (The sweepers' closes, every tenant's, run as the system tenant's:
// they hold back nothing but the sweepers' own.) Called with l.mu held.
func (l *lane) heldBack(j *job) bool {
	if j.close != nil {
		return l.away[awayKey{tenantID: j.tenantID, kind: awayTenant}] > 0
	}
	if l.away[awayKey{tenantID: j.tenantID, kind: awayCloses}] > 0 || l.away[awayKey{tenantID: j.tenantID, kind: awayParents}] > 0 {
		return true
	}
	for _, k := range j.rowKeys() {
		if l.away[k] > 0 {
			return true
		}
	}
	return false
}

// hold keeps j out of the group being formed when an away group holds it back, and reports
// whether it did: j waits in held, still queued (its caller may give up on it), until that group
// ends.
func (l *lane) hold(j *job) bool {
	if l.awayN.Load() == 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.heldBack(j) {
		return false
	}
	l.held = append(l.held, j)
	return true
}

// goAway registers an away group's keys (turn.giveAway).
func (l *lane) goAway(keys []awayKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.away == nil {
		l.away = map[awayKey]int{}
	}
	for _, k := range keys {
		l.away[k]++
	}
	l.awayN.Add(1)
}

// comeBack unregisters the keys goAway registered once their group ended, moves the jobs no
// longer held back to ready and wakes the lane's worker for them.
func (l *lane) comeBack(keys []awayKey) { l.release(keys, true) }

// release unregisters keys goAway registered and moves the jobs no longer held back to ready;
// ended says the away group ended (comeBack), and not only some of its jobs (turn.releaseSome).
func (l *lane) release(keys []awayKey, ended bool) {
	l.mu.Lock()
	for _, k := range keys {
		if l.away[k]--; l.away[k] <= 0 {
			delete(l.away, k)
		}
	}
	kept := l.held[:0]
	for _, j := range l.held {
		if l.heldBack(j) {
			kept = append(kept, j)
		} else {
			l.ready = append(l.ready, j)
		}
	}
	clear(l.held[len(kept):])
	l.held = kept
	l.readyN.Store(int32(len(l.ready)))
	// Only now: whoever reads no group away (the fast path, hold) then also reads the jobs
	// made ready, and does not pass them.
	if ended {
		l.awayN.Add(-1)
	}
	l.mu.Unlock()
	l.wakeWorker()
}

// makeReady puts j behind the ready jobs (which came before it).
func (l *lane) makeReady(j *job) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ready = append(l.ready, j)
	l.readyN.Store(int32(len(l.ready)))
}

// nothingHeld reports whether no group of the lane is away and no job is ready: then a decision
// that finds nothing queued either may be decided at once, ahead of none.
func (l *lane) nothingHeld() bool { return l.awayN.Load() == 0 && l.readyN.Load() == 0 }

// wakeForReady wakes the lane's worker when jobs are ready that no group is about to take.
func (l *lane) wakeForReady() {
	if l.readyN.Load() > 0 {
		l.wakeWorker()
	}
}

// wakeWorker makes the lane's worker run a turn even if nothing is queued (ready jobs).
func (l *lane) wakeWorker() {
	select {
	case l.wake <- struct{}{}:
	default: // a wake is pending already
	}
}

// takeReady takes up to max ready jobs, in the order they were held, for the group being formed.
// One that another away group holds back meanwhile goes back to held, in its place by arrival
// (before the jobs held since).
func (l *lane) takeReady(max int) []*job {
	l.mu.Lock()
	defer l.mu.Unlock()
	var group []*job
	n, reheld := 0, false
	for _, j := range l.ready {
		if len(group) >= max {
			break
		}
		n++
		switch {
		case l.heldBack(j):
			l.held, reheld = append(l.held, j), true
		case j.state.CompareAndSwap(jobQueued, jobTaken):
			group = append(group, j)
		}
	}
	if reheld {
		slices.SortStableFunc(l.held, func(x, y *job) int { return x.queuedAt.Compare(y.queuedAt) })
	}
	clear(l.ready[:n])
	l.ready = l.ready[n:]
	l.readyN.Store(int32(len(l.ready)))
	return group
}

// Job states: queued until its group takes it (or its caller gives up on it first).
const (
	jobQueued int32 = iota
	jobTaken
	jobAbandoned
)

// Run runs the lanes' workers until ctx ends, then waits for the groups in progress, refuses
// what is still queued (those decisions fail closed with ErrUnavailable) and returns. Decisions
// need Run: without it they wait for their own context and then fail closed. Run may be called
// once per engine; it returns an error only when misused.
func (e *Engine) Run(ctx context.Context) error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("limiter: Run called twice on one engine")
	}
	for _, l := range e.lanes {
		l.token <- struct{}{}
		e.workers.Go(func() { e.work(ctx, l) })
	}
	<-ctx.Done()
	e.stopping.Store(true)
	e.workers.Wait() // with any that gave its turn away (turn.giveAway) and finished its group
	for _, l := range e.lanes {
		<-l.token // a group its caller decides finishes first
	}
	e.givenAway.Wait() // and so do the groups that gave their turn away
	e.refuseQueued()
	return nil
}

// work decides l's queued jobs, a group at a time, until ctx ends.
func (e *Engine) work(ctx context.Context, l *lane) {
	group := make([]*job, 0, e.maxGroup)
	replace := func() { e.workers.Go(func() { e.work(ctx, l) }) }
	for {
		var first *job // nil when woken for ready jobs
		select {
		case <-ctx.Done():
			return
		case first = <-l.queue:
		case <-l.wake:
		}
		l.waiting.Store(first != nil)
		gotToken := false
		select {
		case <-ctx.Done():
		case <-l.token:
			gotToken = true
		}
		l.waiting.Store(false)
		if ctx.Err() != nil { // Run is stopping: refused, not decided (a busy lane must not delay the stop)
			if gotToken {
				l.token <- struct{}{}
			}
			if first != nil {
				refuse(first)
			}
			return
		}
		group = group[:0]
		if first != nil && l.readyN.Load() > 0 { // it came after the ready jobs: it waits behind them
			l.makeReady(first)
			first = nil
		}
		if first != nil && !l.hold(first) && first.state.CompareAndSwap(jobQueued, jobTaken) {
			group = append(group, first)
		}
		t := turn{e: e, l: l, replace: replace}
		e.runLane(&t, group)
		if t.end() {
			return // another worker took this one's place when the group gave its turn away
		}
	}
}

// turn is a lane's token held for one group, by the lane's worker or by a caller deciding at
// once.
type turn struct {
	e *Engine
	l *lane
	// replace, for the lane's worker, starts another worker for the lane (giveAway): this one
	// is busy with its group's retries and ends with it.
	replace func()
	group   []*job // the group it decides (runLane)
	given   bool   // giveAway gave the token back before the group ended
	// away are the keys giveAway registered, by job (comeBack and releaseSome unregister exactly
	// those); awayAt is when. mu guards away once the group is split (runParts).
	mu     sync.Mutex
	away   map[*job][]awayKey
	awayAt time.Time
}

// giveAway gives the lane's token back while the group still has attempts to make: its
// transaction lost a row to another (another instance's, usually, on a contended key) and is
// about to back off before trying again. Other jobs of the lane, other tenants' as much as this
// key's, are decided meanwhile instead of waiting behind the backoff (docs/performance.md,
// "retries off the lane"). The group carries on on this goroutine; a later group that meets it
// on a row conflicts and retries as groups of two lanes do, so strictness is the transactions'
// as ever. Called by the database's retry loop (db.BeforeWaiting), on the turn's goroutine.
func (t *turn) giveAway() {
	if t.given {
		return
	}
	t.given, t.awayAt = true, time.Now()
	t.e.givenAway.Add(1) // before the token goes back: Run waits for it once it holds every token
	t.away = make(map[*job][]awayKey, len(t.group))
	var all []awayKey
	for _, j := range t.group {
		t.away[j] = j.awayKeys()
		all = append(all, t.away[j]...)
	}
	t.l.goAway(all)
	t.l.wakeForReady() // ready jobs the group had no room for: decided meanwhile
	t.l.token <- struct{}{}
	if t.replace != nil {
		t.replace()
	}
}

// busyUntil is when the lane stopped being busy with the turn's group: now, or when the group
// gave its turn away (the lane's busy time, GroupStats.Busy, does not count an away group's
// retries, nor its parts' (runParts): the lane decides other groups meanwhile; a part that began
// after that counts nothing). t may be nil (tests).
func (t *turn) busyUntil(now time.Time) time.Time {
	if t != nil && t.given {
		return t.awayAt
	}
	return now
}

// end ends the turn once its group is decided, giving the token back unless giveAway did, and
// reports whether it had.
func (t *turn) end() bool {
	if t.given {
		t.l.comeBack(t.takeAway(func(*job) bool { return true }))
		t.e.givenAway.Done()
		return true
	}
	t.l.wakeForReady() // more than one group could take
	t.l.token <- struct{}{}
	return false
}

// takeAway removes from t.away the keys of the jobs which picks and returns them.
func (t *turn) takeAway(which func(*job) bool) []awayKey {
	t.mu.Lock()
	defer t.mu.Unlock()
	var keys []awayKey
	for j, ks := range t.away {
		if which(j) {
			keys = append(keys, ks...)
			delete(t.away, j)
		}
	}
	return keys
}

// releaseSome unregisters the keys of the jobs of t's away group which picks, while its other
// jobs are still being decided (runParts): the jobs those keys held back are decided meanwhile.
func (t *turn) releaseSome(which func(*job) bool) {
	if t != nil && t.given {
		t.l.release(t.takeAway(which), false)
	}
}

// among picks the jobs of jobs.
func among(jobs []*job) func(*job) bool {
	set := make(map[*job]bool, len(jobs))
	for _, j := range jobs {
		set[j] = true
	}
	return func(j *job) bool { return set[j] }
}

// runLane is called holding t's token: it adds t's lane's queued jobs to group (up to maxGroup)
// and decides them.
func (e *Engine) runLane(t *turn, group []*job) {
	l := t.l
	if l.readyN.Load() > 0 { // jobs an away group held back go first, before any taken since
		group = append(l.takeReady(e.maxGroup-len(group)), group...)
	}
	for len(group) < e.maxGroup {
		select {
		case j := <-l.queue:
			if !l.hold(j) && j.state.CompareAndSwap(jobQueued, jobTaken) {
				group = append(group, j)
			}
			continue
		default:
		}
		break
	}
	t.group = group
	if len(group) > 0 {
		e.runGroupContained(t, group)
	}
}

// runGroupContained runs group, containing a panic in it (a bug): every job of the group not yet
// answered fails closed, and the lane's holder gives its token back as usual, so that one bad
// group cannot stop every later decision of the lane (or, on a worker, the process).
func (e *Engine) runGroupContained(t *turn, group []*job) {
	e.containing(group, func() { e.runGroup(t, group) })
}

// containing runs run, which decides group, failing closed every job of group not yet answered
// if it panics.
func (e *Engine) containing(group []*job, run func()) {
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("limiter: decide: a group panicked: %v", r)
			for _, j := range group {
				if j.done == nil {
					continue
				}
				select {
				case <-j.done:
				default:
					j.err = err
					close(j.done)
				}
			}
		}
	}()
	run()
}

// refuseQueued marks the engine stopped and fails every queued decision closed.
func (e *Engine) refuseQueued() {
	close(e.stopped)
	for _, l := range e.lanes {
	drain:
		for {
			select {
			case j := <-l.queue:
				refuse(j)
			default:
				break drain
			}
		}
		l.mu.Lock() // every away group has ended (Run waited for them): nothing is held
		for _, j := range append(l.held, l.ready...) {
			refuse(j)
		}
		l.held, l.ready = nil, nil
		l.readyN.Store(0)
		l.mu.Unlock()
	}
}

// refuse fails j closed with ErrUnavailable unless its group, or its caller, already took it.
func refuse(j *job) {
	if j.state.CompareAndSwap(jobQueued, jobTaken) {
		j.err = ErrUnavailable
		close(j.done)
	}
}

// laneOf is the lane of j: by its tenant's plan when it carries one, else by its first
// request's tenant, limit and key.
func (e *Engine) laneOf(j *job) *lane {
	if len(e.lanes) == 1 || len(j.reqs) == 0 {
		return e.lanes[0]
	}
	var h maphash.Hash
	h.SetSeed(e.laneSeed)
	var tenant [8]byte
	binary.LittleEndian.PutUint64(tenant[:], uint64(j.tenantID))
	_, _ = h.Write(tenant[:])
	if !slices.ContainsFunc(j.reqs, func(r Request) bool { return r.System }) {
		_, _ = h.WriteString(j.reqs[0].Name)
		_ = h.WriteByte(0)
		_, _ = h.WriteString(j.reqs[0].Key)
	}
	return e.lanes[h.Sum64()%uint64(len(e.lanes))]
}

// submit decides j at once on this goroutine when its lane is idle, else queues it and waits
// for its decision. It fails closed with ErrUnavailable when Run has stopped, or when ctx ends
// before the decision is made (Run not running, or too slow).
func (e *Engine) submit(ctx context.Context, j *job) error {
	l := e.laneOf(j)
	// Decided at once only when nothing waits before it: no queued, held or ready job (the worker
	// decides j behind them, or holds it back behind an away group).
	if len(l.queue) == 0 && l.nothingHeld() {
		select {
		case <-l.token:
			// A group may have given the token away since: then the worker decides j after it.
			if !e.stopping.Load() && l.nothingHeld() {
				j.state.Store(jobTaken)
				t := turn{e: e, l: l}
				e.runLane(&t, []*job{j})
				t.end()
				return nil
			}
			l.token <- struct{}{}
		default:
		}
	}
	if err := e.enqueue(ctx, l, j); err != nil {
		return err
	}
	return e.await(ctx, j)
}

// enqueue queues j for its lane l's (laneOf) worker, noting when (before the worker can see it).
func (e *Engine) enqueue(ctx context.Context, l *lane, j *job) error {
	j.queuedAt = time.Now()
	select {
	case l.queue <- j:
		return nil
	case <-e.stopped:
		return ErrUnavailable
	case <-ctx.Done():
		return ErrUnavailable.Wrap(ctx.Err())
	}
}

// await waits for a queued job's decision.
func (e *Engine) await(ctx context.Context, j *job) error {
	select {
	case <-j.done:
		return nil
	case <-e.stopped:
	case <-ctx.Done():
	}
	// A decision that was made wins over a stop or a cancellation racing it. A job still queued
	// is given up: nobody will decide it. One already taken may still be decided; its caller
	// only loses the answer (and, at worst, tokens it no longer wants: an under-admission, never
	// an over-admission).
	select {
	case <-j.done:
		return nil
	default:
	}
	j.state.CompareAndSwap(jobQueued, jobAbandoned)
	if err := ctx.Err(); err != nil {
		return ErrUnavailable.Wrap(err)
	}
	return ErrUnavailable
}

// runGroup decides jobs in one serializable transaction and completes each job. t is the lane's
// turn it runs in (nil: none, in tests): its transactions give it away before backing off.
func (e *Engine) runGroup(t *turn, jobs []*job) { e.runGroupOrPart(t, jobs, false) }

// runGroupOrPart is runGroup; part says jobs are a part of a group that spent its attempts
// (runParts), whose jobs GroupStats counted already.
func (e *Engine) runGroupOrPart(t *turn, jobs []*job, part bool) {
	// The retry budget counts from when each decision was queued, not from when its group
	// began: one queued behind a group stalled for the whole budget would otherwise wait twice
	// as long for its 503 (expireQueued).
	ctx := context.Background()
	start := time.Now()
	jobs, deadline := e.expireQueued(jobs, start)
	if len(jobs) == 0 {
		return
	}
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	// On PostgreSQL only: SQLite has one writer, so a second group in flight beside one that
	// backs off would only wait for the same lock, and make every other writer wait longer.
	if t != nil && e.db.Dialect == db.Postgres {
		ctx = db.BeforeWaiting(ctx, t.giveAway)
	}
	began := time.Now() // the lane's transactions for these jobs, closes and decisions (GroupStats.Busy)
	if jobs = e.runCloses(ctx, jobs); len(jobs) == 0 {
		e.groupNanos.Add(int64(max(0, t.busyUntil(time.Now()).Sub(began))))
		return
	}
	if !part {
		e.groups.Add(1)
		e.jobs.Add(int64(len(jobs)))
	}
	var err error
	ctx = db.WithPurpose(ctx, db.PurposeDecision)
	splits := e.db.Dialect == db.Postgres && !part // a group that spends its attempts (below)
	if splits {
		ctx = db.CountSpentLater(ctx)
	}
	if e.db.Dialect == db.Postgres && !forceGormGroups {
		err = e.db.WithPgx(ctx, func(ctx context.Context, conn *pgx.Conn) error {
			err := e.groupPgx(ctx, conn, jobs)
			if splits && db.IsLockTimeout(err) && len(splitByRows(jobs)) > 1 {
				// A row of the group stayed locked for decisionLockTimeout: its holder may have
				// stalled. Retrying the whole group would keep every other job waiting for that
				// row as long as the budget lasts; its parts are decided now instead (not
				// retried here: errRowLockedLong is no database error).
				return fmt.Errorf("%w: %v", errRowLockedLong, err)
			}
			return err
		})
	} else {
		err = e.db.Serializable(ctx, func(tx *gorm.DB) error {
			if err := e.decisionSettings(tx, e.fastCommit); err != nil {
				return err
			}
			return e.groupGorm(tx, jobs)
		})
	}
	e.groupNanos.Add(int64(max(0, t.busyUntil(time.Now()).Sub(began))))
	if err == nil && e.afterIdempotentCommit != nil && anyIdempotent(jobs) {
		e.afterIdempotentCommit()
	}
	if splits && (errors.Is(err, db.ErrAttemptsSpent) || errors.Is(err, errRowLockedLong)) {
		// Every attempt lost a row to another transaction, most likely on one key that another
		// instance decides on as fast as it can, or a row stayed locked past the lock timeout;
		// the group's jobs on other rows, another tenant's too, need not answer 503 for it.
		// (SQLite's attempts lose the one write lock, not a row: split, they would lose it as
		// well. A part is not split again.) The give-up is counted only where decisions fail
		// closed: here for a group that makes one part, by each part's own transaction otherwise.
		if parts := splitByRows(jobs); len(parts) > 1 {
			if t != nil {
				t.giveAway() // if no backoff came yet (a policy without waits): the parts take a while
				// The group's jobs in no part (closes, jobs queued past the budget) are answered.
				inParts := among(jobs)
				t.releaseSome(func(j *job) bool { return !inParts(j) })
			}
			e.runParts(t, parts, start)
			return
		}
		e.db.GaveUp(db.PurposeDecision)
	}
	for _, j := range jobs {
		if err != nil {
			j.err = fmt.Errorf("limiter: decide: %w", err)
		}
		if j.err == nil && !j.replayed {
			e.finish(j.tenantID, &j.out, j.consume)
		}
		close(j.done)
	}
}

// errRowLockedLong ends a group's transaction whose wait for a row lock outlasted the lock
// timeout, for its jobs to be decided in parts (runGroupOrPart).
var errRowLockedLong = errors.New("limiter: a row stayed locked past the lock timeout")

// maxParallelParts is how many parts of groups that spent their attempts the engine decides at
// once (runParts, Engine.partSlots): each of a part's attempts holds a pooled connection.
const maxParallelParts = 4

// runParts decides the parts of a group that spent its attempts (splitByRows), each as a group
// of its own, started in their order as slots free up (at most maxParallelParts of the engine's
// at once): they share no row, so they cannot lose one to each other, and a part on a contended
// row cannot take the time of those behind it. Each part's jobs keep their budgets: one its
// caller decided at once (not queued) counts from began, its group's start, not again from the
// part's. A part's rows stop holding back the lane's later jobs as soon as it ends.
func (e *Engine) runParts(t *turn, parts [][]*job, began time.Time) {
	var wg sync.WaitGroup
	for _, part := range parts {
		for _, j := range part {
			if j.queuedAt.IsZero() {
				j.queuedAt = began
			}
		}
		e.partSlots <- struct{}{}
		wg.Go(func() {
			defer func() { <-e.partSlots }()
			e.containing(part, func() { e.runGroupOrPart(t, part, true) })
			t.releaseSome(among(part))
		})
	}
	wg.Wait()
}

// splitByRows parts jobs into the fewest groups that share no state row: two jobs are in one
// part when any limit they decide (their requests' and their ancestors', by tenant, name and
// key; a plan's row is the system tenant's) is the same, so jobs on one key, or under one
// contended parent, stay together and never fight each other for it. Parts are in order of
// their first job, each in arrival order.
func splitByRows(jobs []*job) [][]*job {
	parent := make([]int, len(jobs)) // union-find over the jobs' indexes
	for i := range parent {
		parent[i] = i
	}
	root := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	owner := map[awayKey]int{} // a row's first job
	for i, j := range jobs {
		rows := j.rowKeys()
		for _, r := range j.exp {
			rows = append(rows, awayKey{tenantID: r.tenantID, kind: awayRow, name: r.name, key: r.key})
		}
		for _, k := range rows {
			if o, ok := owner[k]; ok {
				if a, b := root(o), root(i); a != b {
					parent[max(a, b)] = min(a, b) // the earlier job leads: parts keep arrival order
				}
			} else {
				owner[k] = i
			}
		}
	}
	index := map[int]int{}
	var parts [][]*job
	for i, j := range jobs {
		r := root(i)
		p, ok := index[r]
		if !ok {
			p = len(parts)
			index[r] = p
			parts = append(parts, nil)
		}
		parts[p] = append(parts[p], j)
	}
	return parts
}

// expireQueued fails closed, at its group's start, every job queued for longer than the retry
// budget (the decision was asked for a whole budget ago), and returns the others with the
// group's deadline: the budget's end of its youngest job, so that no job gives up before its
// own budget is spent (an older one at most waits for the youngest's). The deadline is zero, the
// database's own budget from now, when a job of the group was not queued (its caller decides it
// at once, and its group with it).
func (e *Engine) expireQueued(jobs []*job, now time.Time) ([]*job, time.Time) {
	budget := e.db.Retry.Budget
	spent := func(j *job) bool { return !j.queuedAt.IsZero() && !j.queuedAt.Add(budget).After(now) }
	var deadline time.Time
	expired, unqueued := 0, false
	for _, j := range jobs {
		switch end := j.queuedAt.Add(budget); {
		case j.queuedAt.IsZero():
			unqueued = true
		case spent(j):
			expired++
		case end.After(deadline):
			deadline = end
		}
	}
	if unqueued {
		deadline = time.Time{}
	}
	if expired == 0 { // the common case: nothing allocated
		return jobs, deadline
	}
	kept := make([]*job, 0, len(jobs)-expired)
	for _, j := range jobs {
		if spent(j) {
			j.err = fmt.Errorf("limiter: decide: %w", ErrUnavailable.Wrap(errors.New("queued for longer than the retry budget")))
			purpose := db.PurposeDecision // a 503 answered, counted as the transactions' give-ups are
			if j.sweep {
				purpose = db.PurposeSweep
			}
			e.db.GaveUp(purpose) // counted before the caller hears of it, so it reads the count
			close(j.done)
			continue
		}
		kept = append(kept, j)
	}
	return kept, deadline
}

// decisionSettings starts a transaction through GORM on PostgreSQL that decides or writes limit
// state as groupPgx starts its own (pgSettingsFor): index lookups from the first statement (a
// sequential scan's predicate lock on a whole table would conflict with every write to it), a
// bounded wait for row locks and, with fastCommit, an asynchronous commit. Nothing on SQLite.
// Decisions pass the engine's commit mode; the transactions outside the lanes that write state (a
// reset, a definition's change or deletion, which delete its keys' state, an idempotency key's
// claim) pass false, since definitions and audit records commit with them. Without the lock
// timeout, such a transaction waiting behind a stalled holder's row lock kept the rows it had
// already deleted locked, and every decision on them waiting, for its whole retry budget.
func (e *Engine) decisionSettings(tx *gorm.DB, fastCommit bool) error {
	if e.db.Dialect != db.Postgres {
		return nil
	}
	return tx.Exec(pgSettingsFor(fastCommit)).Error
}

// groupGorm is one attempt of a group through GORM (SQLite), in a transaction that
// decisionSettings began: definitions, rows, decisions, writes.
func (e *Engine) groupGorm(tx *gorm.DB, jobs []*job) error {
	now, err := e.nowIn(tx)
	if err != nil {
		return err
	}
	keys := definitionKeys(jobs)
	defs, versions, err := loadDefinitions(tx, keys)
	if err != nil {
		return err
	}
	asked := map[defKey]bool{}
	for _, k := range keys {
		asked[k] = true
	}
	err = readParents(jobs, defs, asked, func(k []defKey) (map[defKey]Definition, error) {
		more, vs, err := loadDefinitions(tx, k)
		maps.Copy(versions, vs)
		return more, err
	})
	if err != nil {
		return err
	}
	// Overrides come from memory unless their version changed (then they are read here).
	ovs, err := e.overrides.indexes(versions, overrideLoader(tx))
	if err != nil {
		return err
	}
	deciding, err := idemReadGorm(tx, jobs, now) // replays decide nothing
	if err != nil {
		return err
	}
	stored, err := loadRows(tx, e.plan(deciding, defs, ovs, now))
	if err != nil {
		return err
	}
	if err := saveRows(tx, decideGroup(deciding, stored, now)); err != nil {
		return err
	}
	// Leases and holds first: an idempotent answer carries the lease it took.
	if err := execStmts(tx, afterDecisions(deciding, now)); err != nil {
		return err
	}
	return e.beforeCommitGorm(tx, jobs, now)
}

// plan expands every job (expand, with the overrides that apply at now) and chooses its shards,
// and lists the rows they need. A job whose definitions do not resolve gets its error and no rows.
func (e *Engine) plan(jobs []*job, defs map[defKey]Definition, ovs map[defKey]*algo.OverrideIndex, now int64) []rowKey {
	var wanted []rowKey
	for _, j := range jobs {
		var missing []defKey
		j.exp, missing, j.err = expand(j, defs, ovs, now, true)
		if j.err == nil && len(missing) > 0 { // the caller read every definition it could
			j.err = parentNotFound(missing[0].name)
		}
		if j.err != nil {
			continue
		}
		for x, r := range j.exp {
			e.ensurePicks(j, x, r.def.Shards, j.reqs[r.of])
			for _, s := range j.picks[x] {
				wanted = append(wanted, rowKey{r.tenantID, r.name, r.key, s})
			}
		}
	}
	return wanted
}

// parentNotFound is limit_not_found for a parent that has no stored definition.
func parentNotFound(name string) error {
	e := *ErrLimitNotFound
	e.Message = fmt.Sprintf("no such limit: %q, a parent of the limit decided", name)
	e.Err = ErrLimitNotFound
	return &e
}

// readParents reads the definitions of parents that jobs need and defs lacks, generation by
// generation (read reads one list of names), until every job's ancestors are known or known to
// be missing. asked holds every key read so far; it grows.
func readParents(jobs []*job, defs map[defKey]Definition, asked map[defKey]bool, read func([]defKey) (map[defKey]Definition, error)) error {
	for range algo.MaxParentDepth + 1 {
		if !anyParents(defs) { // the common case: no limit of the group has parents
			return nil
		}
		var want []defKey
		for _, j := range jobs {
			// Without overrides: they are read once every definition is, and a count over a
			// definition's capacity (which an override may raise) must not hide a missing parent.
			_, missing, err := expand(j, defs, nil, 0, false)
			if err != nil {
				continue
			}
			for _, k := range missing {
				if !asked[k] {
					asked[k] = true
					want = append(want, k)
				}
			}
		}
		if len(want) == 0 {
			return nil
		}
		more, err := read(want)
		if err != nil {
			return err
		}
		maps.Copy(defs, more)
	}
	return nil
}

func anyParents(defs map[defKey]Definition) bool {
	for _, d := range defs {
		if len(d.Parents) > 0 {
			return true
		}
	}
	return false
}

// ensurePicks keeps a limit's shard choice across retries unless the shard count changed. A
// hold's give-back takes the shards the hold took from (its charges), or, for a hold that
// recorded none, every shard (everyShard).
func (e *Engine) ensurePicks(j *job, x, shards int, req Request) {
	for len(j.picks) <= x {
		j.picks = append(j.picks, nil)
	}
	if t := req.giveBack; t != nil {
		j.picks[x] = t.Picks() // one that no longer exists reads as no row: nothing is owed to it
		return
	}
	every := everyShard(req)
	want := min(shards, 2)
	if every {
		want = shards
	}
	p := j.picks[x]
	if len(p) == want && maxIndex(p) < shards {
		return
	}
	if every {
		j.picks[x] = allShards(shards)
		return
	}
	j.picks[x] = e.pickShards(shards)
}

// everyShard reports whether req gives back to every shard of its limit rather than to the two
// a decision picks: what a hold made before holds recorded their charges returns on its settle,
// release or expiry. The hold took its amounts from shards that are not recorded, and other
// decisions and holds may since have moved the shard balance, so two random shards (or even the
// two it took from) may lack less than is owed: across every shard, what they lack includes all
// that the hold still has out, so for a limit that does not refill the whole amount is given back
// (holds_shards_test.go). A refill in between can make a bucket full first; then, as with any
// refund, nothing goes above the maximum.
func everyShard(req Request) bool { return req.Refund && req.hold && req.giveBack == nil }

func allShards(n int) []int {
	out := make([]int, max(n, 1))
	for i := range out {
		out[i] = i
	}
	return out
}

// decideGroup decides the jobs in arrival order and returns the rows to write.
func decideGroup(jobs []*job, stored map[rowKey]fullStateRow, now int64) map[rowKey]algo.State {
	overlay := map[rowKey]algo.State{}
	for _, j := range jobs {
		if j.err == nil {
			j.out, j.err = decideJob(j, stored, overlay, now)
		}
	}
	return overlay
}

func definitionKeys(jobs []*job) []defKey {
	seen := map[defKey]bool{}
	var keys []defKey
	for _, j := range jobs {
		for _, r := range j.reqs {
			if r.System { // an inline config in the system tenant's key space: no definition to read
				continue
			}
			k := defKey{j.tenantID, r.Name}
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// limitRef is one limit a job decides: one of its requests, or an ancestor that request spends.
type limitRef struct {
	tenantID  int64 // the job's tenant, or SystemTenant for a System request
	name, key string
	def       Definition     // with the numbers of ov, if any
	ov        *algo.Override // the override that applies to the key, if any
	of        int            // the request it belongs to
	parent    bool           // an ancestor, not the request itself
	// numbersUntil, on a hold's decision, is when an override's expiry may change the key's
	// numbers (algo.OverrideIndex.NumbersUntil), for what the hold records (algo.Taken.Until).
	numbersUntil int64
	after        afterOverride // under an override that sets numbers: what decides once it ends
}

// afterOverride is what decides a key after the override that sets its numbers now ends: a wait
// (retryAfter) those numbers put past that moment is not the key's wait, since a decision then
// reads the same state under whatever decides from then on (another override, an allow or a
// deny, the definition), and so on at each expiry after.
type afterOverride struct {
	ix  *algo.OverrideIndex // the limit's overrides; nil: none of key's expires
	key string
	def Definition // the stored definition
	at  int64      // the first expiry of an override that decides key (NumbersUntil)
}

// wait is the wait, in ms from now, of a decision out made under the override's numbers whose
// own wait ends after a.at, or refused by a deny that ends at a.at. Between each two expiries
// of the overrides that match the key, one of them (or the definition) decides: the key is
// admitted at the first moment one of those admits it, reading the state the decision left
// (states, or out's writes for a reservation it made: its work runs once they are out of debt,
// by the refill of the numbers in force). A penalty the refusal starts (out.PenaltyUntil) holds
// it off until its end but under an allow, which admits through penalties. A client retries at
// the whole ms it is told (Ceil), and an override has ended at its expiry.
func (a afterOverride) wait(states []algo.State, out algo.Outcome, count float64, reserve bool, now, origin int64) float64 {
	if out.OK {
		left := slices.Clone(states)
		for k, st := range out.Writes {
			if st.Exists {
				left[k] = st
			}
		}
		states, count, reserve = left, 0, false
	}
	moments := a.ix.Expiries(a.key, now)
	for i, m := range moments {
		admits := math.Inf(1) // when this stretch's rule admits the key, ms since the epoch
		// A reservation's debt is paid back by the refill whatever admits or refuses decisions
		// meanwhile: under an allow or a deny, the definition's numbers refill it.
		switch o := a.ix.Lookup(a.key, m); {
		case o != nil && o.Action == algo.ActionAllow && !out.OK:
			admits = float64(m)
		case o != nil && o.Action == algo.ActionDeny && !out.OK:
		default:
			def := a.def
			if o != nil && o.Action == algo.ActionNone {
				def = o.Apply(def)
			}
			then := algo.Decide(def, states, count, reserve, now, origin)
			switch {
			case then.OK:
				admits = math.Max(float64(m), float64(out.PenaltyUntil))
			case !math.IsNaN(then.RetryAfter):
				admits = math.Max(math.Max(float64(m), float64(now)+then.RetryAfter), float64(out.PenaltyUntil))
			}
		}
		if i == len(moments)-1 || math.Ceil(admits) < float64(moments[i+1]) {
			return admits - float64(now) // +Inf (never) is capped as every retryAfter is
		}
	}
	return float64(algo.MaxRetryAfter) // no override of key expires after now: not reached
}

// expand lists the limits a job decides: each request (its stored definition, or its inline
// config), followed by its ancestors breadth first, each parent's key filled from the request's
// attributes, each (name, key) once per request. With decide set, a stored limit's override for
// the key (ovs, at now) replaces its numbers and the count is checked against them; without it
// (readParents and the PostgreSQL path's guess only look for definitions and rows) neither is.
// missing lists the parents whose definitions defs lacks; the job's limits are complete only when
// it is empty.
func expand(j *job, defs map[defKey]Definition, ovs map[defKey]*algo.OverrideIndex, now int64, decide bool) (exp []limitRef, missing []defKey, err error) {
	// Every problem is one request's: its fields are named after the request's place in the
	// caller's body (Request.Field), whichever limit of its family found it.
	var at string
	defer func() { err = apperr.At(at, err) }()
	var totals batchTotals // what the job's requests put on each key together; nil for one request
	if decide {
		totals = newBatchTotals(j.reqs)
	}
	// resolve applies the key's override to a stored definition and checks the count against it.
	resolve := func(name, key string, d Definition, stored bool, req Request) (limitRef, error) {
		r := limitRef{tenantID: j.tenantID, name: name, key: key, def: d}
		if !decide {
			return r, nil
		}
		if stored {
			ix := ovs[defKey{j.tenantID, name}]
			if r.ov = ix.Lookup(key, now); r.ov != nil { // with none, no override's expiry matters
				r.def = r.ov.Apply(d)
				until := ix.NumbersUntil(key, now)
				if req.hold && !req.Refund {
					r.numbersUntil = until
				}
				switch {
				case r.ov.Action == algo.ActionNone && until > 0:
					r.after = afterOverride{ix: ix, key: key, def: d, at: until}
				case r.ov.Action == algo.ActionDeny && r.ov.ExpiresAt != nil:
					r.after = afterOverride{ix: ix, key: key, def: d, at: *r.ov.ExpiresAt}
				}
			}
		}
		if err := concurrencyMisuse(r.def, req); err != nil {
			return r, err
		}
		err := r.def.CheckCount(req.Count, req.Reserve)
		if (req.Refund || (r.ov != nil && r.ov.Action != algo.ActionNone)) && errors.Is(err, algo.ErrCountExceedsCapacity) {
			err = nil // refunds, allow and deny never weigh the count against the capacity
		}
		return r, err
	}
	for i, req := range j.reqs {
		at = req.Field
		if req.System {
			// Validated to carry an inline config and no parents; decided for the system tenant.
			self, err := resolve(req.Name, req.Key, req.Config.Normalized(), false, req)
			if err != nil {
				return nil, nil, fromAlgo(err)
			}
			self.tenantID, self.of = SystemTenant, i
			exp = append(exp, self)
			continue
		}
		d, ok := defs[defKey{j.tenantID, req.Name}]
		switch {
		case ok && req.Config != nil:
			return nil, nil, ErrDefinitionExists
		case ok:
		case req.Config != nil:
			d = req.Config.Normalized()
		case req.Field != "": // in a batch, say which item
			return nil, nil, ErrLimitNotFound.WithField("name")
		default:
			return nil, nil, ErrLimitNotFound
		}
		self, err := resolve(req.Name, req.Key, d, ok, req)
		if err == nil {
			err = totals.add(self, req)
		}
		if err != nil {
			return nil, nil, fromAlgo(err)
		}
		self.of = i
		exp = append(exp, self)
		if len(d.Parents) == 0 || req.giveBack != nil {
			continue
		}
		seen := map[[2]string]bool{{req.Name, req.Key}: true}
		level := []limitRef{exp[len(exp)-1]}
		for depth := 1; len(level) > 0; depth++ {
			var next []limitRef
			for _, child := range level {
				for _, p := range child.def.Parents {
					if depth > algo.MaxParentDepth { // stored graphs are checked; only a damaged one gets here
						return nil, nil, fromAlgo(&algo.ValidationError{Code: algo.CodeInvalidConfig, Fields: []FieldError{{Field: "parents",
							Message: fmt.Sprintf("limit %q has more than %d generations of parents", req.Name, algo.MaxParentDepth)}}})
					}
					key, err := algo.FillKey(child.name, p, req.Attributes)
					if err != nil {
						return nil, nil, fromAlgo(err)
					}
					if seen[[2]string{p.Name, key}] {
						continue
					}
					seen[[2]string{p.Name, key}] = true
					pd, ok := defs[defKey{j.tenantID, p.Name}]
					if !ok {
						missing = append(missing, defKey{j.tenantID, p.Name})
						continue
					}
					if pd.Kind == Concurrency {
						return nil, nil, concurrencyParent(p.Name)
					}
					r, err := resolve(p.Name, key, pd, true, req)
					if err == nil {
						err = totals.add(r, req)
					}
					if err != nil {
						return nil, nil, parentCountError(p.Name, err)
					}
					r.of, r.parent = i, true
					exp = append(exp, r)
					next = append(next, r)
				}
			}
			level = next
		}
	}
	return exp, missing, nil
}

// batchTotals adds up, in a job of several requests, what they put on each (tenant, limit, key),
// the request's own and each ancestor's (a parent's key gets each child's count), so that expand
// refuses with count_exceeds_capacity a job whose total on one key can never fit, as CheckCount
// refuses one count that cannot: otherwise such a batch (8 + 5 on a bucket of 10; two leases of
// a concurrency limit of rate 1) was refused for ever, each time with a finite retryAfter. The
// reading is the most lenient, so that no batch that could ever be admitted gets the 400: a
// total fits if CheckCount would admit it as one count, reserving if any of its requests
// reserves; a concurrency limit's requests take one slot each. Not counted: refunds and
// give-backs, a key an override allows (it counts nothing) or denies (refused anyway), a
// shadow-mode limit (it never refuses the job), and the system tenant's requests (a plan's,
// alone on its key). A check weighs its counts as a decision does, as it does a single count.
type batchTotals map[batchKey]*batchTotal

type batchKey struct {
	tenantID  int64
	name, key string
}

type batchTotal struct {
	def     Definition // the numbers of the key's first request
	count   float64    // what the requests put on the key; on a concurrency limit, the slots they take
	reserve bool       // one of them reserves
	mixed   bool       // inline configs of other numbers share the key: not added up
}

// newBatchTotals is the totals of a job of reqs, or nil (adding nothing, allocating nothing) when
// fewer than two of them are the tenant's own decisions: the common job of one request.
func newBatchTotals(reqs []Request) batchTotals {
	n := 0
	for _, r := range reqs {
		if !r.System && !r.Refund {
			n++
		}
	}
	if n < 2 {
		return nil
	}
	return batchTotals{}
}

// add counts what req puts on r's key (r is the request's own limit or one of its ancestors,
// resolved and its count checked alone) and returns count_exceeds_capacity when the key's total
// can no longer ever fit: the job's requests are decided in order at one instant, so the total
// must fit in what the key holds at once.
func (t batchTotals) add(r limitRef, req Request) error {
	// Not weighed either: a key whose override ends (its numbers change then, so what cannot fit
	// now may fit later).
	if t == nil || req.Refund || req.System || (r.ov != nil && (r.ov.Action != algo.ActionNone || r.ov.ExpiresAt != nil)) {
		return nil
	}
	k := batchKey{r.tenantID, r.name, r.key}
	tot := t[k]
	switch {
	case tot == nil:
		t[k] = &batchTotal{def: r.def, count: req.Count, reserve: req.Reserve}
		if r.def.Kind == Concurrency {
			t[k].count = 1
		}
		return nil
	case tot.mixed:
		return nil
	case algo.NumbersChanged(tot.def, r.def):
		// Only inline configs can differ (a stored limit has one definition and one override
		// per key): their requests read the key under other numbers, even another kind, and
		// what fits depends on their order. Not weighed.
		tot.mixed = true
		return nil
	case tot.def.IsShadow(): // every request on the key in shadow mode (a mode is one of the numbers)
		return nil
	}
	tot.reserve = tot.reserve || req.Reserve
	if tot.def.Kind == Concurrency {
		if tot.count++; tot.count > tot.def.Rate {
			return errBatchExceedsCapacity()
		}
		return nil
	}
	tot.count = algo.AddCounts(tot.def.Kind.Algorithm(), tot.count, req.Count) // a window's 0.1 + 0.2 is 0.3
	// A sharded limit is weighed whole (every shard, as if it had one): each request picks its
	// own two shards, so requests whose total is more than two shards hold may yet fit in shards
	// that differ, and only more than all of them hold can never fit.
	whole := tot.def
	whole.Shards = 1
	if tot.count > algo.MaxAmount {
		// Past what CheckCount takes as a count. Without a reservation no key holds more than
		// its maximum, itself at most MaxAmount; with one, the total is not weighed (lenient).
		if !tot.reserve {
			return errBatchExceedsCapacity()
		}
		return nil
	}
	if errors.Is(whole.CheckCount(tot.count, tot.reserve), algo.ErrCountExceedsCapacity) {
		return errBatchExceedsCapacity()
	}
	return nil
}

// errBatchExceedsCapacity is count_exceeds_capacity (errors.Is finds ErrCountExceedsCapacity) for
// the request whose count makes its batch's total on one key more than the limit can ever admit.
func errBatchExceedsCapacity() error {
	c := *ErrCountExceedsCapacity
	c.Message = "with what the batch's earlier items put on the same key, this item needs more than the limit can ever admit at once"
	c.Err = ErrCountExceedsCapacity
	return &c
}

// setUsedShards records on dec what the shards the outcome d used mean for the headers and the
// hooks: on a sharded limit, the most they hold (usedMax, against which Remaining is theirs), and
// when they are whole again (fullIn) for the kinds whose time to full is not an unsharded token
// bucket's (max - remaining) * period / rate: windows, concurrency slots, any sharded limit.
func setUsedShards(dec *Decision, def Definition, states []algo.State, d algo.Outcome, now, origin int64) {
	n := def.Normalized().Shards
	if def.Kind.Algorithm() == TokenBucket && n <= 1 {
		return // the headers' arithmetic is exact, and this is the hot path's kind
	}
	if n > 1 && d.Used > 0 {
		dec.usedMax = def.Max() / float64(n) * float64(d.Used)
	}
	if def.Kind == Quota || (!d.OK && !math.IsNaN(d.RetryAfter) && !def.IsShadow()) {
		return // the headers take t from the quota's window, or from the refusal's retryAfter
	}
	dec.fullIn, dec.fullSet = algo.FullIn(def, states, d, now, origin), true
}

// setTaken records on the decision of r in res (the request's own, or its ancestor's among
// Parents, just placed) what a hold's request took from each shard of picks (outcome d on states).
func setTaken(res *Decision, r limitRef, def Definition, states []algo.State, picks []int, d algo.Outcome, now, origin int64) {
	dec := res
	if r.parent {
		dec = &res.Parents[len(res.Parents)-1]
	}
	t := &algo.Taken{Kind: def.Kind, At: now, Shards: algo.TakeOf(def, states, picks, d, now, origin), Until: r.numbersUntil}
	t.Refill, t.Max = algo.ShardNumbers(def)
	dec.taken = t
}

// quotaWindow is a quota decision's calendar window at now: the outcome's (start, end), or the
// definition's where the outcome carries none (a penalty's refusal, an allow or a deny); nil for
// the other kinds.
func quotaWindow(def Definition, start, end, now int64) *QuotaWindow {
	if def.Kind != Quota {
		return nil
	}
	if end == 0 {
		start, end = def.WindowAt(now)
	}
	return &QuotaWindow{Start: start, End: end, Now: now}
}

// parentCountError names the parent in a request's count or reserve problem.
func parentCountError(parent string, err error) error {
	e := apperr.From(fromAlgo(err))
	c := *e
	c.Message = fmt.Sprintf("parent %q: %s", parent, e.Message)
	c.Err = e
	return &c
}

// decideJob decides one job, its limits and their ancestors (j.exp), against the rows as the jobs
// before it in the group left them. Its writes join the overlay only if every one of its enforced
// limits and their ancestors allowed (all or nothing) and it consumes. A shadow-mode limit is
// decided and written exactly as an enforced one (a would-be refusal writes nothing for it) but
// never refuses the job: its would-be outcome is reported in Decision.Shadow. A refusal that
// starts a penalty writes its penalty end whatever the job's outcome (the one write a refusal
// makes, DESIGN §3.4's documented exception).
func decideJob(j *job, stored map[rowKey]fullStateRow, overlay map[rowKey]algo.State, now int64) (BatchDecision, error) {
	out := BatchDecision{OK: true, Results: make([]Decision, len(j.reqs))}
	local := map[rowKey]algo.State{}
	type penalty struct {
		def           Definition
		origin, until int64
	}
	var penalties map[rowKey]penalty
	place := func(r limitRef, dec Decision) {
		dec.refused = !dec.OK // before familyOutcome makes OK the family's
		if r.ov != nil {
			dec.Override = r.ov.Match
		}
		dec.system = j.reqs[r.of].System
		if r.parent {
			out.Results[r.of].Parents = append(out.Results[r.of].Parents, dec)
		} else {
			out.Results[r.of] = dec
		}
	}
	for x, r := range j.exp {
		def := r.def
		if req := j.reqs[r.of]; req.Refund {
			dec := Decision{Name: r.name, Key: r.key, OK: true, Definition: def, refund: true}
			states := j.statesOf(x, r, stored, overlay, local)
			origin := algo.Origin(def, r.tenantID, r.name, r.key)
			// A key an override allows or denies counted nothing to give back, unless this is a
			// hold's: it took its amount when it was made, whatever overrides came since (given
			// back never above the limit's maximum, as every refund). A refund of 0 gives nothing
			// and writes nothing, and its remaining is still what the key holds.
			count := req.Count
			if r.ov != nil && r.ov.Action != algo.ActionNone && !req.hold {
				count = 0
			}
			var o algo.Outcome
			var given float64
			if t := req.giveBack; t != nil { // a hold's (never under the branch above)
				o, dec.givenShards = t.GiveBack(def, states, req.Count, now, origin, req.givenSince)
				for _, g := range dec.givenShards {
					given += g
				}
			} else {
				o, given = algo.Refund(def, states, count, now, origin)
			}
			dec.Remaining, dec.Refunded = o.Remaining, given
			for k, w := range o.Writes {
				if w.Exists {
					local[rowKey{r.tenantID, r.name, r.key, j.picks[x][k]}] = w
				}
			}
			place(r, dec)
			continue
		}
		if r.ov != nil && r.ov.Action == algo.ActionDeny {
			// Refused until the override expires, and then as what decides from then on (another
			// deny, the definition over the key's state, ...): nothing written. A shadow limit
			// reports the refusal it would make.
			ra := r.ov.DenyRetryAfter(now)
			if r.after.ix != nil {
				req := j.reqs[r.of]
				states := j.statesOf(x, r, stored, overlay, local)
				ra = algo.RetryAfterMillis(r.after.wait(states, algo.Outcome{}, req.Count, req.Reserve, now, algo.Origin(def, r.tenantID, r.name, r.key)))
			}
			dec := Decision{Name: r.name, Key: r.key, RetryAfter: &ra, Definition: def, denied: true, Window: quotaWindow(def, 0, 0, now)}
			if def.IsShadow() {
				dec.OK, dec.RetryAfter, dec.Shadow = true, nil, &ShadowOutcome{OK: false, RetryAfter: &ra}
			} else {
				out.OK = false
			}
			place(r, dec)
			continue
		}
		origin := algo.Origin(def, r.tenantID, r.name, r.key)
		states := j.statesOf(x, r, stored, overlay, local)
		req := j.reqs[r.of]
		if r.ov != nil && r.ov.Action == algo.ActionAllow {
			// Admitted without counting: nothing is written; remaining is the key's balance as it stands.
			d := algo.Decide(def, states, 0, false, now, origin)
			if def.Kind == Concurrency && d.OK {
				// A concurrency limit's decision takes a slot whatever the count, or is refused
				// when none is free: the allowed key takes none, and its headers read the leases
				// in flight as they stand, not the one never made nor a refusal's wait.
				d.Remaining++
			}
			// Nothing is written and nothing refused: the headers' time to full is the stored
			// states' (a probe of 0 refused below zero, or a running penalty, has no wait to give).
			d.OK, d.Writes, d.RetryAfter = false, nil, math.NaN()
			dec := Decision{Name: r.name, Key: r.key, OK: true, Remaining: d.Remaining, Definition: def, Window: quotaWindow(def, d.WindowStart, d.WindowEnd, now)}
			setUsedShards(&dec, def, states, d, now, origin)
			place(r, dec)
			continue
		}
		d := algo.Decide(def, states, req.Count, req.Reserve, now, origin)
		// The client retries at the whole ms it is told, and an override has ended at its expiry.
		if r.after.at > 0 && !math.IsNaN(d.RetryAfter) && now+algo.RetryAfterMillis(d.RetryAfter) >= r.after.at {
			d.RetryAfter = r.after.wait(states, d, req.Count, req.Reserve, now, origin)
		}
		var retryAfter *int64
		if !math.IsNaN(d.RetryAfter) {
			ra := algo.RetryAfterMillis(d.RetryAfter)
			retryAfter = &ra
		}
		dec := Decision{Name: r.name, Key: r.key, OK: d.OK, RetryAfter: retryAfter, Remaining: d.Remaining, Definition: def}
		dec.leaseSlot = d.OK && def.Kind == Concurrency // a lease to hand out if the job's writes are kept (leases.go)
		setUsedShards(&dec, def, states, d, now, origin)
		dec.Window = quotaWindow(def, d.WindowStart, d.WindowEnd, now)
		if def.IsShadow() {
			dec.OK, dec.RetryAfter, dec.Shadow = true, nil, &ShadowOutcome{OK: d.OK, RetryAfter: retryAfter}
		}
		place(r, dec)
		if d.PenaltyUntil != 0 && j.consume {
			if penalties == nil {
				penalties = map[rowKey]penalty{}
			}
			for _, s := range j.picks[x] {
				penalties[rowKey{r.tenantID, r.name, r.key, s}] = penalty{def, origin, d.PenaltyUntil}
			}
		}
		if !d.OK {
			if !def.IsShadow() {
				out.OK = false
			}
			continue
		}
		for k, w := range d.Writes {
			if w.Exists {
				local[rowKey{r.tenantID, r.name, r.key, j.picks[x][k]}] = w
			}
		}
		if req.hold {
			setTaken(&out.Results[r.of], r, def, states, j.picks[x], d, now, origin)
		}
	}
	if (j.consume && !out.OK) || j.refused {
		j.asItStands(out.Results, stored, overlay, now)
	}
	for i := range out.Results {
		familyOutcome(&out.Results[i])
	}
	if j.consume && out.OK {
		for k, st := range local {
			overlay[k] = st
		}
	}
	// Penalties go on top of whatever the job left: the refused limit's own state is not consumed.
	for rk, p := range penalties {
		st, ok := overlay[rk]
		if !ok {
			st = stored[rk].state(p.def)
		}
		overlay[rk] = algo.WithPenalty(p.def, st, now, p.origin, p.until)
	}
	return out, nil
}

// asItStands corrects, in a job refused as a whole (it writes nothing), the remaining of each of
// its limits: decided in turn, each saw what the job's earlier requests would have taken, and an
// admitted one what it would have left itself. Each now reports its balance as it stands, the
// balance the next decision meets: its own decision again on the states as stored, with what it
// would take added back when it fits. Whether each fitted and a refusal's retryAfter stay the
// first pass's (the batch fits when all its requests fit together); a reservation that was never
// made has no retryAfter.
func (j *job) asItStands(results []Decision, stored map[rowKey]fullStateRow, overlay map[rowKey]algo.State, now int64) {
	ancestors := make([]int, len(results)) // of each request, placed so far: decideJob appends them in exp's order
	for x, r := range j.exp {
		dec := &results[r.of]
		if r.parent {
			dec = &dec.Parents[ancestors[r.of]]
			ancestors[r.of]++
		}
		req := j.reqs[r.of]
		if dec.refund || req.Refund || dec.denied {
			continue // a refund is no decision, and a deny read no balance
		}
		states := j.statesOf(x, r, stored, overlay, nil)
		origin := algo.Origin(r.def, r.tenantID, r.name, r.key)
		count := req.Count
		if r.ov != nil && r.ov.Action == algo.ActionAllow {
			count = 0 // an allowed key counts nothing
		}
		d := algo.Decide(r.def, states, count, req.Reserve && count > 0, now, origin)
		if d.OK {
			taken := count
			if r.def.Kind == Concurrency {
				taken = 1 // a lease's slot
			}
			d.Remaining += taken
		}
		dec.Remaining = d.Remaining
		// Nothing is written: the headers' time to full is the stored states' (a refusal's is
		// its retryAfter, which stays).
		view := d
		view.OK, view.Writes, view.RetryAfter = false, nil, 0
		if dec.OK {
			dec.RetryAfter, view.RetryAfter = nil, math.NaN()
		}
		setUsedShards(dec, r.def, states, view, now, origin)
	}
}

// familyOutcome makes a decision with parents the whole family's: allowed only if the limit and
// every ancestor allowed; retryAfter the largest among the refusals (or, when allowed, among the
// reservations).
func familyOutcome(d *Decision) {
	if len(d.Parents) == 0 {
		return
	}
	d.ownRetryAfter = d.RetryAfter
	for _, p := range d.Parents {
		d.OK = d.OK && p.OK
	}
	var ra *int64
	var from *retrySource
	consider := func(x Decision, parent bool) {
		if x.RetryAfter != nil && (d.OK || !x.OK) && (ra == nil || *x.RetryAfter > *ra) {
			v := *x.RetryAfter
			ra, from = &v, nil
			if parent {
				from = &retrySource{jitter: x.Definition.Jitter, denied: x.denied}
			}
		}
	}
	consider(*d, false)
	for _, p := range d.Parents {
		consider(p, true)
	}
	d.RetryAfter, d.retryFrom = ra, from
}

// retrySource is how the decision a family's retryAfter came from jitters (Engine.settle).
type retrySource struct {
	jitter int64
	denied bool
}

// statesOf reads the shards the job's x-th limit uses as the job and the jobs before it left them.
func (j *job) statesOf(x int, r limitRef, stored map[rowKey]fullStateRow, overlay, local map[rowKey]algo.State) []algo.State {
	states := make([]algo.State, len(j.picks[x]))
	for k, s := range j.picks[x] {
		rk := rowKey{r.tenantID, r.name, r.key, s}
		if st, ok := local[rk]; ok {
			states[k] = st
		} else if st, ok := overlay[rk]; ok {
			states[k] = st
		} else {
			states[k] = stored[rk].state(r.def)
		}
	}
	return states
}
