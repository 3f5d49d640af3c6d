package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestAQueuedDecisionFailsClosedWithinTheBudgetOfItsOwnAsking: while the database stalls (a
// lock the decisions wait behind), the decision in PostgreSQL fails closed when the retry budget
// is spent, and so do the ones queued behind it, within the budget since they were asked for:
// not after a budget of their own group's on top (twice the budget, for the 503 README promises
// within it).
func TestAQueuedDecisionFailsClosedWithinTheBudgetOfItsOwnAsking(t *testing.T) {
	d := testkit.OpenURL(t, testkit.NewDatabase(t))
	const budget = 4 * time.Second
	d.Retry.Budget = budget
	e := newEngine(t, d, limiter.Options{})
	mustPut(t, e, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 60_000})
	ctx := context.Background()
	lock, err := d.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback() }()
	if _, err := lock.ExecContext(ctx, "LOCK TABLE limit_state IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		err error
		at  time.Time
	}
	decide := func(key string, out chan<- answer) {
		_, err := e.Limit(ctx, tenant, limiter.Request{Name: "api", Key: key, Count: 1})
		out <- answer{err, time.Now()}
	}
	first := make(chan answer, 1)
	go decide("first", first)
	testkit.WaitForLockWaiter(t, d.SQL, time.Minute, "the first decision")
	const queued = 3
	rest := make(chan answer, queued)
	for i := range queued {
		go decide(fmt.Sprint("queued-", i), rest)
	}
	waitUntil(t, "three decisions queued behind the first", func() bool { return e.Queued() == queued })
	a := <-first
	if !errors.Is(a.err, db.ErrUnavailable) {
		t.Fatalf("the decision behind the lock: %v, want ErrUnavailable once the budget is spent", a.err)
	}
	for range queued {
		b := <-rest
		if !errors.Is(b.err, db.ErrUnavailable) {
			t.Fatalf("a queued decision: %v, want ErrUnavailable", b.err)
		}
		// Asked for just after the first: each fails closed about when it did, well before a
		// second budget has passed.
		if late := b.at.Sub(a.at); late > budget/2 {
			t.Fatalf("a queued decision failed closed %v after the one ahead of it, with a budget of %v: its group spent a budget of its own", late.Round(time.Millisecond), budget)
		}
	}
}

// waitUntil polls cond until it holds, failing the test after a generous minute, naming what it
// waited for.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}

// TestBulkItemsQueuedLongerThanTheBudgetFailClosed: the items of a bulk request are queued like
// single decisions, and fail closed like them once queued for longer than the retry budget (a
// budget of a nanosecond: every queued decision has outlived it by the time the lane's worker
// starts), each a give-up of a decision.
func TestBulkItemsQueuedLongerThanTheBudgetFailClosed(t *testing.T) {
	d := testkit.Open(t, db.SQLite)
	e := limiter.NewEngine(d, limiter.Options{})
	mustPut(t, e, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 60_000})
	d.Retry.Budget = time.Nanosecond
	ctx := context.Background()
	single := make(chan error, 1)
	bulk := make(chan []limiter.Outcome, 1)
	go func() {
		_, err := e.Limit(ctx, tenant, limiter.Request{Name: "api", Key: "k", Count: 1})
		single <- err
	}()
	go func() {
		bulk <- e.Each(ctx, tenant, []limiter.Request{{Name: "api", Key: "k", Count: 1}, {Name: "api", Key: "j", Count: 1}}, true)
	}()
	waitUntil(t, "a decision and two bulk items queued before the engine runs", func() bool { return e.Queued() == 3 })
	testkit.Run(t, e.Run)
	const expired = "queued for longer than the retry budget" // failed before any transaction
	if err := <-single; !errors.Is(err, limiter.ErrUnavailable) || !strings.Contains(err.Error(), expired) {
		t.Errorf("the single decision: %v, want unavailable: %s", err, expired)
	}
	for i, o := range <-bulk {
		if !errors.Is(o.Err, limiter.ErrUnavailable) || !strings.Contains(o.Err.Error(), expired) {
			t.Errorf("bulk item %d: %v, want unavailable: %s", i, o.Err, expired)
		}
	}
	if n := d.GiveUpsFor(db.PurposeDecision); n != 3 {
		t.Errorf("give-ups of decisions: %d, want 3", n)
	}
}
