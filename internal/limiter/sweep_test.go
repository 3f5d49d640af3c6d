package limiter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// sweepDefs are the stored definitions the sweeper tests churn through: every kind, shards,
// reservations, a fixed window on its per-key offset, and calendar quotas.
var sweepDefs = map[string]limiter.Definition{
	"tb":  {Kind: limiter.TokenBucket, Rate: 5, Period: 10_000, Capacity: ptr(8.0)},
	"tbs": {Kind: limiter.TokenBucket, Rate: 12, Period: 10_000, Shards: 3},
	"tbr": {Kind: limiter.TokenBucket, Rate: 2, Period: 5_000, MaxReserved: ptr(4.0)},
	"fw":  {Kind: limiter.FixedWindow, Rate: 4, Period: 10_000},
	"sw":  {Kind: limiter.SlidingWindow, Rate: 6, Period: 10_000, Resolution: 3},
	"sw2": {Kind: limiter.SlidingWindow, Rate: 4, Period: 6_000, Shards: 2},
	"q":   {Kind: limiter.Quota, Rate: 30, Calendar: "day", TimeZone: "UTC"},
	"qs":  {Kind: limiter.Quota, Rate: 40, Calendar: "day", TimeZone: "Asia/Tokyo", Shards: 2},
}

var sweepNames = []string{"tb", "tbs", "tbr", "fw", "sw", "sw2", "q", "qs"}

// sweepStep is one transaction of the churn: a batch of requests at a clock reading.
type sweepStep struct {
	at      int64
	consume bool
	reqs    []limiter.Request
}

// churn builds a request sequence of about decisions decisions over keys keys: a window of
// active keys slides from the first key to the last, so keys are used for a while, then left to
// refill (the shape that makes state tables grow without a sweeper).
func churn(seed uint64, decisions, keys int, start int64) []sweepStep {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	steps := decisions * 2 / 5 // 2.5 requests per batch on average
	out := make([]sweepStep, 0, steps)
	now := start
	n := 0
	for i := 0; n < decisions; i++ {
		now += int64(r.IntN(11)) // 5 ms per step on average: a key refills ~2,000 steps after its last use
		centre := i * keys / steps
		st := sweepStep{at: now, consume: r.IntN(10) != 0}
		for range 1 + r.IntN(4) {
			name := sweepNames[r.IntN(len(sweepNames))]
			req := limiter.Request{Name: name, Key: fmt.Sprintf("k%d", min(keys-1, centre+r.IntN(20))), Count: float64(1 + r.IntN(2))}
			if name == "tbr" && r.IntN(2) == 0 {
				req.Reserve = true
			}
			st.reqs = append(st.reqs, req)
		}
		n += len(st.reqs)
		out = append(out, st)
	}
	return out
}

// stepResult is what one step decided, or the error it failed with.
type stepResult struct {
	dec limiter.BatchDecision
	err string
}

// seededIntN is a goroutine-safe deterministic IntN, so two engines pick the same shards.
func seededIntN(seed uint64) func(int) int {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed))
	return func(n int) int {
		mu.Lock()
		defer mu.Unlock()
		return r.IntN(n)
	}
}

type stateRow struct {
	TenantID int64
	Name     string
	Key      string
	Shard    int
	TS       int64 `gorm:"column:ts"`
}

func stateRows(t *testing.T, d *db.DB) []stateRow {
	t.Helper()
	var rows []stateRow
	if err := d.Gorm.Raw(`SELECT tenant_id, name, key, shard, ts FROM limit_state`).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	return rows
}

func sweepScale(t *testing.T) (decisions, keys int) {
	switch {
	case os.Getenv("SLUICE_SWEEP_SCALE") == "full":
		return 1_000_000, 200_000
	case testing.Short():
		return 2_000, 500
	default:
		return 20_000, 5_000
	}
}

