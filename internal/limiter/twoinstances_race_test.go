package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestRefundsRacingDecisionsKeepShardsAndParentsExact: two instances take and refund on a sharded token
// bucket under a parent, neither of which refills. What clients know to be taken never exceeds
// either maximum, no shard goes above its share, and the stored values equal the ledger.
func TestRefundsRacingDecisionsKeepShardsAndParentsExact(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		clock := newClock(1_700_000_000_000)
		engines := twoEngines(t, url, clock)
		forever := int64(86_400_000 * 3650)
		mustPut(t, engines[0], "p", limiter.Definition{Kind: limiter.FixedWindow, Rate: 30, Period: forever, Start: ptr(int64(0))})
		mustPut(t, engines[0], "c", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1e-9, Period: forever, Capacity: ptr(20.0), Shards: 4,
			Parents: []limiter.Parent{{Name: "p", Key: "{org}"}}})
		attrs := map[string]string{"org": "o"}
		var mu sync.Mutex
		var ledgerC, ledgerP float64
		var admitted, refusedN atomic.Int64
		var errs sync.Map
		eachCaller(engines, 10, 3, func(e *limiter.Engine, r *rand.Rand) {
			for range 40 {
				if r.IntN(3) == 0 {
					n := float64(1 + r.IntN(3))
					d, err := e.Refund(ctx, tenant, limiter.Request{Name: "c", Key: "k", Count: n, Attributes: attrs})
					if err != nil {
						errs.Store(err.Error(), true)
						continue
					}
					mu.Lock()
					ledgerC -= d.Refunded
					if len(d.Parents) == 1 {
						ledgerP -= d.Parents[0].Refunded
					}
					mu.Unlock()
					continue
				}
				n := float64(1 + r.IntN(2))
				d, err := e.Limit(ctx, tenant, limiter.Request{Name: "c", Key: "k", Count: n, Attributes: attrs})
				if err != nil {
					errs.Store(err.Error(), true)
					continue
				}
				if !d.OK {
					refusedN.Add(1)
					continue
				}
				admitted.Add(1)
				mu.Lock()
				ledgerC += n
				ledgerP += n
				mu.Unlock()
			}
		})
		errs.Range(func(k, _ any) bool { t.Errorf("error: %v", k); return true })
		vc, err := engines[0].GetValue(ctx, tenant, "c", "k")
		if err != nil {
			t.Fatal(err)
		}
		vp := value(t, engines[0], "p", "o")
		t.Logf("admitted %d refused %d; c %v (ledger taken %v), p %v (ledger taken %v)", admitted.Load(), refusedN.Load(), vc.Value, ledgerC, vp, ledgerP)
		for _, s := range vc.Shards {
			if s.Value > 5+1e-9 || s.Value < -1e-9 {
				t.Errorf("shard %d holds %v, its share is 5", s.Shard, s.Value)
			}
		}
		if d := 20 - vc.Value - ledgerC; d > 1e-6 || d < -1e-6 {
			t.Errorf("c: %v taken stored, ledger %v", 20-vc.Value, ledgerC)
		}
		if 30-vp != ledgerP {
			t.Errorf("p: %v taken stored, ledger %v", 30-vp, ledgerP)
		}
	})
}

// TestReservationsRacingPlainDecisionsStayWithinMaxReserved: reservations (maxReserved 5) and plain decisions from
// two instances on a bucket of 10 that does not refill: the total admitted never passes 15,
// the value never below -5, and the stored value is the ledger.
func TestReservationsRacingPlainDecisionsStayWithinMaxReserved(t *testing.T) {
	for _, shards := range []int{1, 2} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			testkit.EachURL(t, func(t *testing.T, url string) {
				ctx := context.Background()
				clock := newClock(1_700_000_000_000)
				engines := twoEngines(t, url, clock)
				forever := int64(86_400_000 * 3650)
				mustPut(t, engines[0], "r", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1e-9, Period: forever, Capacity: ptr(10.0), MaxReserved: ptr(5.0), Shards: shards})
				var admitted atomic.Int64
				var errs sync.Map
				eachCaller(engines, 10, 5, func(e *limiter.Engine, r *rand.Rand) {
					for range 20 {
						n := 1 + r.IntN(2)
						d, err := e.Limit(ctx, tenant, limiter.Request{Name: "r", Key: "k", Count: float64(n), Reserve: r.IntN(2) == 0})
						if err != nil {
							if !errors.Is(err, limiter.ErrCountExceedsCapacity) {
								errs.Store(err.Error(), true)
							}
							continue
						}
						if d.OK {
							admitted.Add(int64(n))
						}
					}
				})
				errs.Range(func(k, _ any) bool { t.Errorf("error: %v", k); return true })
				v := value(t, engines[0], "r", "k")
				t.Logf("admitted %d, value %v", admitted.Load(), v)
				if admitted.Load() > 15 {
					t.Errorf("admitted %d > 10 + maxReserved 5", admitted.Load())
				}
				if v != 10-float64(admitted.Load()) {
					t.Errorf("stored %v, ledger %v", v, 10-admitted.Load())
				}
			})
		})
	}
}

