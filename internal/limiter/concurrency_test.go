package limiter_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// hammerDuration is how long the concurrency test runs; SLUICE_HAMMER_SECONDS overrides it.
func hammerDuration() time.Duration {
	if s := os.Getenv("SLUICE_HAMMER_SECONDS"); s != "" {
		if d, err := time.ParseDuration(s + "s"); err == nil {
			return d
		}
	}
	return 4 * time.Second
}

// TestConcurrentInstancesNeverOverAdmit runs two engines with their own connection pools (as two
// app processes would have) and 40 goroutines against one PostgreSQL database, hammering an
// unsharded key, a key with 10 shards and a two-limit batch, in real time.
func TestConcurrentInstancesNeverOverAdmit(t *testing.T) {
	ctx := context.Background()
	dbs := instancePools(t, testkit.NewDatabase(t), 16)
	engines := []*limiter.Engine{newEngine(t, dbs[0], limiter.Options{}), newEngine(t, dbs[1], limiter.Options{})}
	e := engines[0]
	// 200 tokens per second with a burst of 50: tight enough that most requests are refused.
	mustPut(t, e, "hot", limiter.Definition{Kind: limiter.TokenBucket, Rate: 200, Period: 1000, Capacity: ptr(50.0)})
	mustPut(t, e, "sharded", limiter.Definition{Kind: limiter.TokenBucket, Rate: 500, Period: 1000, Capacity: ptr(100.0), Shards: 10})
	// The batch limits cannot refill during the test: a fixed window of one hour that began 1 s ago.
	start := time.Now().UnixMilli() - 1000
	mustPut(t, e, "batchA", limiter.Definition{Kind: limiter.FixedWindow, Rate: 3000, Period: 3_600_000, Start: &start})
	mustPut(t, e, "batchB", limiter.Definition{Kind: limiter.FixedWindow, Rate: 20, Period: 3_600_000, Start: &start})

	var hot, sharded, batches, singlesA, refusals atomic.Int64
	var errs sync.Map
	began := time.Now()
	deadline := began.Add(hammerDuration())
	var wg sync.WaitGroup
	for g := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			eng := engines[g%2]
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for time.Now().Before(deadline) {
				var err error
				switch g % 4 {
				case 0, 1:
					var d limiter.Decision
					d, err = eng.Limit(ctx, tenant, limiter.Request{Name: "hot", Key: "k", Count: 1})
					if err == nil && d.OK {
						hot.Add(1)
					}
				case 2:
					var d limiter.Decision
					n := 1 + r.IntN(3)
					d, err = eng.Limit(ctx, tenant, limiter.Request{Name: "sharded", Key: "k", Count: float64(n)})
					if err == nil && d.OK {
						sharded.Add(int64(n))
					}
				case 3:
					if r.IntN(4) == 0 {
						var d limiter.Decision
						d, err = eng.Limit(ctx, tenant, limiter.Request{Name: "batchA", Key: "k", Count: 1})
						if err == nil && d.OK {
							singlesA.Add(1)
						}
						break
					}
					var b limiter.BatchDecision
					b, err = eng.Batch(ctx, tenant, []limiter.Request{
						{Name: "batchA", Key: "k", Count: 2}, {Name: "batchB", Key: "k", Count: 1},
					}, true)
					if err == nil && b.OK {
						batches.Add(1)
					} else if err == nil {
						refusals.Add(1)
					}
				}
				if err != nil {
					errs.Store(err.Error(), true)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began) + 2*time.Millisecond // ms rounding of the engines' clock readings

	errs.Range(func(k, _ any) bool { t.Errorf("decision error leaked: %v", k); return true })
	hotBound := 50 + 200*elapsed.Seconds()
	shardBound := 100 + 500*elapsed.Seconds()
	if float64(hot.Load()) > hotBound {
		t.Errorf("hot key admitted %d > bound %.1f", hot.Load(), hotBound)
	}
	if float64(sharded.Load()) > shardBound {
		t.Errorf("sharded key admitted %d > bound %.1f", sharded.Load(), shardBound)
	}
	// A batch that half-applied would leave A and B inconsistent with the admitted counts.
	a, b := value(t, e, "batchA", "k"), value(t, e, "batchB", "k")
	wantA := 3000 - float64(2*batches.Load()+singlesA.Load())
	wantB := 20 - float64(batches.Load())
	if a != wantA || b != wantB {
		t.Errorf("batch half-applied: A=%v (want %v) B=%v (want %v)", a, wantA, b, wantB)
	}
	if batches.Load() > 20 || refusals.Load() == 0 {
		t.Errorf("batch admitted %d (B holds 20), refused %d: want <= 20 and some refusals", batches.Load(), refusals.Load())
	}
	retries := dbs[0].Retries() + dbs[1].Retries()
	t.Logf("in %v: hot admitted %d (bound %.0f), sharded %d tokens (bound %.0f), batches %d (+%d refused), singles on A %d; serialization retries %d",
		elapsed.Round(time.Millisecond), hot.Load(), hotBound, sharded.Load(), shardBound, batches.Load(), refusals.Load(), singlesA.Load(), retries)
	if retries == 0 {
		t.Error("no serialization retries happened: the test did not exercise contention")
	}
	if hot.Load() < 50 || sharded.Load() < 100 || batches.Load() == 0 {
		t.Error("too little was admitted for the test to mean anything")
	}
}

// TestSkewedClocksCannotMintTokens interleaves two engines whose clocks differ by 5 seconds on
// one key: tokens can only be minted as fast as the fastest clock advances, so the admitted total
// stays within capacity + rate*(elapsed + skew), while an engine that believed its own clock over
// the stored ts would mint a further skew's worth of tokens at every switch.
func TestSkewedClocksCannotMintTokens(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		const skew = 5_000
		base := int64(1_700_000_000_000)
		slow, fast := newClock(base), newClock(base+skew)
		engines := []*limiter.Engine{newEngine(t, d, slow.opts()), newEngine(t, d, fast.opts())}
		mustPut(t, engines[0], "skew", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 1000})
		r := rand.New(rand.NewPCG(1, 2))
		admitted := 0
		const steps = 400
		for range steps {
			slow.Advance(50)
			fast.Advance(50)
			for range 3 {
				got, err := engines[r.IntN(2)].Limit(context.Background(), tenant, limiter.Request{Name: "skew", Key: "k", Count: 1})
				if err != nil {
					t.Fatal(err)
				}
				if got.OK {
					admitted++
				}
			}
		}
		elapsed := float64(steps * 50)
		bound := 10 + 10*(elapsed+skew)/1000
		if float64(admitted) > bound {
			t.Fatalf("admitted %d with skewed clocks, bound %v", admitted, bound)
		}
		if admitted < 200 {
			t.Fatalf("admitted only %d: the test no longer exercises refill", admitted)
		}
	})
}

func TestCheckNeverWritesEvenUnderContention(t *testing.T) {
	d := testkit.Open(t, db.Postgres)
	e := newEngine(t, d, limiter.Options{})
	mustPut(t, e, "c", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 3_600_000})
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if _, err := e.Check(context.Background(), tenant, limiter.Request{Name: "c", Key: "k", Count: 1}); err != nil && !errors.Is(err, context.Canceled) {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var rows int64
	d.Gorm.Raw("SELECT COUNT(*) FROM limit_state").Scan(&rows)
	if rows != 0 {
		t.Fatalf("check wrote %d rows", rows)
	}
}