// TestSweepKeepsOnlyUnfullStateAndNeverChangesADecision runs the same churn on two databases,
// sweeping one of them every tenth of the run, and compares every decision. After each sweep the
// swept table may hold only rows that are not full (checked through GetValue, independently of
// the sweeper's own test); after a long quiet period a sweep must leave the table empty; and the
// decisions on keys that come back after that are still identical.
func TestSweepKeepsOnlyUnfullStateAndNeverChangesADecision(t *testing.T) {
	decisions, keys := sweepScale(t)
	testkit.Each(t, func(t *testing.T, swept *db.DB) {
		const start = int64(1_700_000_000_000)
		steps := churn(7, decisions, keys, start)
		dialect := swept.Dialect
		plain := testkit.Open(t, dialect)
		clockA, clockB := newClock(start), newClock(start)
		a := newEngine(t, swept, limiter.Options{Now: clockA.Now, IntN: seededIntN(1)})
		b := newEngine(t, plain, limiter.Options{Now: clockB.Now, IntN: seededIntN(1)})
		for _, name := range sweepNames {
			mustPut(t, a, name, sweepDefs[name])
			mustPut(t, b, name, sweepDefs[name])
		}
		ctx := context.Background()
		run := func(e *limiter.Engine, clock *fakeClock, steps []sweepStep, out []stepResult, afterStep func(i int)) {
			for i, st := range steps {
				clock.Set(st.at)
				reqs := append([]limiter.Request(nil), st.reqs...)
				dec, err := e.Batch(ctx, tenant, reqs, st.consume)
				out[i] = stepResult{dec: dec}
				if err != nil {
					out[i].err = err.Error()
				}
				if afterStep != nil {
					afterStep(i)
				}
			}
		}

		resA, resB := make([]stepResult, len(steps)), make([]stepResult, len(steps))
		var totalDeleted, maxRows int
		began := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() { run(b, clockB, steps, resB, nil) })
		run(a, clockA, steps, resA, func(i int) {
			if (i+1)%(len(steps)/10) != 0 && i != len(steps)-1 {
				return
			}
			maxRows = max(maxRows, len(stateRows(t, swept)))
			n, err := a.Sweep(ctx, 200)
			if err != nil {
				t.Fatalf("sweep after step %d: %v", i, err)
			}
			totalDeleted += n
			if (i+1)%(len(steps)/2) == 0 || i == len(steps)-1 {
				checkOnlyUnfullRemain(t, a, swept, clockA)
			}
		})
		wg.Wait()
		compareResults(t, steps, resA, resB)
		remaining := len(stateRows(t, swept))
		unswept := len(stateRows(t, plain))
		if totalDeleted == 0 || remaining >= unswept {
			t.Fatalf("sweeping deleted %d rows; %d remain against %d without sweeping", totalDeleted, remaining, unswept)
		}

		// A day later every key is full again: a sweep must leave nothing behind.
		later := steps[len(steps)-1].at + 86_400_000
		clockA.Set(later)
		n, err := a.Sweep(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if left := stateRows(t, swept); len(left) != 0 {
			t.Fatalf("after a quiet day %d rows survive the sweep, e.g. %+v", len(left), left[0])
		}
		totalDeleted += n

		// The early keys come back: decisions on the swept database (no rows) and on the unswept
		// one (all the old, full rows) must still agree.
		again := churn(8, min(decisions/10, 4_000), keys/4, later)
		resA, resB = make([]stepResult, len(again)), make([]stepResult, len(again))
		wg.Go(func() { run(b, clockB, again, resB, nil) })
		run(a, clockA, again, resA, nil)
		wg.Wait()
		compareResults(t, again, resA, resB)
		t.Logf("%s: %d decisions in %d transactions over %d keys (+%d after a quiet day); swept %d rows; "+
			"table peaked at %d rows before a sweep, %d rows after the last churn sweep vs %d unswept; %v",
			dialect, decisions, len(steps), keys, min(decisions/10, 4_000), totalDeleted, maxRows, remaining, unswept,
			time.Since(began).Round(time.Millisecond))
	})
}

func compareResults(t *testing.T, steps []sweepStep, a, b []stepResult) {
	t.Helper()
	allowed := 0
	for i := range steps {
		if !reflect.DeepEqual(a[i], b[i]) {
			t.Fatalf("step %d (%+v at %d) differs:\nswept:   %+v\nunswept: %+v", i, steps[i].reqs, steps[i].at, a[i], b[i])
		}
		// A batch whose items on one key together are more than it can ever hold is a 400
		// count_exceeds_capacity (the same on both databases); any other error is a failure.
		if a[i].err != "" && !strings.HasPrefix(a[i].err, string(apperr.CountExceedsCapacity)+":") {
			t.Fatalf("step %d failed: %s", i, a[i].err)
		}
		if a[i].dec.OK {
			allowed++
		}
	}
	if allowed == 0 || allowed == len(steps) {
		t.Fatalf("%d of %d steps allowed: the churn does not exercise refusals and admissions both", allowed, len(steps))
	}
}

