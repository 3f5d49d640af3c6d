package limiter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// twoEngines opens url (twice on PostgreSQL: two instances with their own pools) and returns two
// engines on it sharing clock.
func twoEngines(t *testing.T, url string, clock *fakeClock) []*limiter.Engine {
	t.Helper()
	ctx := context.Background()
	first, err := db.Open(ctx, url, db.Options{MaxOpenConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Close() })
	if err := first.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	second := first
	if first.Dialect == db.Postgres {
		if second, err = db.Open(ctx, url, db.Options{MaxOpenConns: 8}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = second.Close() })
	}
	return []*limiter.Engine{newEngine(t, first, clock.opts()), newEngine(t, second, clock.opts())}
}

// TestConcurrentHoldsNeverOverAdmitAndEndOnce hammers two engines on one database with holds
// (settled for less, for more, released, or abandoned), direct decisions and refunds on two
// limits that cannot refill. What clients know to be taken (a hold from its answer until it is
// closed, a decision from its answer) never exceeds a limit; every hold ends exactly once, as its
// client ended it (abandoned ones expire by the sweep); the final values equal the ledger exactly.
func TestConcurrentHoldsNeverOverAdmitAndEndOnce(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		clock := newClock(1_700_000_000_000)
		engines := twoEngines(t, url, clock)
		const budgetMax, callsMax = 120.0, 25.0
		forever := limiter.Definition{Kind: limiter.FixedWindow, Period: 86_400_000 * 3650, Start: ptr(int64(0))}
		budget, calls := forever, forever
		budget.Rate, calls.Rate = budgetMax, callsMax
		mustPut(t, engines[0], "budget", budget)
		mustPut(t, engines[0], "calls", calls)

		var (
			mu                         sync.Mutex
			ledgerBudget, ledgerCalls  float64 // charged by closed holds and direct decisions, minus refunds
			ended                      = map[string]string{}
			taken                      [2]atomic.Int64 // what clients know is taken now (held or charged), in whole units
			overBound                  atomic.Int64
			errs                       sync.Map
			admittedHolds, refusedOnes atomic.Int64
		)
		note := func(err error) {
			if err != nil {
				errs.Store(err.Error(), true)
			}
		}
		check := func() {
			if float64(taken[0].Load()) > budgetMax || float64(taken[1].Load()) > callsMax {
				overBound.Add(1)
			}
		}
		var wg sync.WaitGroup
		for g := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e := engines[g%2]
				r := rand.New(rand.NewPCG(uint64(g), 7))
				for range 30 {
					if r.IntN(5) == 0 { // a direct decision, sometimes refunded
						d, err := e.Limit(ctx, tenant, limiter.Request{Name: "budget", Key: "k", Count: 2})
						note(err)
						if err != nil || !d.OK {
							continue
						}
						taken[0].Add(2)
						check()
						mu.Lock()
						ledgerBudget += 2
						mu.Unlock()
						if r.IntN(2) == 0 {
							taken[0].Add(-1) // before the call: what is known taken is a lower bound
							rd, err := e.Refund(ctx, tenant, limiter.Request{Name: "budget", Key: "k", Count: 1})
							note(err)
							if err == nil {
								mu.Lock()
								ledgerBudget -= rd.Refunded
								mu.Unlock()
								taken[0].Add(1 - int64(rd.Refunded))
							}
						}
						continue
					}
					est := float64(1 + r.IntN(8))
					h, err := e.Hold(ctx, tenant, []limiter.HoldLimit{{Name: "budget", Key: "k", Count: est}, {Name: "calls", Key: "k", Count: 1}}, 60_000)
					note(err)
					if err != nil {
						continue
					}
					if !h.Decision.OK {
						refusedOnes.Add(1)
						continue
					}
					admittedHolds.Add(1)
					taken[0].Add(int64(est))
					taken[1].Add(1)
					check()
					switch r.IntN(4) {
					case 0: // released
						taken[0].Add(-int64(est)) // before the call: what is known taken is a lower bound
						taken[1].Add(-1)
						note(e.ReleaseHold(ctx, tenant, h.ID))
						mu.Lock()
						ended[h.ID] = limiter.HoldReleased
						mu.Unlock()
					case 1: // abandoned: the sweeper will release it
						mu.Lock()
						ended[h.ID] = limiter.HoldExpired
						ledgerBudget += est
						ledgerCalls++
						mu.Unlock()
					default: // settled for less or more
						actual := float64(r.IntN(int(est) + 4))
						taken[0].Add(-int64(est))
						taken[1].Add(-1)
						s, err := e.SettleHold(ctx, tenant, h.ID, []float64{actual, 1})
						note(err)
						if err != nil {
							continue
						}
						charged := s.Charged[0]
						if actual < est {
							charged = est - s.Refunded[0] // what stays taken: a refund never passes the maximum
						}
						taken[0].Add(int64(charged))
						taken[1].Add(1)
						mu.Lock()
						ended[h.ID] = limiter.HoldSettled
						ledgerBudget += charged
						ledgerCalls++
						mu.Unlock()
						if s.Overage[0] != 0 && s.Overage[0] != actual-est {
							errs.Store(fmt.Sprintf("overage %v for %v over %v", s.Overage[0], actual, est), true)
						}
					}
				}
			}()
		}
		wg.Wait()
		errs.Range(func(k, _ any) bool { t.Errorf("error leaked: %v", k); return true })
		if overBound.Load() > 0 {
			t.Fatalf("clients saw more taken than a limit allows %d times", overBound.Load())
		}
		if admittedHolds.Load() == 0 || refusedOnes.Load() == 0 {
			t.Fatalf("the load must both admit and refuse holds: %d admitted, %d refused", admittedHolds.Load(), refusedOnes.Load())
		}
		if got := callsMax - value(t, engines[0], "calls", "k"); got != ledgerCalls {
			t.Fatalf("calls: stored %v taken, ledger %v", got, ledgerCalls)
		}
		if got := budgetMax - value(t, engines[0], "budget", "k"); got != ledgerBudget {
			t.Fatalf("budget: stored %v taken, ledger %v", got, ledgerBudget)
		}

		// The abandoned holds expire by the clock and the sweep (on either engine) gives them back.
		clock.Advance(60_000)
		var abandoned float64
		for _, st := range ended {
			if st == limiter.HoldExpired {
				abandoned++
			}
		}
		swept := 0
		for {
			n, _, err := engines[1].SweepHolds(ctx, 5)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			swept += n
		}
		if float64(swept) != abandoned {
			t.Fatalf("swept %d holds, %v abandoned", swept, abandoned)
		}
		if got := callsMax - value(t, engines[0], "calls", "k"); got != ledgerCalls-abandoned {
			t.Fatalf("calls after the sweep: %v taken, want %v", got, ledgerCalls-abandoned)
		}
		// Every hold ended exactly once, the way its client ended it.
		d := testkit.OpenURL(t, url)
		rows := testkit.Rows(t, d, "holds")
		if len(rows) != int(admittedHolds.Load()) {
			t.Fatalf("%d holds stored, %d admitted", len(rows), admittedHolds.Load())
		}
		for _, row := range rows {
			var id, state, closed string
			for _, c := range row {
				switch c.Column {
				case "id":
					id = c.Text
				case "state":
					state = c.Text
				case "closed_at":
					closed = c.Text
				}
			}
			if ended[id] != state || closed == "" {
				t.Errorf("hold %s: stored %s (closed at %q), its client ended it %s", id, state, closed, ended[id])
			}
		}
	})
}

