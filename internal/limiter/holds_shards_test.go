package limiter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestConcurrentHoldsOnAShardedLimitGiveBackExactly hammers two engines on one database with
// holds on a limit of 4 shards (each decision takes from at most two random shards) that cannot
// refill: settled for less, for the same, for more, released or abandoned, beside direct
// decisions (and first, one at a time on a quiet key, where most shards lack nothing). What clients know to be taken never exceeds the limit; a settle for less gives back
// exactly the difference (Settlement.Refunded), whichever shards the hold took from, so the
// stored total summed over the shards equals the ledger of charged amounts exactly, and after
// the abandoned holds expire and are swept it equals the ledger without them.
func TestConcurrentHoldsOnAShardedLimitGiveBackExactly(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		clock := newClock(1_700_000_000_000)
		engines := twoEngines(t, url, clock)
		const budgetMax = 2000.0 // 500 per shard: roomy at first, then filled up by the charges
		def := limiter.Definition{Kind: limiter.FixedWindow, Rate: budgetMax, Period: 86_400_000 * 3650, Start: ptr(int64(0)), Shards: 4}
		mustPut(t, engines[0], "sharded", def)

		// A quiet key first: one hold at a time takes from one or two of the 4 shards, and most
		// pairs of shards lack nothing, so only a give-back that finds the shards it took from
		// (any shard that lacks) is exact every time.
		charged := 0.0
		for i := range 24 {
			e := engines[i%2]
			h, err := e.Hold(ctx, tenant, []limiter.HoldLimit{{Name: "sharded", Key: "quiet", Count: 10}}, 60_000)
			if err != nil || !h.Decision.OK {
				t.Fatalf("quiet hold %d: %+v, %v", i, h, err)
			}
			if i%3 == 0 {
				if err := e.ReleaseHold(ctx, tenant, h.ID); err != nil {
					t.Fatal(err)
				}
			} else {
				s, err := e.SettleHold(ctx, tenant, h.ID, []float64{3})
				if err != nil || s.Refunded[0] != 7 {
					t.Fatalf("quiet settle %d of 3 for 10 held: %+v, %v; want 7 given back", i, s, err)
				}
				charged += 3
			}
			if got := budgetMax - value(t, engines[0], "sharded", "quiet"); got != charged {
				t.Fatalf("quiet key after hold %d: stored %v taken over the 4 shards, %v charged", i, got, charged)
			}
		}

		var (
			mu               sync.Mutex
			ledger           float64 // charged by settled holds, held by abandoned ones, and direct decisions
			abandonedAmount  float64
			taken            atomic.Int64 // what clients know is taken now (held or charged)
			overBound        atomic.Int64
			errs             sync.Map
			admitted         atomic.Int64
			refused, shorted atomic.Int64
		)
		note := func(err error) {
			if err != nil {
				errs.Store(err.Error(), true)
			}
		}
		add := func(v float64) {
			mu.Lock()
			ledger += v
			mu.Unlock()
		}
		check := func() {
			if float64(taken.Load()) > budgetMax {
				overBound.Add(1)
			}
		}
		var wg sync.WaitGroup
		for g := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e := engines[g%2]
				r := rand.New(rand.NewPCG(uint64(g), 13))
				for range 40 {
					if r.IntN(6) == 0 { // a direct decision
						d, err := e.Limit(ctx, tenant, limiter.Request{Name: "sharded", Key: "k", Count: 2})
						note(err)
						if err == nil && d.OK {
							taken.Add(2)
							check()
							add(2)
						}
						continue
					}
					est := float64(1 + r.IntN(40))
					h, err := e.Hold(ctx, tenant, []limiter.HoldLimit{{Name: "sharded", Key: "k", Count: est}}, 60_000)
					note(err)
					if err != nil {
						continue
					}
					if !h.Decision.OK {
						refused.Add(1)
						continue
					}
					admitted.Add(1)
					taken.Add(int64(est))
					check()
					switch r.IntN(10) {
					case 0, 1: // released: everything given back
						taken.Add(-int64(est)) // before the call: what is known taken is a lower bound
						note(e.ReleaseHold(ctx, tenant, h.ID))
					case 2: // abandoned: the sweep releases it once it expires
						mu.Lock()
						ledger += est
						abandonedAmount += est
						mu.Unlock()
					default: // settled for less, the same or more
						actual := float64(r.IntN(int(est) + 6))
						taken.Add(-int64(est))
						s, err := e.SettleHold(ctx, tenant, h.ID, []float64{actual})
						note(err)
						if err != nil {
							continue
						}
						if actual < est && s.Refunded[0] != est-actual {
							shorted.Add(1)
							errs.Store(fmt.Sprintf("a settle of %v for %v held gave back %v, not %v", actual, est, s.Refunded[0], est-actual), true)
						}
						charged := s.Charged[0]
						if actual < est {
							charged = est - s.Refunded[0] // what stays taken, so that the ledger shows a short give-back
						}
						taken.Add(int64(charged))
						check()
						add(charged)
					}
				}
			}()
		}
		wg.Wait()
		errs.Range(func(k, _ any) bool { t.Errorf("%v", k); return true })
		if overBound.Load() > 0 {
			t.Fatalf("clients saw more taken than the limit allows %d times", overBound.Load())
		}
		if admitted.Load() == 0 || refused.Load() == 0 {
			t.Fatalf("the load must both admit and refuse holds: %d admitted, %d refused", admitted.Load(), refused.Load())
		}
		if got := budgetMax - value(t, engines[0], "sharded", "k"); got != ledger {
			t.Fatalf("stored %v taken over the 4 shards, the ledger says %v (%d settles gave back short)", got, ledger, shorted.Load())
		}
		clock.Advance(60_000)
		for {
			n, _, err := engines[1].SweepHolds(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
		}
		if got := budgetMax - value(t, engines[0], "sharded", "k"); got != ledger-abandonedAmount {
			t.Fatalf("after the sweep: stored %v taken over the 4 shards, want %v (the abandoned holds' %v given back)", got, ledger-abandonedAmount, abandonedAmount)
		}
	})
}
