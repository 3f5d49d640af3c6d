package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// keysInLanes returns two keys of limit name (tenant 1) that e places in different lanes.
func keysInLanes(t *testing.T, e *Engine, name string) (string, string) {
	t.Helper()
	first := e.laneOf(newJob(1, true, Request{Name: name, Key: "k0"}))
	for i := 1; i < 1000; i++ {
		k := fmt.Sprintf("k%d", i)
		if e.laneOf(newJob(1, true, Request{Name: name, Key: k})) != first {
			return "k0", k
		}
	}
	t.Fatal("1,000 keys all fell in one lane")
	return "", ""
}

// holdFirstGroup makes the first group of e that reaches its commit wait there until release is
// closed; entered is closed when it does.
func holdFirstGroup(e *Engine) (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var armed atomic.Bool
	armed.Store(true)
	e.afterDecide = func() {
		if armed.CompareAndSwap(true, false) {
			close(entered)
			<-release
		}
	}
	return entered, release
}

// TestTwoLanesDecideWhileTheOtherIsInFlight: on PostgreSQL a decision on a key of the other lane
// is decided and committed while a group of the first lane is still open (two groups in flight);
// both are exact.
func TestTwoLanesDecideWhileTheOtherIsInFlight(t *testing.T) {
	d := testkit.Open(t, db.Postgres)
	ctx := context.Background()
	e := NewEngine(d, Options{Lanes: 2})
	if _, _, err := e.PutDefinition(ctx, 1, "q", Definition{Kind: TokenBucket, Rate: 10, Period: 3_600_000}, nil); err != nil {
		t.Fatal(err)
	}
	entered, release := holdFirstGroup(e)
	testkit.Run(t, e.Run)
	held, other := keysInLanes(t, e, "q")
	first := make(chan error, 1)
	go func() {
		_, err := e.Limit(ctx, 1, Request{Name: "q", Key: held, Count: 1})
		first <- err
	}()
	await(t, entered, "the first lane's group to reach its commit")
	second := make(chan error, 1)
	go func() {
		got, err := e.Limit(ctx, 1, Request{Name: "q", Key: other, Count: 2})
		if err == nil && !got.OK {
			err = errors.New("refused")
		}
		second <- err
	}()
	if err := await(t, second, "the other lane's decision while the first lane's group is open"); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := await(t, first, "the held group's decision"); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]float64{held: 9, other: 8} {
		// The database's clock refills 10 an hour: a few thousandths over the test's seconds.
		if v, err := e.GetValue(ctx, 1, "q", key); err != nil || v.Value < want || v.Value > want+0.01 {
			t.Fatalf("%s: value %v (%v), want %v", key, v.Value, err, want)
		}
	}
}

// TestAQueuedDecisionWhoseCallerLeftIsNotDecided: a caller whose context ends while its decision
// waits behind a group in progress gets ErrUnavailable, and nothing is consumed for it.
func TestAQueuedDecisionWhoseCallerLeftIsNotDecided(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		e := NewEngine(d, Options{Lanes: 1})
		if _, _, err := e.PutDefinition(ctx, 1, "q", Definition{Kind: TokenBucket, Rate: 10, Period: 3_600_000}, nil); err != nil {
			t.Fatal(err)
		}
		entered, release := holdFirstGroup(e)
		testkit.Run(t, e.Run)
		first := make(chan error, 1)
		go func() {
			_, err := e.Limit(ctx, 1, Request{Name: "q", Key: "k", Count: 1})
			first <- err
		}()
		await(t, entered, "the first group to reach its commit")
		leaving, leave := context.WithCancel(ctx)
		left := make(chan error, 1)
		go func() {
			_, err := e.Limit(leaving, 1, Request{Name: "q", Key: "k", Count: 5})
			left <- err
		}()
		for deadline := time.Now().Add(30 * time.Second); e.Queued() != 1; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("waited 30 s for the second decision to queue")
			}
		}
		leave()
		if err := await(t, left, "the abandoned decision's caller to return"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("abandoned decision: %v, want ErrUnavailable", err)
		}
		close(release)
		if err := await(t, first, "the held group's decision"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Limit(ctx, 1, Request{Name: "q", Key: "k", Count: 1}); err != nil {
			t.Fatal(err)
		}
		if v, err := e.GetValue(ctx, 1, "q", "k"); err != nil || v.Value < 8 || v.Value > 8.01 {
			t.Fatalf("value %v (%v), want 8: the abandoned 5 must not be consumed", v.Value, err)
		}
	})
}

// TestLanesKeepAKeyAndATenantsPlanTogether: every decision on one key goes to one lane (so a hot
// key's decisions are coalesced, never in flight against each other), and so does every
// decision that carries its tenant's plan, whose one row they all write.
func TestLanesKeepAKeyAndATenantsPlanTogether(t *testing.T) {
	e := NewEngine(testkit.Open(t, db.Postgres), Options{Lanes: 8})
	a, b := keysInLanes(t, e, "q")
	if e.laneOf(newJob(1, true, Request{Name: "q", Key: a})) != e.laneOf(newJob(1, true, Request{Name: "q", Key: a, Count: 3})) {
		t.Fatal("one key in two lanes")
	}
	plan := PlanRequest(1, 100, 1)
	if e.laneOf(newJob(1, true, Request{Name: "q", Key: a}, *plan)) != e.laneOf(newJob(1, true, Request{Name: "q", Key: b}, *plan)) {
		t.Fatal("one tenant's plan in two lanes")
	}
	if got := len(NewEngine(testkit.Open(t, db.SQLite), Options{Lanes: 8}).lanes); got != 1 {
		t.Fatalf("SQLite engine has %d lanes, want 1 (one writer)", got)
	}
}

