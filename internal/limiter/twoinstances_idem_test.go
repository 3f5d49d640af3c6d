package limiter_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// callIdem is an idempotency record for a hold or close (RenderCall), one per attempt.
func callIdem(key, body string) *limiter.Idempotency {
	sum := sha256.Sum256([]byte(body))
	return &limiter.Idempotency{Key: key, Hash: sum[:], RenderCall: func(r any) limiter.Answer {
		return limiter.Answer{Status: 200, Body: fmt.Appendf(nil, "%v", r)}
	}}
}

// TestIdempotentHoldsLeasesAndClosesRacingOnTwoInstancesHappenOnce: the same idempotent hold, settle
// (for more than held: the extra is a decision), release, lease acquisition (a batch) and lease
// release, each sent 8 times at once over two instances, happen once.
func TestIdempotentHoldsLeasesAndClosesRacingOnTwoInstancesHappenOnce(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		clock := newClock(1_700_000_000_000)
		engines := twoEngines(t, url, clock)
		forever := int64(86_400_000 * 3650)
		mustPut(t, engines[0], "b", limiter.Definition{Kind: limiter.FixedWindow, Rate: 100, Period: forever, Start: ptr(int64(0))})
		mustPut(t, engines[0], "jobs", limiter.Definition{Kind: limiter.Concurrency, Rate: 5, LeaseTTL: 60_000})
		race := func(what string, f func(e *limiter.Engine, ctx context.Context) (replayed bool, err error)) {
			t.Helper()
			var decided atomic.Int64
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id := callIdem("K-"+what, what)
					r, err := f(engines[i%2], limiter.WithIdempotency(ctx, id))
					if err != nil {
						t.Errorf("%s attempt %d: %v", what, i, err)
						return
					}
					if !r && !id.Result.Replayed {
						decided.Add(1)
					}
				}()
			}
			wg.Wait()
			if decided.Load() != 1 {
				t.Errorf("%s: %d attempts decided, want 1", what, decided.Load())
			}
		}
		var holdID string
		var mu sync.Mutex
		race("hold", func(e *limiter.Engine, ctx context.Context) (bool, error) {
			h, err := e.Hold(ctx, tenant, []limiter.HoldLimit{{Name: "b", Key: "k", Count: 10}}, 60_000)
			if err == nil && h.ID != "" {
				mu.Lock()
				holdID = h.ID
				mu.Unlock()
			}
			return false, err
		})
		if v := value(t, engines[0], "b", "k"); v != 90 {
			t.Fatalf("after the hold: %v, want 90", v)
		}
		race("settle", func(e *limiter.Engine, ctx context.Context) (bool, error) {
			_, err := e.SettleHold(ctx, tenant, holdID, []float64{15})
			return false, err
		})
		if v := value(t, engines[0], "b", "k"); v != 85 {
			t.Fatalf("after settling 15 of 10: %v, want 85", v)
		}
		h2 := mustHold(t, engines[1], 60_000, limiter.HoldLimit{Name: "b", Key: "k", Count: 7})
		race("release", func(e *limiter.Engine, ctx context.Context) (bool, error) {
			return false, e.ReleaseHold(ctx, tenant, h2.ID)
		})
		if v := value(t, engines[0], "b", "k"); v != 85 {
			t.Fatalf("after the release: %v, want 85", v)
		}
		// Leases: an idempotent batch acquiring one, raced.
		var leaseID string
		var acquired atomic.Int64
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := idem("K-lease", "lease")
				r, err := engines[i%2].LimitIdempotent(ctx, tenant, []limiter.Request{{Name: "jobs", Key: "k", Count: 1}, {Name: "b", Key: "k", Count: 1}}, id)
				if err != nil {
					t.Errorf("lease attempt %d: %v", i, err)
					return
				}
				if !r.Replayed {
					acquired.Add(1)
				}
			}()
		}
		wg.Wait()
		if acquired.Load() != 1 {
			t.Fatalf("%d lease attempts decided", acquired.Load())
		}
		if v := value(t, engines[0], "jobs", "k"); v != 4 {
			t.Fatalf("after one acquisition: %v slots free, want 4", v)
		}
		if v := value(t, engines[0], "b", "k"); v != 84 {
			t.Fatalf("after the lease batch: b %v, want 84", v)
		}
		d := mustLimit(t, engines[0], limiter.Request{Name: "jobs", Key: "k", Count: 1})
		leaseID = d.LeaseID
		race("lease release", func(e *limiter.Engine, ctx context.Context) (bool, error) {
			return false, e.ReleaseLease(ctx, tenant, leaseID)
		})
		if v := value(t, engines[0], "jobs", "k"); v != 4 {
			t.Fatalf("after the release: %v slots free, want 4", v)
		}
	})
}

// TestAnIdempotentBulkRacingOnTwoInstancesDecidesEachItemOnce: one bulk request (three items, two on one key) sent
// six times at once over two instances, each attempt claiming its key and deciding its items
// idempotently: every item is decided once, every attempt answers each item as the first did.
func TestAnIdempotentBulkRacingOnTwoInstancesDecidesEachItemOnce(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		clock := newClock(1_700_000_000_000)
		engines := twoEngines(t, url, clock)
		forever := int64(86_400_000 * 3650)
		mustPut(t, engines[0], "b", limiter.Definition{Kind: limiter.FixedWindow, Rate: 100, Period: forever, Start: ptr(int64(0))})
		reqs := []limiter.Request{{Name: "b", Key: "x", Count: 2}, {Name: "b", Key: "y", Count: 3}, {Name: "b", Key: "x", Count: 5}}
		sum := sha256.Sum256([]byte("bulk"))
		answers := make([][]string, 6)
		var decided atomic.Int64
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e := engines[i%2]
				if err := e.ClaimIdempotencyKey(ctx, tenant, "bulk-K", sum[:]); err != nil {
					t.Errorf("claim %d: %v", i, err)
					return
				}
				idems := make([]*limiter.Idempotency, len(reqs))
				for k := range reqs {
					idems[k] = &limiter.Idempotency{Key: "bulk-K", Part: k, Hash: sum[:], Render: func(b limiter.BatchDecision) limiter.Answer {
						return limiter.Answer{Status: 200, Body: fmt.Appendf(nil, "%v %v", b.OK, b.Results[0].Remaining)}
					}}
				}
				for k, o := range e.EachIdempotent(ctx, tenant, reqs, nil, idems) {
					if o.Err != nil {
						t.Errorf("attempt %d item %d: %v", i, k, o.Err)
						continue
					}
					if !o.Replayed {
						decided.Add(1)
					}
					answers[i] = append(answers[i], string(o.Answer.Body))
				}
			}()
		}
		wg.Wait()
		if decided.Load() != 3 {
			t.Errorf("%d items decided, want 3", decided.Load())
		}
		for i := range answers {
			if fmt.Sprint(answers[i]) != fmt.Sprint(answers[0]) {
				t.Errorf("attempt %d answered %v, the first %v", i, answers[i], answers[0])
			}
		}
		if vx, vy := value(t, engines[0], "b", "x"), value(t, engines[0], "b", "y"); vx != 93 || vy != 97 {
			t.Errorf("x %v (want 93), y %v (want 97)", vx, vy)
		}
	})
}
