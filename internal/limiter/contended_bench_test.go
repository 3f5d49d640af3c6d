package limiter_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// BenchmarkANeighbourOfAContendedKey measures what one tenant's contended key costs another
// tenant of the same instance. Two instances (engines with their own pools) share one
// PostgreSQL; 8 callers of tenant 1, alternating between them, decide on one key as fast as
// they can ("leases": acquire a concurrency lease of 4 and release it, two transactions that
// lose the row to the other instance often; "token-bucket": one decision each; "parent": each
// decision on one of 64 keys under one parent, whose row they all write), while 2
// callers of tenant 2 make 1,500 token-bucket decisions each on keys of their own through the
// first instance. Each iteration is one such run; it reports the neighbour's latencies, the
// contended key's decisions per second, and the errors and give-ups of both. Run with
// make bench-contended (docs/performance.md, "2026-11-29").
func BenchmarkANeighbourOfAContendedKey(b *testing.B) {
	for _, contended := range []string{"leases", "token-bucket", "parent"} {
		b.Run(contended, func(b *testing.B) {
			var neighbour []time.Duration
			var decided, neighbourErrs, contendedErrs, giveUps int64
			var secs float64
			for i := range b.N {
				r := runContended(b, contended, fmt.Sprint("run", i))
				neighbour = append(neighbour, r.neighbour...)
				decided += r.decided
				secs += r.secs
				neighbourErrs += r.neighbourErrs
				contendedErrs += r.contendedErrs
				giveUps += r.giveUps
			}
			slices.Sort(neighbour)
			at := func(q float64) float64 {
				return float64(neighbour[int(q*float64(len(neighbour)-1))].Microseconds()) / 1000
			}
			b.ReportMetric(at(0.5), "neighbour-p50-ms")
			b.ReportMetric(at(0.99), "neighbour-p99-ms")
			b.ReportMetric(at(0.999), "neighbour-p99.9-ms")
			b.ReportMetric(at(1), "neighbour-max-ms")
			b.ReportMetric(float64(neighbourErrs), "neighbour-errors")
			b.ReportMetric(float64(decided)/secs, "contended-decisions/s")
			b.ReportMetric(float64(contendedErrs), "contended-errors")
			b.ReportMetric(float64(giveUps), "give-ups")
			b.ReportMetric(0, "ns/op") // an iteration is a whole run: its time says nothing
		})
	}
}

// contendedInstances runs an engine on each of two pools of 16 (two app processes) on a fresh
// PostgreSQL database until b ends.
func contendedInstances(b *testing.B) ([]*db.DB, []*limiter.Engine) {
	pools := instancePools(b, testkit.URL(b, db.Postgres), 16)
	var engines []*limiter.Engine
	for _, d := range pools {
		engines = append(engines, newEngine(b, d, limiter.Options{}))
	}
	return pools, engines
}

// hammer starts n callers, alternating between the engines, each calling call again and again
// until stop is called, which waits for them.
func hammer(engines []*limiter.Engine, n int, call func(e *limiter.Engine)) (stop func()) {
	done := make(chan struct{})
	var callers sync.WaitGroup
	for i := range n {
		e := engines[i%len(engines)]
		callers.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				call(e)
			}
		})
	}
	return func() { close(done); callers.Wait() }
}

type contendedRun struct {
	neighbour                    []time.Duration
	decided                      int64 // the contended key's decisions (admitted or refused)
	secs                         float64
	neighbourErrs, contendedErrs int64
	giveUps                      int64 // both instances' decision transactions that gave up
}

