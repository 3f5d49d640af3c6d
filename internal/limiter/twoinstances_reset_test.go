package limiter_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestAResetRacingAHoldsCloseLeavesTheKeyExact: a hold's release (or settle for nothing) on one instance races a
// reset of its key followed by a decision taking 5 on the other. Whatever the order, the key ends
// at 5: released before the reset, the reset makes it full; after it, the hold gives nothing back.
func TestAResetRacingAHoldsCloseLeavesTheKeyExact(t *testing.T) {
	for _, shards := range []int{1, 2} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			testkit.EachURL(t, func(t *testing.T, url string) {
				ctx := context.Background()
				clock := newClock(1_700_000_000_000)
				engines := twoEngines(t, url, clock)
				forever := int64(86_400_000 * 3650)
				mustPut(t, engines[0], "p", limiter.Definition{Kind: limiter.FixedWindow, Rate: 1000, Period: forever, Start: ptr(int64(0))})
				mustPut(t, engines[0], "c", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: forever, Start: ptr(int64(0)), Shards: shards,
					Parents: []limiter.Parent{{Name: "p", Key: "all"}}})
				for i := range 20 {
					key := fmt.Sprintf("k%d", i)
					a, b := engines[i%2], engines[1-i%2]
					h := mustHold(t, a, 60_000, limiter.HoldLimit{Name: "c", Key: key, Count: 4})
					var wg sync.WaitGroup
					wg.Add(2)
					go func() {
						defer wg.Done()
						var err error
						if i%3 == 0 {
							_, err = a.SettleHold(ctx, tenant, h.ID, []float64{0})
						} else {
							err = a.ReleaseHold(ctx, tenant, h.ID)
						}
						if err != nil {
							t.Error(err)
						}
					}()
					go func() {
						defer wg.Done()
						k := key
						if err := b.Reset(ctx, tenant, "c", &k, nil); err != nil {
							t.Error(err)
						}
						if d, err := b.Limit(ctx, tenant, limiter.Request{Name: "c", Key: key, Count: 5}); err != nil || !d.OK {
							t.Errorf("take 5 after the reset: %+v %v", d, err)
						}
					}()
					wg.Wait()
					if v := value(t, engines[0], "c", key); v != 5 {
						t.Fatalf("round %d: %v left, want 5 (10 after the reset, less 5)", i, v)
					}
				}
				// The parent was not reset: every hold's 4 came back to it, and each round took 5.
				if v := value(t, engines[0], "p", "all"); v != 1000-5*20 {
					t.Fatalf("parent: %v left, want %v", v, 1000-5*20)
				}
			})
		})
	}
}