// TestAJobHeldBackAgainKeepsItsPlace: a ready job that another away group holds back before a
// group takes it goes back among the held jobs in its place by arrival, before one held since,
// so that it is still decided first when that group ends.
func TestAJobHeldBackAgainKeepsItsPlace(t *testing.T) {
	var l lane
	early, later := newJob(1, true, Request{Name: "q", Key: "k"}), newJob(1, true, Request{Name: "q", Key: "k"})
	early.queuedAt, later.queuedAt = time.UnixMilli(1_000), time.UnixMilli(2_000)
	l.goAway(later.rowKeys()) // another group on k went away after early was made ready
	l.held, l.ready = []*job{later}, []*job{early}
	l.readyN.Store(1)
	if got := l.takeReady(64); len(got) != 0 {
		t.Fatalf("took %d jobs held back by an away group", len(got))
	}
	if len(l.held) != 2 || l.held[0] != early || l.held[1] != later || l.readyN.Load() != 0 {
		t.Fatalf("held %v (ready %d), want the earlier job first", l.held, l.readyN.Load())
	}
}

// TestAGroupGivingItsTurnAwayWakesTheWorkerForReadyJobs: ready jobs a group had no room for
// (more than one group takes) are decided while it is away: giving the turn away wakes the lane's
// worker for them, which nothing else would until the group ends.
func TestAGroupGivingItsTurnAwayWakesTheWorkerForReadyJobs(t *testing.T) {
	l := &lane{token: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
	l.makeReady(newJob(1, true, Request{Name: "q", Key: "side"}))
	tn := turn{e: &Engine{}, l: l}
	tn.giveAway()
	select {
	case <-l.wake:
	default:
		t.Fatal("the turn was given away with a job ready and no wake for the worker")
	}
	<-l.token
	tn.end()
}

// TestSplitByRowsKeepsJobsThatShareARowTogether: a group that spent its attempts is tried again
// in parts that share no state row, run at once (runParts): jobs of one key stay together, and so
// do jobs under one parent, jobs on one plan's row and the keys of one batch, which apart would
// fight each other for the row; two keys of one tenant are apart. Parts are in order of their
// first job, each in arrival order.
func TestSplitByRowsKeepsJobsThatShareARowTogether(t *testing.T) {
	q := func(tenantID int64, reqs ...Request) *job { return newJob(tenantID, true, reqs...) }
	a1, b, a2, c := q(1, Request{Name: "q", Key: "a"}), q(2, Request{Name: "q", Key: "b"}), q(1, Request{Name: "q", Key: "a"}), q(1, Request{Name: "q", Key: "c"})
	wantParts(t, "one key's jobs", splitByRows([]*job{a1, b, a2, c}), [][]*job{{a1, a2}, {b}, {c}})

	u0, u1, other := q(1, Request{Name: "user", Key: "u0"}), q(1, Request{Name: "user", Key: "u1"}), q(1, Request{Name: "user", Key: "u2"})
	for _, j := range []*job{u0, u1} { // their plans (expand): each request, then the parent o
		j.exp = []limitRef{{tenantID: 1, name: "user", key: j.reqs[0].Key}, {tenantID: 1, name: "org", key: "o", parent: true}}
	}
	wantParts(t, "keys under one parent", splitByRows([]*job{u0, other, u1}), [][]*job{{u0, u1}, {other}})

	p1, p2 := q(1, Request{Name: "q", Key: "x"}, Request{Name: "plan", Key: "p", System: true}), q(2, Request{Name: "q", Key: "y"}, Request{Name: "plan", Key: "p", System: true})
	wantParts(t, "one plan's row", splitByRows([]*job{p1, b, p2}), [][]*job{{p1, p2}, {b}})

	batch := q(1, Request{Name: "q", Key: "c"}, Request{Name: "q", Key: "a"})
	wantParts(t, "a batch of two keys", splitByRows([]*job{a1, b, c, batch}), [][]*job{{a1, c, batch}, {b}})
}

func wantParts(t *testing.T, what string, got, want [][]*job) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = len(got[i]) == len(want[i])
		for k := 0; ok && k < len(want[i]); k++ {
			ok = got[i][k] == want[i][k]
		}
	}
	if !ok {
		t.Fatalf("%s: parts %v, want %v", what, got, want)
	}
}

// TestReleasingSomeOfAnAwayGroupKeepsTheRest: a spent group's parts release their keys one part
// at a time; releasing the jobs in no part (none, here) releases nothing, and a part releases
// only its own. The first version took "no jobs" for "every job", so a group split with nothing
// answered before its parts let later decisions on the contended key past the hold.
func TestReleasingSomeOfAnAwayGroupKeepsTheRest(t *testing.T) {
	l := &lane{token: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
	a, b := newJob(1, true, Request{Name: "q", Key: "a"}), newJob(2, true, Request{Name: "q", Key: "b"})
	tn := turn{e: &Engine{}, l: l, group: []*job{a, b}}
	tn.giveAway()
	<-l.token
	away := func(j *job) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.away[j.rowKeys()[0]] > 0
	}
	inParts := among([]*job{a, b})
	tn.releaseSome(func(j *job) bool { return !inParts(j) }) // nothing was answered before the parts
	if !away(a) || !away(b) {
		t.Fatalf("after releasing the jobs in no part (none): a held %v, b held %v; want both", away(a), away(b))
	}
	tn.releaseSome(among([]*job{b}))
	if !away(a) || away(b) {
		t.Fatalf("after b's part ended: a held %v, b held %v; want a only", away(a), away(b))
	}
	tn.end()
	if away(a) || l.awayN.Load() != 0 {
		t.Fatalf("after the group ended: a held %v, %d groups away; want none", away(a), l.awayN.Load())
	}
}
