package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// A window no test outlives: with it, a batch is sent only when it holds maxItems calls, so a
// test knows which calls share a request without timing anything.
const never = time.Hour

// batchingClient is a client of the real Sluice with batching on, counting its requests.
func batchingClient(t *testing.T, window time.Duration, maxItems int, opts ...sluice.Option) (*sluice.Client, *countingTransport) {
	t.Helper()
	ct := &countingTransport{}
	opts = append([]sluice.Option{sluice.WithHTTPClient(&http.Client{Transport: ct}), sluice.WithBatching(window, maxItems)}, opts...)
	return sluice.New(baseURL, secretKey, opts...), ct
}

// outcome is what one Limit call returned.
type outcome struct {
	r   sluice.Result
	err error
}

// limitAll makes the calls concurrently, released together, and returns their outcomes in order.
func limitAll(c *sluice.Client, ctx context.Context, items []sluice.Item) []outcome {
	out := make([]outcome, len(items))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Go(func() {
			<-start
			out[i].r, out[i].err = c.Limit(ctx, it.Name, it.Decision)
		})
	}
	close(start)
	wg.Wait()
	return out
}

func repeat(n int, it sluice.Item) []sluice.Item {
	items := make([]sluice.Item, n)
	for i := range items {
		items[i] = it
	}
	return items
}

func TestBatchedLimitsAdmitExactlyTheLimitInFarFewerRequests(t *testing.T) {
	ctx := testCtx(t)
	name := limitName(t, "fw")
	start := time.Now().UnixMilli() // one window of an hour from now: no rollover during the test
	if _, err := newClient(t).Put(ctx, name, sluice.Definition{Kind: sluice.FixedWindow, Rate: 100, Period: 3_600_000, Start: &start}); err != nil {
		t.Fatal(err)
	}
	const calls = 300
	c, ct := batchingClient(t, 50*time.Millisecond, 100)
	admitted := 0
	for i, o := range limitAll(c, ctx, repeat(calls, sluice.Item{Name: name, Decision: sluice.Decision{Key: "k"}})) {
		if o.err != nil {
			t.Fatalf("call %d: %v", i, o.err)
		}
		if o.r.Name != name || o.r.Key != "k" || o.r.Degraded || (!o.r.OK && o.r.RetryAfter <= 0) {
			t.Fatalf("call %d: %+v", i, o.r)
		}
		if o.r.OK {
			admitted++
		}
	}
	if admitted != 100 {
		t.Fatalf("%d of %d calls admitted by a window of 100", admitted, calls)
	}
	// At least 3 (100 a batch); the 50 ms window gathers the released calls into a few more.
	if n := ct.n.Load(); n < 3 || n > calls/10 {
		t.Fatalf("%d requests for %d concurrent calls, want 3 to %d", n, calls, calls/10)
	}
}

func TestALoneBatchedCallIsSentWhenTheWindowEnds(t *testing.T) {
	ctx := testCtx(t)
	name := limitName(t, "w")
	putLimit(t, newClient(t), name, 2)
	c, ct := batchingClient(t, 5*time.Millisecond, 100) // far from full: only the window sends it
	for want := 1.0; want >= 0; want-- {
		if r, err := c.Limit(ctx, name, sluice.Decision{Key: "k"}); err != nil || !r.OK || !near(r.Remaining, want) || r.RateLimit != "" {
			t.Fatalf("%+v, %v: want admitted with %v left and no headers (a bulk answer has none)", r, err, want)
		}
	}
	if n := ct.n.Load(); n != 2 {
		t.Fatalf("%d requests, want one per call", n)
	}
}

