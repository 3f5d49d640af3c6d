package limiter_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestConcurrentShadowBatchesAndPenaltiesHoldTheBounds hammers, from two engines (on PostgreSQL
// each with its own connection pool, as two app instances; on SQLite sharing the one file),
//   - batches of an enforced fixed window (30 per hour) and a shadow one (5 per hour): the batch
//     is refused only by the enforced limit, which admits exactly its 30; the shadow limit admits
//     (would admit) exactly its 5 and reports every later one as a would-be refusal;
//   - one key of a token bucket (20 per second, burst 10) with a 150 ms penalty, shorter than the
//     500 ms the burst takes to refill (so that a penalty that handed out tokens would show): the
//     admissions seen from outside never exceed the bound of the limit alone, and penalties did
//     engage.
func TestConcurrentShadowBatchesAndPenaltiesHoldTheBounds(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		h := newHooks()
		first, err := db.Open(ctx, url, db.Options{MaxOpenConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		defer first.Close()
		if err := first.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		second := first
		if first.Dialect == db.Postgres {
			if second, err = db.Open(ctx, url, db.Options{MaxOpenConns: 8}); err != nil {
				t.Fatal(err)
			}
			defer second.Close()
		}
		engines := []*limiter.Engine{newEngine(t, first, h.options(limiter.Options{})), newEngine(t, second, h.options(limiter.Options{}))}
		e := engines[0]
		start := time.Now().UnixMilli() - 1000 // windows that cannot roll over during the test
		mustPut(t, e, "enf", limiter.Definition{Kind: limiter.FixedWindow, Rate: 30, Period: 3_600_000, Start: &start})
		mustPut(t, e, "sh", limiter.Definition{Kind: limiter.FixedWindow, Rate: 5, Period: 3_600_000, Start: &start, Mode: limiter.Shadow})
		mustPut(t, e, "pen", limiter.Definition{Kind: limiter.TokenBucket, Rate: 20, Period: 1000, Capacity: ptr(10.0), Penalty: 150})

		var admittedBatches, refusedBatches, shadowOK, shadowRefused, wrongRefusals atomic.Int64
		// A refusal that starts a penalty says 150 ms; one refused by a running penalty says the
		// time left (under 150 ms); the limit alone never says more than 50 ms (one token).
		var penalized atomic.Int64
		var mu sync.Mutex
		var spans []testkit.Span
		var errs sync.Map
		deadline := time.Now().Add(hammerDuration() / 2)
		// The batches go on past the deadline until the enforced limit has refused one (it holds
		// 30), however slowly a busy machine lets them through, up to a generous bound.
		batchesDeadline := time.Now().Add(60 * time.Second)
		// So do the penalty key's callers until a running penalty has refused one: on a busy
		// machine they may not empty the bucket before the deadline.
		more := func(g int) bool {
			if g%2 == 0 && refusedBatches.Load() == 0 || g%2 == 1 && penalized.Load() == 0 {
				return time.Now().Before(batchesDeadline)
			}
			return time.Now().Before(deadline)
		}
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				eng := engines[g%2]
				for more(g) {
					if g%2 == 0 {
						b, err := eng.Batch(ctx, tenant, []limiter.Request{{Name: "enf", Key: "k", Count: 1}, {Name: "sh", Key: "k", Count: 1}}, true)
						if err != nil {
							errs.Store(err.Error(), true)
							continue
						}
						sh := b.Results[1]
						switch {
						case !sh.OK || sh.Shadow == nil:
							wrongRefusals.Add(1) // a shadow limit must never refuse
						case b.OK && sh.Shadow.OK:
							shadowOK.Add(1)
						case b.OK:
							shadowRefused.Add(1)
						}
						if b.OK {
							admittedBatches.Add(1)
						} else {
							refusedBatches.Add(1)
							if b.Results[0].OK {
								wrongRefusals.Add(1) // refused although its enforced limit admitted
							}
						}
						continue
					}
					sent := time.Now()
					d, err := eng.Limit(ctx, tenant, limiter.Request{Name: "pen", Key: "k", Count: 1})
					answered := time.Now()
					if err != nil {
						errs.Store(err.Error(), true)
						continue
					}
					if d.OK {
						mu.Lock()
						spans = append(spans, testkit.Span{Sent: sent, Answered: answered})
						mu.Unlock()
					} else if d.RetryAfter != nil && *d.RetryAfter > 50 && *d.RetryAfter < 150 {
						penalized.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		errs.Range(func(k, _ any) bool { t.Errorf("decision error: %v", k); return true })

		if n := wrongRefusals.Load(); n != 0 {
			t.Errorf("%d batches were refused by their shadow limit, or the shadow limit answered not ok", n)
		}
		if refusedBatches.Load() == 0 {
			t.Fatalf("waited 60 s for the enforced limit to refuse a batch; admitted %d", admittedBatches.Load())
		}
		if penalized.Load() == 0 {
			t.Fatalf("waited 60 s for a running penalty to refuse a decision; admitted %d on the penalty key", len(spans))
		}
		if a := admittedBatches.Load(); a != 30 {
			t.Errorf("admitted %d batches, but the enforced limit holds exactly 30", a)
		}
		if v := value(t, e, "enf", "k"); v != 30-float64(admittedBatches.Load()) {
			t.Errorf("enforced value %v does not match %d admitted batches", v, admittedBatches.Load())
		}
		if shadowOK.Load() != 5 || shadowRefused.Load() != admittedBatches.Load()-5 {
			t.Errorf("shadow: %d would-be admissions (want exactly 5), %d would-be refusals (want %d)",
				shadowOK.Load(), shadowRefused.Load(), admittedBatches.Load()-5)
		}
		if v := value(t, e, "sh", "k"); v != 0 {
			t.Errorf("shadow value %v: its would-be refusals wrote something", v)
		}
		if _, _, s := h.counts("sh"); int64(s) != shadowRefused.Load() {
			t.Errorf("counted %d shadow refusals, observed %d", s, shadowRefused.Load())
		}

		if err := testkit.TokenBucket(spans, 10, 20); err != nil {
			t.Errorf("penalty limit over its bound: %v", err)
		}
		if len(spans) < 10 || penalized.Load() == 0 {
			t.Errorf("admitted %d on the penalty key, %d refusals by a running penalty: penalties did not engage", len(spans), penalized.Load())
		}
		t.Logf("batches %d admitted, %d refused; shadow %d ok, %d would-be refused; penalty key admitted %d, %d refused by a running penalty",
			admittedBatches.Load(), refusedBatches.Load(), shadowOK.Load(), shadowRefused.Load(), len(spans), penalized.Load())
	})
}
