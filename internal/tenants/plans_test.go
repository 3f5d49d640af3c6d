package tenants

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestAPlanChangeIsNotUndoneByAReadUnderWay: a decision that read the old plan before SetPlan
// committed must not cache it after SetPlan returned: the change applies at once on the
// instance that made it (README).
func TestAPlanChangeIsNotUndoneByAReadUnderWay(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		old, lower := 20_000.0, 1.0
		must(t, e.svc.SetPlan(e.ctx, tn.ID, PlanSettings{DecisionsPerSecond: &old}, "op"))

		// The next read of tenant_plans stops after its query until released.
		var stopNext atomic.Bool
		read, release := make(chan struct{}), make(chan struct{})
		must(t, e.db.Gorm.Callback().Query().After("gorm:query").Register("test:stop_plan_read", func(tx *gorm.DB) {
			if tx.Statement.Table == "tenant_plans" && stopNext.CompareAndSwap(true, false) {
				close(read)
				<-release
			}
		}))
		t.Cleanup(func() { _ = e.db.Gorm.Callback().Query().Remove("test:stop_plan_read") })
		stopNext.Store(true)
		got := make(chan error, 1)
		go func() { _, err := e.svc.PlanOf(e.ctx, tn.ID); got <- err }() // a decision reading the plan
		<-read
		set := make(chan error, 1)
		go func() { set <- e.svc.SetPlan(e.ctx, tn.ID, PlanSettings{DecisionsPerSecond: &lower}, "op") }()
		select {
		case err := <-set:
			must(t, err)
		case <-time.After(time.Minute):
			close(release)
			t.Fatal("SetPlan did not return within a minute while a plan read was under way")
		}
		close(release)
		must(t, <-got)
		p, err := e.svc.PlanOf(e.ctx, tn.ID)
		must(t, err)
		if p.DecisionsPerSecond != lower {
			t.Fatalf("after SetPlan returned, the plan in force here is %v decisions/s, want %v: the read under way cached the old plan", p.DecisionsPerSecond, lower)
		}
	})
}

// TestConcurrentMissesOfOnePlanShareOneRead: when a busy tenant's cached plan expires, the 32
// decisions that miss it at once are served by one read of tenant_plans (a few at most, when one
// arrives just as a read ends), not one transaction each.
func TestConcurrentMissesOfOnePlanShareOneRead(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		if _, err := e.svc.PlanOf(e.ctx, tn.ID); err != nil {
			t.Fatal(err)
		}
		var reads atomic.Int64
		must(t, e.db.Gorm.Callback().Query().Before("gorm:query").Register("test:count_plan_reads", func(tx *gorm.DB) {
			if tx.Statement.Table == "tenant_plans" {
				reads.Add(1)
			}
		}))
		t.Cleanup(func() { _ = e.db.Gorm.Callback().Query().Remove("test:count_plan_reads") })
		e.svc.planMu.Lock()
		c := e.svc.planCache[tn.ID]
		c.expires = time.Now().Add(-time.Millisecond) // expired: the next decisions all miss
		e.svc.planCache[tn.ID] = c
		e.svc.planMu.Unlock()

		const callers = 32
		start := make(chan struct{})
		errs := make(chan error, callers)
		for range callers {
			go func() {
				<-start
				_, err := e.svc.PlanOf(e.ctx, tn.ID)
				errs <- err
			}()
		}
		close(start)
		for range callers {
			must(t, <-errs)
		}
		if n := reads.Load(); n < 1 || n > 4 {
			t.Fatalf("%d concurrent decisions after the plan's entry expired made %d reads of tenant_plans, want 1 (a few at most)", callers, n)
		}
	})
}

// failingOnce is an EventSink whose first Enqueue fails.
type failingOnce struct{ calls atomic.Int64 }

func (f *failingOnce) Enqueue(*gorm.DB, int64, string, any) error {
	if f.calls.Add(1) == 1 {
		return errors.New("the outbox is unavailable")
	}
	return nil
}

// TestANearThePlanEventNotRecordedIsTriedAgain: the hourly "near the plan" event is claimed
// before its transaction; a transaction that fails gives the claim back, so that the next
// decision near the plan records it (it was lost for the hour).
func TestANearThePlanEventNotRecordedIsTriedAgain(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		sink := &failingOnce{}
		e := envOn(t, d, WithEvents(sink))
		tn := e.tenant(t, "acme")
		if err := e.svc.RateUsed(e.ctx, tn.ID, 1, 100); err == nil {
			t.Fatal("the first RateUsed succeeded; want the sink's failure")
		}
		must(t, e.svc.RateUsed(e.ctx, tn.ID, 1, 100))
		if n := sink.calls.Load(); n != 2 {
			t.Fatalf("%d events enqueued, want 2 (the failed one, then the retry)", n)
		}
	})
}