func TestBatchedResultsGoToTheirOwnCallers(t *testing.T) {
	ctx := testCtx(t)
	name := limitName(t, "tb")
	if _, err := newClient(t).Put(ctx, name, sluice.Definition{Kind: sluice.TokenBucket, Rate: 10, Period: 3_600_000}); err != nil {
		t.Fatal(err)
	}
	const calls = 60
	// Every third key has 5 of its 10 tokens spent already, so larger counts are refused there.
	var drain []sluice.Item
	for i := 0; i < calls; i += 3 {
		drain = append(drain, sluice.Item{Name: name, Decision: sluice.Decision{Key: fmt.Sprint("k", i), Count: sluice.Count(5)}})
	}
	if _, err := newClient(t).Bulk(ctx, drain); err != nil {
		t.Fatal(err)
	}
	items := make([]sluice.Item, calls)
	for i := range items { // count 11 is more than the capacity: an error of that call only
		items[i] = sluice.Item{Name: name, Decision: sluice.Decision{Key: fmt.Sprint("k", i), Count: sluice.Count(float64(i % 12))}}
	}
	c, ct := batchingClient(t, never, calls)
	out := limitAll(c, ctx, items)
	if n := ct.n.Load(); n != 1 {
		t.Fatalf("%d requests, want the calls in one batch", n)
	}
	for i, o := range out {
		left := 10.0
		if i%3 == 0 {
			left = 5
		}
		count := float64(i % 12)
		switch {
		case count > 10:
			if e := asError(t, o.err); e.Code != sluice.CodeCountExceedsCapacity || e.Field != "count" {
				t.Errorf("call %d (count %v): %+v", i, count, e)
			}
		case o.err != nil:
			t.Errorf("call %d: %v", i, o.err)
		case o.r.Key != fmt.Sprint("k", i) || o.r.Name != name:
			t.Errorf("call %d got the result of %s/%s", i, o.r.Name, o.r.Key)
		case count <= left && (!o.r.OK || !near(o.r.Remaining, left-count)):
			t.Errorf("call %d (count %v of %v): %+v, want admitted with %v left", i, count, left, o.r, left-count)
		case count > left && (o.r.OK || o.r.RetryAfter <= 0):
			t.Errorf("call %d (count %v of %v): %+v, want refused", i, count, left, o.r)
		}
	}
}

func TestABadBatchedCallGetsTheErrorItWouldGetAlone(t *testing.T) {
	ctx := testCtx(t)
	name := limitName(t, "ok")
	putLimit(t, newClient(t), name, 10)
	bad := []sluice.Item{
		{Name: limitName(t, "missing"), Decision: sluice.Decision{Key: "k"}},
		{Name: name, Decision: sluice.Decision{Key: "k", IP: "not-an-address"}},
		{Name: name, Decision: sluice.Decision{Key: "session:x"}},
		{Name: name, Decision: sluice.Decision{Key: strings.Repeat("k", 40_000)}}, // sent alone: too big to batch
	}
	items := append(repeat(3, sluice.Item{Name: name, Decision: sluice.Decision{Key: "k"}}), bad...)
	c, ct := batchingClient(t, never, len(items)-1)
	out := limitAll(c, ctx, items)
	if n := ct.n.Load(); n != 2 {
		t.Fatalf("%d requests, want 2 (one batch, one call alone)", n)
	}
	for i, o := range out[:3] {
		if o.err != nil || !o.r.OK {
			t.Fatalf("good call %d: %+v, %v", i, o.r, o.err)
		}
	}
	alone := newClient(t)
	for k, it := range bad {
		batched := asError(t, out[3+k].err)
		_, err := alone.Limit(ctx, it.Name, it.Decision)
		single := asError(t, err)
		if batched.Status != single.Status || batched.Code != single.Code || batched.Field != single.Field || batched.Detail != single.Detail || batched.RequestID == "" {
			t.Errorf("%+v batched: %+v; alone: %+v", it, batched, single)
		}
	}
	if e := asError(t, out[3].err); e.Code != sluice.CodeLimitNotFound || e.Status != http.StatusNotFound {
		t.Errorf("unknown limit: %+v", e)
	}
	if e := asError(t, out[4].err); e.Code != sluice.CodeInvalidRequest || e.Field != "ip" {
		t.Errorf("an invalid address: %+v (the bulk item's decisions[i]. prefix must be gone)", e)
	}
}

