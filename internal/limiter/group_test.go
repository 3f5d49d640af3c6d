package limiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// newEngine returns an engine on d whose group-commit worker runs until the test ends.
func newEngine(t testing.TB, d *db.DB, opts Options) *Engine {
	t.Helper()
	e := NewEngine(d, opts)
	testkit.Run(t, e.Run)
	return e
}

// await fails t unless ch is closed (or receives) within 30 s.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return testkit.Await(t, ch, what)
}

func ptr[T any](v T) *T { return &v }

func newJob(tenantID int64, consume bool, reqs ...Request) *job {
	return &job{tenantID: tenantID, reqs: reqs, consume: consume, picks: make([][]int, len(reqs)), done: make(chan struct{})}
}

// TestGroupDecidesJobsInArrivalOrderEachAllOrNothing runs one group by hand: consumption by an
// earlier job is seen by a later one, a refused batch in the middle writes nothing, a job whose
// limit does not exist fails alone, and a check in the group consumes nothing.
func TestGroupDecidesJobsInArrivalOrderEachAllOrNothing(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		e := NewEngine(d, Options{Now: func() time.Time { return time.UnixMilli(1_700_000_000_000) }})
		for name, rate := range map[string]float64{"a": 10, "b": 3} {
			if _, _, err := e.PutDefinition(ctx, 1, name, Definition{Kind: TokenBucket, Rate: rate, Period: 3_600_000}, nil); err != nil {
				t.Fatal(err)
			}
		}
		jobs := []*job{
			newJob(1, true, Request{Name: "a", Key: "k", Count: 4}),
			newJob(1, true, Request{Name: "b", Key: "k", Count: 2}),
			newJob(1, true, Request{Name: "a", Key: "k", Count: 3}, Request{Name: "b", Key: "k", Count: 2}), // b refuses
			newJob(1, false, Request{Name: "a", Key: "k", Count: 6}),                                        // a check
			newJob(1, true, Request{Name: "missing", Key: "k", Count: 1}),
			newJob(1, true, Request{Name: "a", Key: "k", Count: 6}),
			newJob(1, true, Request{Name: "a", Key: "k", Count: 1}), // nothing left
			newJob(2, true, Request{Name: "a", Key: "k", Count: 1}), // another tenant: no such limit
		}
		e.runGroup(nil, jobs)
		want := []struct {
			ok        bool
			remaining float64
			err       error
		}{{true, 6, nil}, {true, 1, nil}, {false, 0, nil}, {true, 0, nil}, {false, 0, ErrLimitNotFound}, {true, 0, nil}, {false, 0, nil}, {false, 0, ErrLimitNotFound}}
		for i, j := range jobs {
			if want[i].err != nil {
				if !errors.Is(j.err, want[i].err) {
					t.Errorf("job %d: err %v, want %v", i, j.err, want[i].err)
				}
				continue
			}
			if j.err != nil || j.out.OK != want[i].ok || (want[i].ok && j.out.Results[0].Remaining != want[i].remaining) {
				t.Errorf("job %d: %+v err %v, want ok=%v remaining=%v", i, j.out, j.err, want[i].ok, want[i].remaining)
			}
		}
		if v, _ := e.GetValue(ctx, 1, "b", "k"); v.Value != 1 {
			t.Fatalf("the refused batch consumed b: %v", v.Value)
		}
		if v, _ := e.GetValue(ctx, 1, "a", "k"); v.Value != 0 {
			t.Fatalf("a = %v, want 0 (4 + 6 consumed)", v.Value)
		}
	})
}

// TestConcurrentDecisionsOnOneKeyAreCoalescedAndExact sends many concurrent decisions on one hot
// key through one worker: they share transactions (fewer groups than decisions), and exactly the
// capacity is admitted — no more, no less — with no retries needed inside the process.
func TestConcurrentDecisionsOnOneKeyAreCoalescedAndExact(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		e := newEngine(t, d, Options{MaxGroup: 64})
		if _, _, err := e.PutDefinition(ctx, 1, "hot", Definition{Kind: FixedWindow, Rate: 100, Period: 3_600_000, Start: ptr(int64(0))}, nil); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		admitted := 0
		var wg sync.WaitGroup
		for range 48 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					got, err := e.Limit(ctx, 1, Request{Name: "hot", Key: "k", Count: 1})
					if err != nil {
						t.Error(err)
						return
					}
					if got.OK {
						mu.Lock()
						admitted++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		st := e.GroupStats()
		groups, jobs := st.Groups, st.Jobs
		if admitted != 100 {
			t.Fatalf("admitted %d of a window holding exactly 100", admitted)
		}
		if groups >= jobs {
			t.Fatalf("%d groups for %d decisions: nothing was coalesced", groups, jobs)
		}
		if d.Retries() != 0 {
			t.Fatalf("%d retries: one worker's groups should never conflict with each other", d.Retries())
		}
		t.Logf("%d decisions in %d group transactions (%.1f per transaction)", jobs, groups, float64(jobs)/float64(groups))
	})
}

