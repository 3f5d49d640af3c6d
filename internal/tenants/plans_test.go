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