// TestConcurrentLeasesNeverExceedInFlight hammers two engines on one database with leases of a
// concurrency limit of 3 (alone or in a batch with a rate limit), extended and released: at no
// moment are more leases known to be held than 3. Then clients that stop without releasing hold
// every slot until their leases expire by the clock, and free them at leaseTtl with no sweep.
func TestConcurrentLeasesNeverExceedInFlight(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		const t0 = 1_700_000_000_000
		clock := newClock(t0)
		engines := twoEngines(t, url, clock)
		mustPut(t, engines[0], "jobs", limiter.Definition{Kind: limiter.Concurrency, Rate: 3, LeaseTTL: 5000})
		mustPut(t, engines[0], "rpm", limiter.Definition{Kind: limiter.FixedWindow, Rate: 150, Period: 86_400_000 * 3650, Start: ptr(int64(0))})

		var inFlight, peak, over, acquired, refused, rpmTaken atomic.Int64
		var errs sync.Map
		note := func(err error) {
			if err != nil {
				errs.Store(err.Error(), true)
			}
		}
		var wg sync.WaitGroup
		for g := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e := engines[g%2]
				r := rand.New(rand.NewPCG(uint64(g), 9))
				for range 25 {
					var id string
					if r.IntN(2) == 0 {
						d, err := e.Limit(ctx, tenant, limiter.Request{Name: "jobs", Key: "k", Count: 1})
						note(err)
						if err != nil || !d.OK {
							refused.Add(1)
							continue
						}
						id = d.LeaseID
					} else {
						b, err := e.Batch(ctx, tenant, []limiter.Request{{Name: "jobs", Key: "k", Count: 1}, {Name: "rpm", Key: "k", Count: 1}}, true)
						note(err)
						if err != nil || !b.OK {
							refused.Add(1)
							continue
						}
						rpmTaken.Add(1)
						id = b.Results[0].LeaseID
					}
					acquired.Add(1)
					n := inFlight.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					if n > 3 {
						over.Add(1)
					}
					if r.IntN(3) == 0 {
						_, err := e.ExtendLease(ctx, tenant, id)
						note(err)
					}
					inFlight.Add(-1) // before the release: what is known held is a lower bound
					note(e.ReleaseLease(ctx, tenant, id))
				}
			}()
		}
		wg.Wait()
		errs.Range(func(k, _ any) bool { t.Errorf("error leaked: %v", k); return true })
		if over.Load() > 0 {
			t.Fatalf("more than 3 leases held at once %d times (peak %d)", over.Load(), peak.Load())
		}
		if acquired.Load() == 0 || refused.Load() == 0 {
			t.Fatalf("the load must both admit and refuse: %d acquired, %d refused", acquired.Load(), refused.Load())
		}
		if got := 150 - value(t, engines[0], "rpm", "k"); got != float64(rpmTaken.Load()) {
			t.Fatalf("rpm: %v taken, %d batches admitted (a refused batch must take nothing)", got, rpmTaken.Load())
		}
		if v := value(t, engines[0], "jobs", "k"); v != 3 {
			t.Fatalf("every lease was released: %v slots free", v)
		}

		// Three clients take a lease each and stop without releasing.
		var wg2 sync.WaitGroup
		for g := range 3 {
			wg2.Add(1)
			go func() {
				defer wg2.Done()
				d, err := engines[g%2].Limit(ctx, tenant, limiter.Request{Name: "jobs", Key: "k", Count: 1})
				if err != nil || !d.OK {
					t.Errorf("abandoned lease %d: %+v %v", g, d, err)
				}
			}()
		}
		wg2.Wait()
		clock.Advance(4999)
		if d := mustLimit(t, engines[1], limiter.Request{Name: "jobs", Key: "k", Count: 1}); d.OK || *d.RetryAfter != 1 {
			t.Fatalf("before leaseTtl the slots are taken: %+v", d)
		}
		clock.Advance(1)
		for g := range 3 {
			if d := mustLimit(t, engines[g%2], limiter.Request{Name: "jobs", Key: "k", Count: 1}); !d.OK {
				t.Fatalf("at leaseTtl the abandoned slots are free: %+v", d)
			}
		}
		if n, err := engines[0].SweepLeases(ctx, 0); err != nil || n != 3 {
			t.Fatalf("the sweep deletes the abandoned leases' rows: %d %v", n, err)
		}
	})
}