// TestStaleShardHintFetchesTheRowsItMissed changes a limit's shard count on one engine while the
// other remembers the old count: the decision must use the definition read in its transaction.
func TestStaleShardHintFetchesTheRowsItMissed(t *testing.T) {
	d := testkit.Open(t, db.Postgres)
	ctx := context.Background()
	frozen := Options{Now: func() time.Time { return time.UnixMilli(1_700_000_000_000) }}
	a, b := newEngine(t, d, frozen), newEngine(t, d, frozen)
	if _, _, err := a.PutDefinition(ctx, 1, "s", Definition{Kind: TokenBucket, Rate: 40, Period: 3_600_000}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Limit(ctx, 1, Request{Name: "s", Key: "k", Count: 1}); err != nil { // a learns shards = 1
		t.Fatal(err)
	}
	if _, _, err := b.PutDefinition(ctx, 1, "s", Definition{Kind: TokenBucket, Rate: 40, Period: 3_600_000, Shards: 4}, nil); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range 60 {
		got, err := a.Limit(ctx, 1, Request{Name: "s", Key: "k", Count: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got.OK {
			admitted++
		}
	}
	v, err := a.GetValue(ctx, 1, "s", "k")
	if err != nil {
		t.Fatal(err)
	}
	// The shard change dropped the old state: 40 tokens over 4 shards of 10. The two-choice
	// picks may refuse before every shard is empty, but never admit more than 40.
	if admitted > 40 || admitted < 30 || len(v.Shards) != 4 || v.Value != float64(40-admitted) {
		t.Fatalf("admitted %d; value %v over %d shards", admitted, v.Value, len(v.Shards))
	}
}

// TestRunFinishesItsDecisionsAndFailsClosedOnceStopped: decisions made while Run runs all
// succeed; once Run has returned, a decision fails closed at once, even with a context that never
// ends, instead of hanging or running without the worker.
func TestRunFinishesItsDecisionsAndFailsClosedOnceStopped(t *testing.T) {
	d := testkit.Open(t, db.SQLite)
	ctx := context.Background()
	e := NewEngine(d, Options{Now: func() time.Time { return time.UnixMilli(1_700_000_000_000) }})
	if _, _, err := e.PutDefinition(ctx, 1, "c", Definition{Kind: TokenBucket, Rate: 1000, Period: 3_600_000}, nil); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- e.Run(runCtx) }()
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.Limit(ctx, 1, Request{Name: "c", Key: "k", Count: 1}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	stop()
	if err := await(t, ran, "Run to return after its context ended"); err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	after := make(chan error, 1)
	go func() {
		_, err := e.Limit(ctx, 1, Request{Name: "c", Key: "k", Count: 1})
		after <- err
	}()
	if err := await(t, after, "a decision after Run stopped to fail closed"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("after Run stopped: %v, want ErrUnavailable", err)
	}
	if v, _ := e.GetValue(ctx, 1, "c", "k"); v.Value != 1000-50 {
		t.Fatalf("value %v, want %d", v.Value, 1000-50)
	}
	if err := e.Run(ctx); err == nil {
		t.Fatal("a second Run was accepted")
	}
}

// TestRunFinishesTheGroupInProgressAndRefusesWhatIsQueued stops Run while a lane's leader is
// inside a group and two more decisions wait in the lane (queued by nobody who would lead it): the group in progress completes, the queued
// decisions fail closed with ErrUnavailable (they never hang), and Run returns.
func TestRunFinishesTheGroupInProgressAndRefusesWhatIsQueued(t *testing.T) {
	d := testkit.Open(t, db.SQLite)
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	var armed atomic.Bool
	e := NewEngine(d, Options{Now: func() time.Time {
		if armed.CompareAndSwap(true, false) { // the first group's clock reading: hold the worker there
			close(entered)
			<-release
		}
		return time.UnixMilli(1_700_000_000_000)
	}})
	if _, _, err := e.PutDefinition(ctx, 1, "q", Definition{Kind: TokenBucket, Rate: 10, Period: 3_600_000}, nil); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- e.Run(runCtx) }()
	armed.Store(true)
	first := make(chan error, 1)
	go func() {
		got, err := e.Limit(ctx, 1, Request{Name: "q", Key: "k", Count: 1})
		if err == nil && !got.OK {
			err = errors.New("refused")
		}
		first <- err
	}()
	await(t, entered, "the worker to begin the first group")
	queued := []*job{newJob(1, true, Request{Name: "q", Key: "k", Count: 1}), newJob(1, false, Request{Name: "q", Key: "k", Count: 1})}
	for _, j := range queued {
		e.laneOf(j).queue <- j
	}
	stop()
	close(release)
	if err := await(t, ran, "Run to return after its context ended"); err != nil {
		t.Fatal(err)
	}
	if err := await(t, first, "the decision of the group in progress"); err != nil {
		t.Fatalf("the group in progress: %v", err)
	}
	for i, j := range queued {
		await(t, j.done, fmt.Sprintf("queued decision %d to be refused", i))
		if !errors.Is(j.err, ErrUnavailable) {
			t.Fatalf("queued decision %d: %v, want ErrUnavailable", i, j.err)
		}
	}
	if v, _ := e.GetValue(ctx, 1, "q", "k"); v.Value != 9 {
		t.Fatalf("value %v, want 9: only the group in progress consumed", v.Value)
	}
}

// TestFastCommitIsAskedForInTheGroupsFirstRoundTrip: SLUICE_COMMIT=fast sets
// synchronous_commit off for the decision transaction only (set_config's is_local, inside it),
// in the same round trip as the reads; durable mode sends no such setting.
func TestFastCommitIsAskedForInTheGroupsFirstRoundTrip(t *testing.T) {
	for _, fast := range []bool{false, true} {
		b := &pgx.Batch{}
		queueGroupReads(b, []defKey{{1, "x"}}, []rowKey{{1, "x", "k", 0}}, fast, false)
		var sent []string
		for _, q := range b.QueuedQueries {
			sent = append(sent, q.SQL)
		}
		if got := strings.Contains(strings.Join(sent, "; "), "set_config('synchronous_commit', 'off', true)"); got != fast {
			t.Fatalf("fast=%v: statements %q", fast, sent)
		}
		if sent[0] != pgBegin {
			t.Fatalf("fast=%v: the batch does not open the transaction first: %q", fast, sent)
		}
	}
}

// TestFastCommitDecidesTheSame: on both dialects a fast-commit engine decides exactly as a
// durable one (the commit mode changes when the commit is on disk, nothing else).
func TestFastCommitDecidesTheSame(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, Options{FastCommit: true})
		if _, _, err := e.PutDefinition(context.Background(), 1, "x", Definition{Kind: FixedWindow, Rate: 3, Period: 3_600_000}, nil); err != nil {
			t.Fatal(err)
		}
		var admitted int
		for range 5 {
			dec, err := e.Limit(context.Background(), 1, Request{Name: "x", Key: "k", Count: 1})
			if err != nil {
				t.Fatal(err)
			}
			if dec.OK {
				admitted++
			}
		}
		if admitted != 3 {
			t.Fatalf("fast commit admitted %d of a window of 3", admitted)
		}
	})
}