// checkOnlyUnfullRemain is the independent oracle: every row left after a sweep at T must read,
// through GetValue at T - SweepClockGrace, as below its shard's maximum, unless it was written
// within the grace.
func checkOnlyUnfullRemain(t *testing.T, e *limiter.Engine, d *db.DB, clock *fakeClock) {
	t.Helper()
	now := clock.Now().UnixMilli()
	clock.Set(now - limiter.SweepClockGrace.Milliseconds())
	defer clock.Set(now)
	rows := stateRows(t, d)
	checked := 0
	for i, r := range rows {
		if len(rows) > 300 && i%(len(rows)/300+1) != 0 {
			continue // a sample keeps the oracle cheap on large tables
		}
		if r.TS > now-limiter.SweepClockGrace.Milliseconds() {
			continue
		}
		v, err := e.GetValue(context.Background(), r.TenantID, r.Name, r.Key)
		if err != nil {
			t.Fatal(err)
		}
		def := sweepDefs[r.Name]
		shardMax := def.Max() / float64(max(def.Shards, 1))
		if v.Shards[r.Shard].Value >= shardMax {
			t.Fatalf("row %+v is full (%v of %v) at %d but survived the sweep", r, v.Shards[r.Shard].Value, shardMax, now)
		}
		checked++
	}
	if len(rows) > 0 && checked == 0 {
		t.Fatalf("no surviving row was old enough to check (%d rows)", len(rows))
	}
}

// hookClock is a fake clock that runs a hook at its next reading once armed.
type hookClock struct {
	fakeClock
	hook atomic.Pointer[func()]
}

func (c *hookClock) Now() time.Time {
	if h := c.hook.Swap(nil); h != nil {
		(*h)()
	}
	return c.fakeClock.Now()
}

// TestSweepKeepsARowConsumedBetweenScanAndDelete consumes a full key after the sweeper has
// scanned it as a candidate (its first clock reading follows the scan) and before the deleting
// transaction re-reads it: the re-read must see the consumption and keep the row.
func TestSweepKeepsARowConsumedBetweenScanAndDelete(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		clock := &hookClock{}
		clock.Set(1_700_000_000_000)
		sweeper := newEngine(t, d, limiter.Options{Now: clock.Now})
		other := newEngine(t, d, limiter.Options{Now: clock.fakeClock.Now})
		mustPut(t, other, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 1000})
		if got := mustLimit(t, other, limiter.Request{Name: "tb", Key: "k", Count: 10}); !got.OK {
			t.Fatal(got)
		}
		clock.Advance(5_000) // long refilled
		consume := func() {
			if got := mustLimit(t, other, limiter.Request{Name: "tb", Key: "k", Count: 7}); !got.OK || got.Remaining != 3 {
				t.Errorf("consumption between scan and delete: %+v", got)
			}
		}
		clock.hook.Store(&consume)
		n, err := sweeper.Sweep(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 || clock.hook.Load() != nil {
			t.Fatalf("deleted %d rows (hook ran: %v)", n, clock.hook.Load() == nil)
		}
		if v := value(t, other, "tb", "k"); v != 3 {
			t.Fatalf("value after the sweep = %v, want 3 (the consumption was lost)", v)
		}
		clock.Advance(700) // refills to exactly full: now it goes
		if n, err := sweeper.Sweep(ctx, 10); err != nil || n != 0 {
			t.Fatalf("within the clock grace the row must stay: %d, %v", n, err)
		}
		clock.Advance(limiter.SweepClockGrace.Milliseconds())
		if n, err := sweeper.Sweep(ctx, 10); err != nil || n != 1 {
			t.Fatalf("a full row must go: %d, %v", n, err)
		}
	})
}

// TestSweepNeverDeletesStateAheadOfItsClock: a fast instance's ts in the future is what keeps its
// skew from minting tokens, so a sweeper with a slower clock must leave it, full or not.
func TestSweepNeverDeletesStateAheadOfItsClock(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		fast, slow := newClock(1_700_000_060_000), newClock(1_700_000_000_000)
		ef := newEngine(t, d, fast.opts())
		es := newEngine(t, d, slow.opts())
		mustPut(t, ef, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 1000})
		mustPut(t, ef, "sw", limiter.Definition{Kind: limiter.SlidingWindow, Rate: 10, Period: 1000})
		mustLimit(t, ef, limiter.Request{Name: "tb", Key: "k", Count: 0}) // full, ts a minute ahead
		mustLimit(t, ef, limiter.Request{Name: "sw", Key: "k", Count: 1})
		if n, err := es.Sweep(ctx, 0); err != nil || n != 0 {
			t.Fatalf("slow sweeper deleted %d rows written ahead of its clock (%v)", n, err)
		}
		slow.Advance(64_000)
		if n, err := es.Sweep(ctx, 0); err != nil || n != 2 {
			t.Fatalf("once its clock passes them: deleted %d, %v; want 2", n, err)
		}
	})
}