func TestABatchedCallerWhoseContextEndsReturnsAtOnceAndItsDecisionIsStillMade(t *testing.T) {
	ctx := testCtx(t)
	name := limitName(t, "c")
	putLimit(t, newClient(t), name, 5)
	c, _ := batchingClient(t, never, 2, sluice.WithFailPolicy(sluice.FailOpen))
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	// Alone in a batch of two that waits an hour: only its context can end the wait.
	r, err := c.Limit(short, name, sluice.Decision{Key: "k"})
	if !errors.Is(err, context.DeadlineExceeded) || r.OK || r.Degraded {
		t.Fatalf("%+v, %v: want the context's error, not the fail policy's admission", r, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("returned after %v", took)
	}
	// The next call fills the batch, which is sent with both decisions.
	if r, err := c.Limit(ctx, name, sluice.Decision{Key: "k"}); err != nil || !r.OK || !near(r.Remaining, 3) {
		t.Fatalf("the call that filled the batch: %+v, %v: want 3 left (both decisions made)", r, err)
	}
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	if _, err := c.Limit(cancelled, name, sluice.Decision{Key: "k"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("an already cancelled caller: %v", err)
	}
}

// unreachableBatching is a batching client of an address nothing listens on, counting its attempts.
func unreachableBatching(t *testing.T, maxItems int, opts ...sluice.Option) (*sluice.Client, *countingTransport) {
	t.Helper()
	return unreachable(t, append([]sluice.Option{sluice.WithBatching(never, maxItems)}, opts...)...)
}

func TestBatchedCallsFollowTheFailPolicyWhenSluiceIsUnreachable(t *testing.T) {
	ctx := testCtx(t)
	items := []sluice.Item{
		{Name: "x", Decision: sluice.Decision{Key: "friend"}},
		{Name: "x", Decision: sluice.Decision{Key: "stranger"}},
		{Name: "y", Decision: sluice.Decision{Key: "bad"}},
	}

	c, ct := unreachableBatching(t, len(items))
	for i, o := range limitAll(c, ctx, items) {
		var e *sluice.Error
		if o.err == nil || errors.As(o.err, &e) {
			t.Errorf("fail closed, call %d: %+v, %v: want the network error", i, o.r, o.err)
		}
	}
	if n := ct.n.Load(); n != 1 {
		t.Errorf("fail closed: %d attempts, want 1 (a batch is never retried)", n)
	}

	c, ct = unreachableBatching(t, len(items), sluice.WithFailPolicy(sluice.FailOpen))
	for i, o := range limitAll(c, ctx, items) {
		if o.err != nil || !o.r.OK || !o.r.Degraded || o.r.Name != items[i].Name || o.r.Key != items[i].Key {
			t.Errorf("fail open, call %d: %+v, %v", i, o.r, o.err)
		}
	}
	if n := ct.n.Load(); n != 1 {
		t.Errorf("fail open: %d attempts, want 1", n)
	}

	var asked atomic.Int32
	c, _ = unreachableBatching(t, len(items), sluice.WithFailPolicy(sluice.Fallback(func(_ context.Context, name string, d sluice.Decision, err error) (sluice.Result, error) {
		asked.Add(1)
		if d.Key == "bad" {
			return sluice.Result{}, errors.New("no fallback for bad")
		}
		return sluice.Result{OK: d.Key == "friend", Name: name, Key: d.Key}, nil
	})))
	out := limitAll(c, ctx, items)
	if o := out[0]; o.err != nil || !o.r.OK || !o.r.Degraded || o.r.Key != "friend" {
		t.Errorf("fallback, friend: %+v, %v", o.r, o.err)
	}
	if o := out[1]; o.err != nil || o.r.OK || !o.r.Degraded || o.r.Key != "stranger" {
		t.Errorf("fallback, stranger: %+v, %v", o.r, o.err)
	}
	if o := out[2]; o.err == nil || o.err.Error() != "no fallback for bad" {
		t.Errorf("fallback, bad: %+v, %v", o.r, o.err)
	}
	if n := asked.Load(); n != 3 {
		t.Errorf("the fallback was asked %d times, want once per call", n)
	}
}

func TestA503ForTheBatchGoesToEachCallersFailPolicyUnretried(t *testing.T) {
	ctx := testCtx(t)
	name := limitName(t, "f")
	putLimit(t, newClient(t), name, 5)
	front, addr := newFailingFront(t, 1)
	c := sluice.New(addr, secretKey, sluice.WithBatching(never, 2))
	for i, o := range limitAll(c, ctx, repeat(2, sluice.Item{Name: name, Decision: sluice.Decision{Key: "k"}})) {
		if e := asError(t, o.err); e.Status != http.StatusServiceUnavailable {
			t.Errorf("call %d: %+v", i, e)
		}
	}
	if n := front.seen.Load(); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
	if v, err := newClient(t).Value(ctx, name, "k"); err != nil || v.Value < 4.99 {
		t.Fatalf("value %+v, %v: nothing was consumed, want 5", v, err)
	}
}

// BenchmarkLimitBatching compares concurrent Limit calls against the real Sluice without and
// with batching (DefaultBatchWindow, DefaultBatchMaxItems), at 32 and 256 concurrent callers,
// each on a key of its own. It reports decisions/s, the p50 and p99 time of one call, and
// req/decision, the HTTP requests per decision. `make bench` runs it on SQLite and PostgreSQL;
// it reports and never fails on speed.
func BenchmarkLimitBatching(b *testing.B) {
	name := "BenchmarkLimitBatching"
	if _, err := sluice.New(baseURL, secretKey).Put(context.Background(), name,
		sluice.Definition{Kind: sluice.TokenBucket, Rate: 1e9, Period: 1000}); err != nil {
		b.Fatal(err)
	}
	for _, callers := range []int{32, 256} {
		for _, bc := range []struct {
			name string
			opts []sluice.Option
		}{
			{"off", nil},
			{"on", []sluice.Option{sluice.WithBatching(sluice.DefaultBatchWindow, sluice.DefaultBatchMaxItems)}},
		} {
			b.Run(fmt.Sprintf("callers=%d/batching=%s", callers, bc.name), func(b *testing.B) {
				benchmarkLimit(b, name, callers, bc.opts)
			})
		}
	}
}

func benchmarkLimit(b *testing.B, name string, callers int, opts []sluice.Option) {
	// Idle connections enough for every caller, so that unbatched calls do not pay for new ones.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = callers
	b.Cleanup(tr.CloseIdleConnections)
	ct := &countingTransport{next: tr}
	c := sluice.New(baseURL, secretKey, append([]sluice.Option{sluice.WithHTTPClient(&http.Client{Transport: ct})}, opts...)...)
	// RunParallel starts parallelism × GOMAXPROCS goroutines: round up to the callers asked for.
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((callers + procs - 1) / procs)
	var (
		worker atomic.Int32
		mu     sync.Mutex
		times  []time.Duration
	)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprint("w", worker.Add(1))
		var mine []time.Duration
		for pb.Next() {
			start := time.Now()
			r, err := c.Limit(context.Background(), name, sluice.Decision{Key: key})
			mine = append(mine, time.Since(start))
			if err != nil || !r.OK {
				b.Errorf("%+v, %v", r, err)
				return
			}
		}
		mu.Lock()
		times = append(times, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	if len(times) == 0 {
		return
	}
	slices.Sort(times)
	at := func(q float64) float64 { return float64(times[int(q*float64(len(times)-1))]) / 1e6 }
	b.ReportMetric(float64(worker.Load()), "callers")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
	b.ReportMetric(float64(ct.n.Load())/float64(b.N), "req/decision")
}
