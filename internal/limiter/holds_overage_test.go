package limiter_test

import (
	"context"
	"sync"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// overageLog records what an engine reports through Options.OnHoldOverage.
type overageLog struct {
	mu    sync.Mutex
	total map[string]float64
}

func (o *overageLog) add(tenantID int64, name string, amount float64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.total == nil {
		o.total = map[string]float64{}
	}
	o.total[name] += amount
}

func (o *overageLog) of(name string) float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.total[name]
}

// overageEngine is an engine on d on a clock that does not move, with put limits that never
// refill ("tokens" of 10, "calls" of 3), reporting overage to the returned log and decisions to
// the returned hooks.
func overageEngine(t *testing.T, d *db.DB) (*limiter.Engine, *overageLog, *hooks) {
	t.Helper()
	log, h := &overageLog{}, newHooks()
	opts := h.options(newClock(1_700_000_000_000).opts())
	opts.OnHoldOverage = log.add
	e := newEngine(t, d, opts)
	forever := limiter.Definition{Kind: limiter.FixedWindow, Period: 86_400_000 * 365, Start: ptr(int64(0))}
	tokens, calls := forever, forever
	tokens.Rate, calls.Rate = 10, 3
	mustPut(t, e, "tokens", tokens)
	mustPut(t, e, "calls", calls)
	return e, log, h
}

// TestHoldOverageIsReportedAsSettled: what OnHoldOverage is told equals, limit by limit, the
// overage the settlements answered: nothing for a settle that fits or gives back, the amount that
// did not fit otherwise, also when several settles share the worker's transaction.
func TestHoldOverageIsReportedAsSettled(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		e, log, _ := overageEngine(t, d)
		settled := map[string]float64{}
		settle := func(id string, counts ...float64) {
			t.Helper()
			s, err := e.SettleHold(ctx, tenant, id, counts)
			if err != nil {
				t.Fatal(err)
			}
			for i, name := range s.Names {
				settled[name] += s.Overage[i]
			}
		}

		h := mustHold(t, e, 60_000, limiter.HoldLimit{Name: "tokens", Key: "k", Count: 2}, limiter.HoldLimit{Name: "calls", Key: "k", Count: 1})
		settle(h.ID, 1, 1) // less: gives back
		h = mustHold(t, e, 60_000, limiter.HoldLimit{Name: "tokens", Key: "k", Count: 2})
		settle(h.ID, 6) // more, and it fits: tokens has 10-1-6 = 3 left
		h = mustHold(t, e, 60_000, limiter.HoldLimit{Name: "tokens", Key: "k", Count: 1}, limiter.HoldLimit{Name: "calls", Key: "k", Count: 1})
		settle(h.ID, 4, 3) // more than fits on both (2 left of tokens, 1 of calls): none taken
		if settled["tokens"] != 3 || settled["calls"] != 2 {
			t.Fatalf("settled overage %v, want tokens 3 and calls 2", settled)
		}

		// Settles at once, most sharing one transaction of the worker's.
		var holds []string
		for range 6 {
			holds = append(holds, mustHold(t, e, 60_000, limiter.HoldLimit{Name: "calls", Key: "many", Count: 0}).ID)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, id := range holds {
			wg.Go(func() {
				s, err := e.SettleHold(ctx, tenant, id, []float64{1})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				settled["calls"] += s.Overage[0]
			})
		}
		wg.Wait()
		if settled["calls"] != 2+3 { // 3 of the 6 fit
			t.Fatalf("settled overage %v, want calls 5", settled)
		}
		for _, name := range []string{"tokens", "calls"} {
			if got := log.of(name); got != settled[name] {
				t.Errorf("OnHoldOverage was told %v of %s, the settlements answered %v", got, name, settled[name])
			}
		}
	})
}

