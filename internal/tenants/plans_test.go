package tenants

import (
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"
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