// TestSweepForgetsInlineStateAfterItsTTL: without a stored definition fullness cannot be proved,
// so inline-config state is kept for InlineStateTTL after its ts and then deleted; state of a
// stored definition with the same age but not yet full stays.
func TestSweepForgetsInlineStateAfterItsTTL(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		inline := &limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 7 * 86_400_000}
		mustLimit(t, e, limiter.Request{Name: "adhoc", Key: "k", Count: 1, Config: inline})
		mustPut(t, e, "weekly", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 7 * 86_400_000})
		mustLimit(t, e, limiter.Request{Name: "weekly", Key: "k", Count: 1})
		clock.Advance(limiter.InlineStateTTL.Milliseconds() - 1)
		if n, err := e.Sweep(ctx, 0); err != nil || n != 0 {
			t.Fatalf("before the TTL: deleted %d, %v", n, err)
		}
		clock.Advance(1)
		if n, err := e.Sweep(ctx, 0); err != nil || n != 1 {
			t.Fatalf("at the TTL: deleted %d, %v; want the inline row only", n, err)
		}
		if v := value(t, e, "weekly", "k"); v >= 1 {
			t.Fatalf("the stored definition's unfull state was lost: %v", v)
		}
	})
}

// TestSweepUnderConcurrentDecisionsNeverOverAdmits sweeps in a loop while goroutines consume
// four keys in real time, in bursts separated by pauses long enough for the keys to refill and
// pass SweepClockGrace, so that rows turn full and are deleted just as the next burst races the
// deletions. The
// token bucket bound capacity + rate*T/period must hold for every key.
func TestSweepUnderConcurrentDecisionsNeverOverAdmits(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		e := newEngine(t, d, limiter.Options{})
		// 100 tokens per second, burst 5: full again 50 ms after a burst.
		mustPut(t, e, "hot", limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 1000, Capacity: ptr(5.0)})
		const cycle, burst = 1300 * time.Millisecond, 50 * time.Millisecond
		run := 2*cycle + burst + 50*time.Millisecond // three bursts
		if testing.Short() {
			run = cycle + burst + 50*time.Millisecond
		}
		const keys = 4
		began := time.Now()
		deadline := began.Add(run)
		var mu sync.Mutex
		var admitted [keys][]testkit.Span
		var sweeps, deleted atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				key := g % keys
				for now := time.Now(); now.Before(deadline); now = time.Now() {
					if phase := now.Sub(began) % cycle; phase > burst {
						time.Sleep(min(cycle-phase, time.Until(deadline)))
						continue
					}
					got, err := e.Limit(ctx, tenant, limiter.Request{Name: "hot", Key: fmt.Sprint("k", key), Count: 1})
					if err == nil && got.OK {
						mu.Lock()
						admitted[key] = append(admitted[key], testkit.Span{Sent: now, Answered: time.Now()})
						mu.Unlock()
					}
				}
			})
		}
		wg.Go(func() {
			for time.Now().Before(deadline) {
				n, err := e.Sweep(ctx, 0)
				if err != nil {
					t.Errorf("sweep: %v", err)
					return
				}
				sweeps.Add(1)
				deleted.Add(int64(n))
			}
		})
		wg.Wait()
		elapsed := time.Since(began)
		total := 0
		for k := range admitted {
			if err := testkit.TokenBucket(admitted[k], 5, 100); err != nil {
				t.Fatal(err)
			}
			total += len(admitted[k])
		}
		if deleted.Load() == 0 {
			t.Fatalf("no row was swept in %d sweeps: the test raced nothing", sweeps.Load())
		}
		t.Logf("%d admitted over %d keys with %d sweeps deleting %d rows in %v",
			total, keys, sweeps.Load(), deleted.Load(), elapsed.Round(time.Millisecond))
	})
}

// span is when a request was sent and when its answer came: the decision happened in between.