func runContended(b *testing.B, contended, run string) contendedRun {
	ctx := context.Background()
	pools, engines := contendedInstances(b)
	name, other := "conc_"+run, "tb_"+run
	def := limiter.Definition{Kind: limiter.Concurrency, Rate: 4, LeaseTTL: 60_000}
	unbounded := limiter.Definition{Kind: limiter.TokenBucket, Rate: 1e9, Period: 1000}
	type definition struct {
		tenantID int64
		name     string
		def      limiter.Definition
	}
	puts := []definition{{2, other, unbounded}}
	switch contended {
	case "token-bucket":
		def = limiter.Definition{Kind: limiter.TokenBucket, Rate: 1000, Period: 1000}
	case "parent":
		def = unbounded
		def.Parents = []limiter.Parent{{Name: "org_" + run, Key: "o"}}
		puts = append(puts, definition{tenant, "org_" + run, unbounded})
	}
	for _, put := range append(puts, definition{tenant, name, def}) {
		if _, _, err := engines[0].PutDefinition(ctx, put.tenantID, put.name, put.def, nil); err != nil {
			b.Fatal(err)
		}
	}
	var out contendedRun
	var mu sync.Mutex
	var decided, contendedErrs atomic.Int64
	var calls atomic.Int64
	stop := hammer(engines, 8, func(e *limiter.Engine) {
		key := "k"
		if contended == "parent" { // keys of their own, under one parent
			key = fmt.Sprint("u", calls.Add(1)%64)
		}
		d, err := e.Limit(ctx, tenant, limiter.Request{Name: name, Key: key, Count: 1})
		if err != nil {
			contendedErrs.Add(1)
			return
		}
		decided.Add(1)
		if d.LeaseID != "" {
			if err := e.ReleaseLease(ctx, tenant, d.LeaseID); err != nil {
				contendedErrs.Add(1)
			}
		}
	})
	began := time.Now()
	var neighbours sync.WaitGroup
	for c := range 2 {
		neighbours.Go(func() {
			for i := range 1500 {
				t0 := time.Now()
				_, err := engines[0].Limit(ctx, 2, limiter.Request{Name: other, Key: fmt.Sprint(c, "-", i%50), Count: 1})
				took := time.Since(t0)
				mu.Lock()
				if err != nil {
					out.neighbourErrs++
				} else {
					out.neighbour = append(out.neighbour, took)
				}
				mu.Unlock()
			}
		})
	}
	neighbours.Wait()
	out.secs = time.Since(began).Seconds()
	out.decided = decided.Load() // while the neighbours ran (the callers are still going)
	stop()
	out.contendedErrs = contendedErrs.Load()
	for _, d := range pools {
		out.giveUps += d.GiveUpsFor(db.PurposeDecision)
	}
	return out
}

// BenchmarkHoldsOnAKeyTwoInstancesHammer measures holds reserved and settled on a key that two
// instances decide on as fast as they can (16 callers of plain token-bucket decisions, 8 per
// instance): a settle reads the key's row and writes it a round trip later, so a decision of the
// other instance committed in between makes it retry. Each iteration is 30 holds, each reserved
// and then settled for less, alternating between the instances, one after the other; it reports
// their latencies (reserve + settle) and the give-ups. Run with make bench-contended.
func BenchmarkHoldsOnAKeyTwoInstancesHammer(b *testing.B) {
	var took []time.Duration
	var errs, giveUps int64
	for range b.N {
		ctx := context.Background()
		pools, engines := contendedInstances(b)
		if _, _, err := engines[0].PutDefinition(ctx, tenant, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1e9, Period: 1000}, nil); err != nil {
			b.Fatal(err)
		}
		stop := hammer(engines, 16, func(e *limiter.Engine) {
			_, _ = e.Limit(ctx, tenant, limiter.Request{Name: "tb", Key: "k", Count: 1})
		})
		for i := range 30 {
			e := engines[i%2]
			t0 := time.Now()
			h, err := e.Hold(ctx, tenant, []limiter.HoldLimit{{Name: "tb", Key: "k", Count: 2}}, 60_000)
			if err == nil {
				_, err = e.SettleHold(ctx, tenant, h.ID, []float64{1})
			}
			if err != nil {
				errs++
				continue
			}
			took = append(took, time.Since(t0))
		}
		stop()
		for _, d := range pools {
			giveUps += d.GiveUpsFor(db.PurposeDecision)
		}
	}
	slices.Sort(took)
	at := func(q float64) float64 { return float64(took[int(q*float64(len(took)-1))].Microseconds()) / 1000 }
	b.ReportMetric(at(0.5), "hold+settle-p50-ms")
	b.ReportMetric(at(0.9), "hold+settle-p90-ms")
	b.ReportMetric(at(1), "hold+settle-max-ms")
	b.ReportMetric(float64(errs), "errors")
	b.ReportMetric(float64(giveUps), "give-ups")
	b.ReportMetric(0, "ns/op") // an iteration is a whole run: its time says nothing
}