// TestHoldOverageIsReportedOnceWhenTheSettleIsRetried: a settle whose transaction fails with a
// serialization failure after it decided (another connection touched the hold in between) is
// retried and commits once; its overage is reported once, not once per attempt.
func TestHoldOverageIsReportedOnceWhenTheSettleIsRetried(t *testing.T) {
	d := testkit.OpenURL(t, testkit.NewDatabase(t))
	ctx := context.Background()
	e, log, heard := overageEngine(t, d)
	h := mustHold(t, e, 60_000, limiter.HoldLimit{Name: "tokens", Key: "k", Count: 1})
	mustLimit(t, e, limiter.Request{Name: "tokens", Key: "k", Count: 8}) // 1 left

	var once sync.Once
	limiter.SetAfterDecide(e, func() {
		// The settle's first attempt has read the hold open and decided; a change to the hold's
		// row committed now makes its own update of that row a serialization failure.
		once.Do(func() {
			if err := d.Gorm.Exec("UPDATE holds SET expires_at = expires_at WHERE tenant_id = ? AND id = ?", tenant, h.ID).Error; err != nil {
				t.Error(err)
			}
		})
	})
	before := d.Retries()
	s, err := e.SettleHold(ctx, tenant, h.ID, []float64{4})
	if err != nil {
		t.Fatal(err)
	}
	if d.Retries() == before {
		t.Fatal("the settle's transaction was not retried: the test proves nothing")
	}
	if s.Overage[0] != 3 || value(t, e, "tokens", "k") != 1 {
		t.Fatalf("settled %+v, value %v: want 3 of overage and nothing taken", s, value(t, e, "tokens", "k"))
	}
	if got := log.of("tokens"); got != s.Overage[0] {
		t.Fatalf("OnHoldOverage was told %v, the settle answered %v", got, s.Overage[0])
	}
	if a, r, _ := heard.counts("tokens"); a != 2 || r != 1 {
		t.Fatalf("the hooks heard %d admitted and %d refused, want 2 (the hold and the 8) and 1 (the settle's extra, once)", a, r)
	}
}

// TestASettlesExtraIsADecisionOfItsOwn: what a settle charges beyond the hold is taken as a
// decision of its own, so the hooks (metrics, usage, webhooks) hear it, admitted or refused as
// overage, once per committed settle.
func TestASettlesExtraIsADecisionOfItsOwn(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		h := newHooks()
		e := newEngine(t, d, h.options(newClock(1_700_000_000_000).opts()))
		mustPut(t, e, "api", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 86_400_000 * 365, Start: ptr(int64(0))})
		ctx := context.Background()
		first := mustHold(t, e, 60_000, limiter.HoldLimit{Name: "api", Key: "k", Count: 1})
		if s, err := e.SettleHold(ctx, tenant, first.ID, []float64{6}); err != nil || s.Overage[0] != 0 {
			t.Fatalf("settling 6 of a hold of 1 with 9 left: %+v, %v", s, err)
		}
		second := mustHold(t, e, 60_000, limiter.HoldLimit{Name: "api", Key: "k", Count: 1})
		if s, err := e.SettleHold(ctx, tenant, second.ID, []float64{9}); err != nil || s.Overage[0] != 8 {
			t.Fatalf("settling 9 of a hold of 1 with 3 left: %+v, %v, want an overage of 8", s, err)
		}
		if a, r, _ := h.counts("api"); a != 3 || r != 1 {
			t.Errorf("the hooks heard %d admitted and %d refused, want 3 (two holds and the first extra) and 1 (the second extra)", a, r)
		}
		if v := value(t, e, "api", "k"); v != 3 {
			t.Errorf("value %v, want 3", v)
		}
	})
}

// TestTheHoldSweepersRetriesAreTheSweepersNotDecisions: releasing expired holds is the
// sweepers' background work: its retries (and give-ups) count under db.PurposeSweep, so that an
// alert on decisions' give-ups ("answered 503 to the decisions it carried") hears only those.
func TestTheHoldSweepersRetriesAreTheSweepersNotDecisions(t *testing.T) {
	d := testkit.OpenURL(t, testkit.NewDatabase(t))
	ctx := context.Background()
	clock := newClock(1_700_000_000_000)
	e := newEngine(t, d, clock.opts())
	mustPut(t, e, "tokens", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 86_400_000 * 365, Start: ptr(int64(0))})
	h := mustHold(t, e, 60_000, limiter.HoldLimit{Name: "tokens", Key: "k", Count: 4})
	clock.Advance(60_000) // expired: the sweeper's to release
	var once sync.Once
	limiter.SetAfterDecide(e, func() {
		// The sweep's first attempt has read the hold and given its amount back; a change to
		// the hold's row committed now makes its own update of that row a serialization failure.
		once.Do(func() {
			if err := d.Gorm.Exec("UPDATE holds SET expires_at = expires_at WHERE tenant_id = ? AND id = ?", tenant, h.ID).Error; err != nil {
				t.Error(err)
			}
		})
	})
	sweeps, decisions := d.RetriesFor(db.PurposeSweep), d.RetriesFor(db.PurposeDecision)
	if n, _, err := e.SweepHolds(ctx, 10); err != nil || n != 1 {
		t.Fatalf("SweepHolds released %d (%v), want the expired hold", n, err)
	}
	if d.RetriesFor(db.PurposeSweep) == sweeps {
		t.Fatal("the sweep's transaction was not retried as the sweepers': the test proves nothing, or it counted as a decision's")
	}
	if got := d.RetriesFor(db.PurposeDecision); got != decisions {
		t.Fatalf("the hold sweep's retry counted as a decision's (%d → %d)", decisions, got)
	}
}