// TestAGroupGivesUpWithinTheBudgetOfEachOfItsDecisions: at a group's start, a decision queued
// for longer than the retry budget fails closed at once; the others are decided under the
// budget's end of the youngest, so that none gives up before its own budget is spent (a young
// one that joins a group of old ones is not cut short by theirs); a group with a decision its
// caller decides at once has the database's own budget from now.
func TestAGroupGivesUpWithinTheBudgetOfEachOfItsDecisions(t *testing.T) {
	const budget = 5 * time.Second
	e := &Engine{db: &db.DB{Retry: db.RetryPolicy{Budget: budget}}}
	now := time.Unix(1_700_000_000, 0)
	queued := func(ago time.Duration) *job {
		return &job{queuedAt: now.Add(-ago), done: make(chan struct{})}
	}
	stale, old, young := queued(budget), queued(4*time.Second), queued(10*time.Millisecond)
	kept, deadline := e.expireQueued([]*job{stale, old, young}, now)
	if len(kept) != 2 || kept[0] != old || kept[1] != young {
		t.Fatalf("kept %d jobs, want the two queued for less than the budget, in order", len(kept))
	}
	if want := young.queuedAt.Add(budget); !deadline.Equal(want) {
		t.Errorf("the group's deadline is %v after now, want the youngest's budget's end, %v after now", deadline.Sub(now), want.Sub(now))
	}
	select {
	case <-stale.done:
		if apperr.From(stale.err).Code != apperr.Unavailable {
			t.Errorf("the stale decision failed with %v, want unavailable", stale.err)
		}
	default:
		t.Error("the decision queued for the whole budget was not failed closed")
	}
	for _, j := range []*job{old, young} {
		select {
		case <-j.done:
			t.Error("a decision within its budget was completed before its group ran")
		default:
		}
	}
	if n := e.db.GiveUpsFor(db.PurposeDecision); n != 1 {
		t.Errorf("give-ups of decisions: %d, want 1 (the stale decision's 503)", n)
	}

	atOnce := &job{done: make(chan struct{})} // its caller decides it, with what queued behind
	kept, deadline = e.expireQueued([]*job{atOnce, queued(time.Second)}, now)
	if len(kept) != 2 || !deadline.IsZero() {
		t.Errorf("a group its caller decides: kept %d, deadline %v; want both, and the database's own budget", len(kept), deadline)
	}
	fresh := []*job{queued(time.Millisecond)}
	if kept, _ := e.expireQueued(fresh, now); &kept[0] != &fresh[0] {
		t.Error("a group with nothing to expire was copied")
	}
}