// TestBatchesAndBulkMixingKeysAndLimitsStayWithinBudgets: all-or-nothing batches (Batch, of several limits and keys,
// one limit twice) and independent bulk decisions (Each) from two instances: no limit's key
// passes its budget and the stored values equal what the admitted answers took.
func TestBatchesAndBulkMixingKeysAndLimitsStayWithinBudgets(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		clock := newClock(1_700_000_000_000)
		engines := twoEngines(t, url, clock)
		forever := int64(86_400_000 * 3650)
		mustPut(t, engines[0], "a", limiter.Definition{Kind: limiter.FixedWindow, Rate: 15, Period: forever, Start: ptr(int64(0))})
		mustPut(t, engines[0], "b", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1e-9, Period: forever, Capacity: ptr(10.0)})
		mustPut(t, engines[0], "s", limiter.Definition{Kind: limiter.SlidingWindow, Rate: 12, Period: forever / 10, Resolution: 6})
		type lk struct{ name, key string }
		var mu sync.Mutex
		taken := map[lk]float64{}
		var errs sync.Map
		eachCaller(engines, 10, 11, func(e *limiter.Engine, r *rand.Rand) {
			for range 25 {
				var reqs []limiter.Request
				for range 1 + r.IntN(4) {
					reqs = append(reqs, limiter.Request{Name: []string{"a", "b", "s"}[r.IntN(3)], Key: fmt.Sprintf("k%d", r.IntN(2)), Count: float64(1 + r.IntN(2))})
				}
				if r.IntN(2) == 0 {
					b, err := e.Batch(ctx, tenant, reqs, true)
					if err != nil {
						if !errors.Is(err, limiter.ErrCountExceedsCapacity) {
							errs.Store(err.Error(), true)
						}
						continue
					}
					if b.OK {
						mu.Lock()
						for _, q := range reqs {
							taken[lk{q.Name, q.Key}] += q.Count
						}
						mu.Unlock()
					}
					continue
				}
				outs := e.Each(ctx, tenant, reqs, true)
				mu.Lock()
				for i, o := range outs {
					if o.Err != nil {
						errs.Store(o.Err.Error(), true)
						continue
					}
					if o.Decision.OK {
						taken[lk{reqs[i].Name, reqs[i].Key}] += reqs[i].Count
					}
				}
				mu.Unlock()
			}
		})
		errs.Range(func(k, _ any) bool { t.Errorf("error: %v", k); return true })
		max := map[string]float64{"a": 15, "b": 10, "s": 12}
		for _, n := range []string{"a", "b", "s"} {
			for k := range 2 {
				key := fmt.Sprintf("k%d", k)
				got := taken[lk{n, key}]
				v := value(t, engines[0], n, key)
				t.Logf("%s/%s: taken %v, value %v", n, key, got, v)
				if got > max[n] {
					t.Errorf("%s/%s: admitted %v > %v", n, key, got, max[n])
				}
				if v != max[n]-got {
					t.Errorf("%s/%s: stored %v, ledger %v", n, key, v, max[n]-got)
				}
			}
		}
	})
}

// TestALeaseReleasedTwiceOrReleasedAndExtendedFreesOneSlot: a lease released through both instances at once,
// or released on one and extended on the other at once, frees exactly one slot: one release
// succeeds, and the free slots are the capacity minus the leases still held.
func TestALeaseReleasedTwiceOrReleasedAndExtendedFreesOneSlot(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		clock := newClock(1_700_000_000_000)
		engines := twoEngines(t, url, clock)
		mustPut(t, engines[0], "jobs", limiter.Definition{Kind: limiter.Concurrency, Rate: 3, LeaseTTL: 60_000})
		// One lease held throughout, with the same expiry as the raced ones (the clock stands still).
		keep := mustLimit(t, engines[0], limiter.Request{Name: "jobs", Key: "k", Count: 1})
		if !keep.OK {
			t.Fatal(keep)
		}
		for i := range 30 {
			d := mustLimit(t, engines[i%2], limiter.Request{Name: "jobs", Key: "k", Count: 1})
			if !d.OK {
				t.Fatalf("round %d: %+v", i, d)
			}
			var ok atomic.Int64
			var wg sync.WaitGroup
			for g := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					e := engines[(g+i)%2]
					if g == 2 && i%2 == 0 {
						_, _ = e.ExtendLease(ctx, tenant, d.LeaseID)
						return
					}
					if err := e.ReleaseLease(ctx, tenant, d.LeaseID); err == nil {
						ok.Add(1)
					} else if !errors.Is(err, limiter.ErrLeaseNotFound) {
						t.Errorf("release: %v", err)
					}
				}()
			}
			wg.Wait()
			if ok.Load() != 1 {
				t.Fatalf("round %d: %d releases succeeded", i, ok.Load())
			}
			if v := value(t, engines[0], "jobs", "k"); v != 2 {
				t.Fatalf("round %d: %v slots free, want 2 (one lease held)", i, v)
			}
		}
		if err := engines[1].ReleaseLease(ctx, tenant, keep.LeaseID); err != nil {
			t.Fatal(err)
		}
		if v := value(t, engines[0], "jobs", "k"); v != 3 {
			t.Fatalf("%v slots free, want 3", v)
		}
	})
}

// eachCaller runs callers goroutines at once, caller g on engines[g%2] with a random source of its
// own (seeded by g and seed), and waits for them all.
func eachCaller(engines []*limiter.Engine, callers int, seed uint64, call func(e *limiter.Engine, r *rand.Rand)) {
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() { call(engines[g%2], rand.New(rand.NewPCG(uint64(g), seed))) })
	}
	wg.Wait()
}
