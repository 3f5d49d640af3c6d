package sluice_test

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

func newClient(t *testing.T, opts ...sluice.Option) *sluice.Client {
	t.Helper()
	return sluice.New(baseURL, secretKey, opts...)
}

// limitName is a limit name of its own for each test.
func limitName(t *testing.T, suffix string) string {
	t.Helper()
	return strings.NewReplacer("/", ".", " ", "_").Replace(t.Name()) + "." + suffix
}

// putLimit stores a token bucket of capacity tokens per minute.
func putLimit(t *testing.T, c *sluice.Client, name string, capacity float64) {
	t.Helper()
	if _, err := c.Put(testCtx(t), name, sluice.Definition{Kind: sluice.TokenBucket, Rate: capacity, Period: 60000}); err != nil {
		t.Fatalf("put %s: %v", name, err)
	}
}

// near reports whether a token count is want, give or take the refill of a test's duration.
func near(got, want float64) bool { return math.Abs(got-want) < 0.01 }

func asError(t *testing.T, err error) *sluice.Error {
	t.Helper()
	var e *sluice.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *sluice.Error", err, err)
	}
	return e
}

func TestDefinitionsArePutReadListedAndDeleted(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	name := limitName(t, "defs")
	capacity := 7.0
	put, err := c.Put(ctx, name, sluice.Definition{Kind: sluice.FixedWindow, Rate: 5, Period: 1000, Capacity: &capacity, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	if put.Name != name || put.Kind != sluice.FixedWindow || put.Rate != 5 || put.Period != 1000 ||
		put.Capacity == nil || *put.Capacity != 7 || put.Shards != 2 || put.CreatedAt.IsZero() {
		t.Fatalf("put answered %+v", put)
	}
	got, err := c.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != name || got.Rate != 5 || !got.CreatedAt.Equal(put.CreatedAt) {
		t.Fatalf("get answered %+v, put %+v", got, put)
	}
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(list, func(d sluice.StoredDefinition) bool { return d.Name == name && d.Shards == 2 }) {
		t.Fatalf("list %+v lacks %s", list, name)
	}
	if err := c.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(ctx, name)
	if e := asError(t, err); e.Status != http.StatusNotFound || e.Code != sluice.CodeLimitNotFound || e.Detail == "" {
		t.Fatalf("get after delete: %+v", e)
	}
	if err := c.Delete(ctx, name); asError(t, err).Status != http.StatusNotFound {
		t.Fatalf("second delete: %v", err)
	}
}

func TestLimitConsumesThenRefusesWithRetryAfterAndHeaders(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	name := limitName(t, "l")
	putLimit(t, c, name, 2)
	for want := 1.0; want >= 0; want-- {
		r, err := c.Limit(ctx, name, sluice.Decision{Key: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK || !near(r.Remaining, want) || r.Name != name || r.Key != "alice" || r.RetryAfter != 0 || r.Degraded {
			t.Fatalf("admitted decision %+v, want remaining %v", r, want)
		}
		if r.RateLimitPolicy != `"`+name+`";q=2;w=60` || !strings.HasPrefix(r.RateLimit, `"`+name+`";r=`) {
			t.Fatalf("headers policy %q, limit %q", r.RateLimitPolicy, r.RateLimit)
		}
	}
	r, err := c.Limit(ctx, name, sluice.Decision{Key: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || r.RetryAfter <= 0 || r.RetryAfter > 30*time.Second {
		t.Fatalf("refusal %+v: want !OK with a retryAfter of up to 30 s (a token every 30 s)", r)
	}
	// Another key and the global key have their own state.
	if r, err := c.Limit(ctx, name, sluice.Decision{Key: "bob", Count: sluice.Count(2)}); err != nil || !r.OK || !near(r.Remaining, 0) {
		t.Fatalf("bob: %+v, %v", r, err)
	}
	if r, err := c.Limit(ctx, name, sluice.Decision{}); err != nil || !r.OK || r.Key != "" {
		t.Fatalf("global key: %+v, %v", r, err)
	}
}

func TestCheckAndValueConsumeNothing(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	name := limitName(t, "c")
	putLimit(t, c, name, 3)
	if _, err := c.Limit(ctx, name, sluice.Decision{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r, err := c.Check(ctx, name, sluice.Decision{Key: "k", Count: sluice.Count(2)})
		if err != nil || !r.OK || !near(r.Remaining, 0) || r.RateLimitPolicy == "" { // what would remain
			t.Fatalf("check: %+v, %v", r, err)
		}
	}
	if r, err := c.Check(ctx, name, sluice.Decision{Key: "k", Count: sluice.Count(3)}); err != nil || r.OK || r.RetryAfter <= 0 {
		t.Fatalf("check of more than remains: %+v, %v", r, err)
	}
	v, err := c.Value(ctx, name, "k")
	if err != nil {
		t.Fatal(err)
	}
	if v.Value < 2 || v.Value >= 3 || len(v.Shards) != 1 || v.Config.Kind != sluice.TokenBucket || v.Config.Rate != 3 || v.TS == 0 {
		t.Fatalf("value %+v: want 2 (and under 3) left of 3", v)
	}
	if v, err := c.Value(ctx, name, ""); err != nil || v.Value != 3 {
		t.Fatalf("global key's value %+v, %v: want full", v, err)
	}
}

func TestInlineConfigDecidesWithoutAStoredDefinition(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	def := &sluice.Definition{Kind: sluice.SlidingWindow, Rate: 1, Period: 60000, Resolution: 4}
	name := limitName(t, "inline")
	if r, err := c.Limit(ctx, name, sluice.Decision{Key: "x", Config: def}); err != nil || !r.OK {
		t.Fatalf("first: %+v, %v", r, err)
	}
	if r, err := c.Limit(ctx, name, sluice.Decision{Key: "x", Config: def}); err != nil || r.OK {
		t.Fatalf("second: %+v, %v", r, err)
	}
}

func TestBatchIsAllOrNothing(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	roomy, tight := limitName(t, "roomy"), limitName(t, "tight")
	putLimit(t, c, roomy, 10)
	putLimit(t, c, tight, 1)
	items := []sluice.Item{{Name: roomy, Decision: sluice.Decision{Key: "u"}}, {Name: tight, Decision: sluice.Decision{Key: "u"}}}

	if b, err := c.CheckBatch(ctx, items); err != nil || !b.OK || len(b.Results) != 2 || b.RateLimitPolicy == "" {
		t.Fatalf("check batch: %+v, %v", b, err)
	}
	b, err := c.Batch(ctx, items)
	if err != nil || !b.OK || !near(b.Results[0].Remaining, 9) || !near(b.Results[1].Remaining, 0) || b.Results[1].Name != tight {
		t.Fatalf("first batch: %+v, %v", b, err)
	}
	if !strings.Contains(b.RateLimit, roomy) || !strings.Contains(b.RateLimit, tight) {
		t.Fatalf("RateLimit header %q should name both limits", b.RateLimit)
	}
	b, err = c.Batch(ctx, items)
	if err != nil || b.OK || b.RetryAfter <= 0 || b.Results[1].OK {
		t.Fatalf("second batch: %+v, %v: want a refusal with retryAfter", b, err)
	}
	if v, err := c.Value(ctx, roomy, "u"); err != nil || v.Value >= 10 || v.Value < 9 {
		t.Fatalf("roomy after the refused batch: %+v, %v: want 9 (nothing taken by the refusal)", v, err)
	}
}

func TestBulkDecidesEachItemAndReportsItsOwnError(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	name := limitName(t, "b")
	putLimit(t, c, name, 1)
	res, err := c.Bulk(ctx, []sluice.Item{
		{Name: name, Decision: sluice.Decision{Key: "a"}},
		{Name: name, Decision: sluice.Decision{Key: "a"}},
		{Name: limitName(t, "missing"), Decision: sluice.Decision{Key: "a"}},
		{Name: name, Decision: sluice.Decision{Key: "b", IP: "not-an-address"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("%d results", len(res))
	}
	if res[0].Err != nil || !res[0].OK || res[1].Err != nil || res[1].OK || res[1].RetryAfter <= 0 {
		t.Fatalf("decided items: %+v, %+v", res[0], res[1])
	}
	if e := asError(t, res[2].Err); e.Code != sluice.CodeLimitNotFound || e.Status != http.StatusNotFound || e.RequestID == "" {
		t.Fatalf("unknown limit: %+v; want 404 limit_not_found with the request's ID (Sluice logs the item under it)", e)
	}
	if e := asError(t, res[3].Err); e.Code != sluice.CodeInvalidRequest || e.Status != http.StatusBadRequest || !strings.HasSuffix(e.Field, "ip") {
		t.Fatalf("an invalid address: %+v", e)
	}
}

func TestResetGlobalOneKeyAndAllKeys(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	name := limitName(t, "r")
	putLimit(t, c, name, 1)
	empty := func(key string) {
		t.Helper()
		if r, err := c.Limit(ctx, name, sluice.Decision{Key: key}); err != nil || !r.OK {
			t.Fatalf("take %q: %+v, %v", key, r, err)
		}
	}
	isFull := func(key string, want bool) {
		t.Helper()
		v, err := c.Value(ctx, name, key)
		if err != nil {
			t.Fatal(err)
		}
		if full := v.Value >= 1; full != want {
			t.Fatalf("key %q value %v, want full=%v", key, v.Value, want)
		}
	}
	empty("")
	empty("a")
	empty("b")
	if err := c.Reset(ctx, name, ""); err != nil {
		t.Fatal(err)
	}
	isFull("", true)
	isFull("a", false)
	if err := c.Reset(ctx, name, "a"); err != nil {
		t.Fatal(err)
	}
	isFull("a", true)
	isFull("b", false)
	if err := c.Reset(ctx, name, "never-seen"); err != nil {
		t.Fatalf("reset of a key without state: %v", err)
	}
	empty("a")
	if err := c.ResetAll(ctx, name); err != nil {
		t.Fatal(err)
	}
	isFull("a", true)
	isFull("b", true)
}

func TestProblemsBecomeErrorsWithTheirFields(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	name := limitName(t, "p")
	putLimit(t, c, name, 1)

	_, err := c.Limit(ctx, name, sluice.Decision{Key: "k", IP: "not-an-address"})
	e := asError(t, err)
	if e.Status != http.StatusBadRequest || e.Code != sluice.CodeInvalidRequest || e.Field != "ip" || e.Detail == "" || e.RequestID == "" {
		t.Fatalf("400: %+v", e)
	}
	if !strings.Contains(err.Error(), "invalid_request") {
		t.Fatalf("message %q should name the code", err)
	}
	_, err = c.Put(ctx, name, sluice.Definition{Kind: "leaky bucket", Rate: 1, Period: 1})
	if e := asError(t, err); e.Status != http.StatusBadRequest || e.Code != sluice.CodeInvalidConfig {
		t.Fatalf("bad kind: %+v", e)
	}
	_, err = c.Check(ctx, limitName(t, "missing"), sluice.Decision{})
	if e := asError(t, err); e.Status != http.StatusNotFound || e.Code != sluice.CodeLimitNotFound {
		t.Fatalf("404: %+v", e)
	}
	_, err = sluice.New(baseURL, "sk_wrong").List(ctx)
	if e := asError(t, err); e.Status != http.StatusUnauthorized || e.Code != sluice.CodeUnauthorized {
		t.Fatalf("401: %+v", e)
	}
}

// countingTransport counts the requests that leave the client (it forwards them unchanged to
// next, or http.DefaultTransport when nil).
type countingTransport struct {
	n    atomic.Int32
	next http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	if c.next != nil {
		return c.next.RoundTrip(r)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// unreachable is a client of an address nothing listens on, counting its attempts.
func unreachable(t *testing.T, opts ...sluice.Option) (*sluice.Client, *countingTransport) {
	t.Helper()
	ct := &countingTransport{}
	opts = append([]sluice.Option{sluice.WithHTTPClient(&http.Client{Transport: ct}), sluice.WithRetries(3),
		sluice.WithBackoff(time.Millisecond, 4*time.Millisecond)}, opts...)
	return sluice.New("http://"+closedAddr(t), secretKey, opts...), ct
}

func TestConsumingCallsAreNeverRetriedAndIdempotentOnesAre(t *testing.T) {
	ctx := testCtx(t)
	items := []sluice.Item{{Name: "x", Decision: sluice.Decision{Key: "k"}}}
	for _, tc := range []struct {
		call string
		do   func(*sluice.Client) error
		want int32
	}{
		{"Limit", func(c *sluice.Client) error { _, err := c.Limit(ctx, "x", sluice.Decision{}); return err }, 1},
		{"Batch", func(c *sluice.Client) error { _, err := c.Batch(ctx, items); return err }, 1},
		{"Bulk", func(c *sluice.Client) error { _, err := c.Bulk(ctx, items); return err }, 1},
		{"Check", func(c *sluice.Client) error { _, err := c.Check(ctx, "x", sluice.Decision{}); return err }, 4},
		{"CheckBatch", func(c *sluice.Client) error { _, err := c.CheckBatch(ctx, items); return err }, 4},
		{"Value", func(c *sluice.Client) error { _, err := c.Value(ctx, "x", "k"); return err }, 4},
		{"Reset", func(c *sluice.Client) error { return c.Reset(ctx, "x", "k") }, 4},
		{"Put", func(c *sluice.Client) error { _, err := c.Put(ctx, "x", sluice.Definition{}); return err }, 4},
		{"Get", func(c *sluice.Client) error { _, err := c.Get(ctx, "x"); return err }, 4},
		{"Delete", func(c *sluice.Client) error { return c.Delete(ctx, "x") }, 4},
	} {
		c, ct := unreachable(t)
		err := tc.do(c)
		var e *sluice.Error
		if err == nil || errors.As(err, &e) {
			t.Errorf("%s: error %v, want a network error (fail closed is the default)", tc.call, err)
		}
		if got := ct.n.Load(); got != tc.want {
			t.Errorf("%s: %d attempts, want %d", tc.call, got, tc.want)
		}
	}
}

func TestFailOpenAdmitsDegradedWhenSluiceIsUnreachable(t *testing.T) {
	ctx := testCtx(t)
	c, _ := unreachable(t, sluice.WithFailPolicy(sluice.FailOpen))
	r, err := c.Limit(ctx, "x", sluice.Decision{Key: "k"})
	if err != nil || !r.OK || !r.Degraded || r.Name != "x" || r.Key != "k" {
		t.Fatalf("limit: %+v, %v", r, err)
	}
	b, err := c.Batch(ctx, []sluice.Item{{Name: "x"}, {Name: "y"}})
	if err != nil || !b.OK || !b.Degraded || len(b.Results) != 2 || !b.Results[1].Degraded {
		t.Fatalf("batch: %+v, %v", b, err)
	}
	bulk, err := c.Bulk(ctx, []sluice.Item{{Name: "x"}})
	if err != nil || len(bulk) != 1 || bulk[0].Err != nil || !bulk[0].OK || !bulk[0].Degraded {
		t.Fatalf("bulk: %+v, %v", bulk, err)
	}
	// Not for the calls that are not decisions.
	if _, err := c.Value(ctx, "x", "k"); err == nil {
		t.Fatal("value answered without Sluice")
	}
	// Nor when the caller gave up.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if r, err := c.Limit(cancelled, "x", sluice.Decision{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %+v, %v", r, err)
	}
}

func TestFailOpenNeverHidesTheCallersMistakes(t *testing.T) {
	c, ctx := newClient(t, sluice.WithFailPolicy(sluice.FailOpen)), testCtx(t)
	_, err := c.Limit(ctx, limitName(t, "missing"), sluice.Decision{})
	if e := asError(t, err); e.Code != sluice.CodeLimitNotFound {
		t.Fatalf("an unknown limit under FailOpen: %+v", e)
	}
}

func TestFallbackDecidesAndItsErrorIsReturned(t *testing.T) {
	ctx := testCtx(t)
	var seen error
	c, _ := unreachable(t, sluice.WithFailPolicy(sluice.Fallback(func(_ context.Context, name string, d sluice.Decision, err error) (sluice.Result, error) {
		seen = err
		if d.Key == "bad" {
			return sluice.Result{}, errors.New("no fallback for bad")
		}
		return sluice.Result{OK: d.Key == "friend", Name: name, Key: d.Key, RetryAfter: time.Minute}, nil
	})))
	r, err := c.Check(ctx, "x", sluice.Decision{Key: "stranger"})
	if err != nil || r.OK || !r.Degraded || r.RetryAfter != time.Minute || seen == nil {
		t.Fatalf("stranger: %+v, %v (fallback saw %v)", r, err, seen)
	}
	b, err := c.CheckBatch(ctx, []sluice.Item{{Name: "x", Decision: sluice.Decision{Key: "friend"}}, {Name: "y", Decision: sluice.Decision{Key: "stranger"}}})
	if err != nil || b.OK || b.RetryAfter != time.Minute || !b.Results[0].OK {
		t.Fatalf("batch with one refusal: %+v, %v", b, err)
	}
	if _, err := c.Limit(ctx, "x", sluice.Decision{Key: "bad"}); err == nil || err.Error() != "no fallback for bad" {
		t.Fatalf("fallback error: %v", err)
	}
	bulk, err := c.Bulk(ctx, []sluice.Item{{Name: "x", Decision: sluice.Decision{Key: "friend"}}, {Name: "x", Decision: sluice.Decision{Key: "bad"}}})
	if err != nil || !bulk[0].OK || bulk[1].Err == nil {
		t.Fatalf("bulk: %+v, %v", bulk, err)
	}
}

func TestTimeoutCountsAsSluiceNotAnswering(t *testing.T) {
	// A listener that accepts connections and never answers (held until the test ends).
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })
	ctx := testCtx(t)
	closed := sluice.New("http://"+silent.Addr().String(), secretKey, sluice.WithTimeout(100*time.Millisecond))
	start := time.Now()
	if _, err := closed.Check(ctx, "x", sluice.Decision{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("fail closed after the timeout: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the call took %v despite a 100 ms timeout", took)
	}
	open := sluice.New("http://"+silent.Addr().String(), secretKey, sluice.WithTimeout(100*time.Millisecond), sluice.WithFailPolicy(sluice.FailOpen))
	if r, err := open.Limit(ctx, "x", sluice.Decision{}); err != nil || !r.OK || !r.Degraded {
		t.Fatalf("fail open after the timeout: %+v, %v", r, err)
	}
}

// failingFront is a proxy in front of the real Sluice that answers the first n requests with
// the 503 problem Sluice fails closed with, and forwards the rest.
type failingFront struct {
	fail, seen atomic.Int32
	next       http.Handler
}

func newFailingFront(t *testing.T, n int32) (*failingFront, string) {
	t.Helper()
	target, err := url.Parse(baseURL)
	if err != nil {
		t.Fatal(err)
	}
	f := &failingFront{next: httputil.NewSingleHostReverseProxy(target)}
	f.fail.Store(n)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *failingFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.seen.Add(1)
	if f.fail.Add(-1) >= 0 {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"try again","code":"unavailable"}`))
		return
	}
	f.next.ServeHTTP(w, r)
}

func TestA503IsRetriedForCheckButNeverForLimit(t *testing.T) {
	ctx := testCtx(t)
	name := limitName(t, "r503")
	putLimit(t, newClient(t), name, 5)
	fast := []sluice.Option{sluice.WithRetries(2), sluice.WithBackoff(time.Millisecond, 4*time.Millisecond)}

	front, addr := newFailingFront(t, 2)
	r, err := sluice.New(addr, secretKey, fast...).Check(ctx, name, sluice.Decision{Key: "k"})
	if err != nil || !r.OK || !near(r.Remaining, 4) || front.seen.Load() != 3 {
		t.Fatalf("check after two 503s: %+v, %v, %d requests (want 3, the last answered by Sluice)", r, err, front.seen.Load())
	}

	front, addr = newFailingFront(t, 3)
	_, err = sluice.New(addr, secretKey, fast...).Check(ctx, name, sluice.Decision{Key: "k"})
	if e := asError(t, err); e.Status != http.StatusServiceUnavailable || e.Code != sluice.CodeUnavailable || front.seen.Load() != 3 {
		t.Fatalf("check after three 503s: %+v, %d requests", e, front.seen.Load())
	}

	front, addr = newFailingFront(t, 1)
	_, err = sluice.New(addr, secretKey, fast...).Limit(ctx, name, sluice.Decision{Key: "k"})
	if e := asError(t, err); e.Status != http.StatusServiceUnavailable || front.seen.Load() != 1 {
		t.Fatalf("limit after a 503: %+v, %d requests (want 1: never retried)", e, front.seen.Load())
	}
	front, addr = newFailingFront(t, 1)
	r, err = sluice.New(addr, secretKey, append(fast, sluice.WithFailPolicy(sluice.FailOpen))...).Limit(ctx, name, sluice.Decision{Key: "k"})
	if err != nil || !r.OK || !r.Degraded || front.seen.Load() != 1 {
		t.Fatalf("limit after a 503, failing open: %+v, %v, %d requests", r, err, front.seen.Load())
	}
	if v, err := newClient(t).Value(ctx, name, "k"); err != nil || v.Value < 4.99 {
		t.Fatalf("value %+v, %v: nothing was consumed, want 5", v, err)
	}
}

func TestErrorMessagesNameTheRouteOnce(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	_, err := c.Get(ctx, "no-such-limit")
	if msg := err.Error(); msg != "sluice: GET /v1/limits/no-such-limit: 404 limit_not_found: no such limit" {
		t.Fatalf("message %q", msg)
	}
}

// TestInvalidArgumentsAreRefusedBeforeSending: a name Sluice cannot know or a count that is no
// number of tokens is ErrInvalidArgument, even from a FailOpen client whose server is gone (it
// must not admit what Sluice would refuse); in a bulk request only that item fails.
func TestInvalidArgumentsAreRefusedBeforeSending(t *testing.T) {
	ctx := testCtx(t)
	gone := sluice.New("http://127.0.0.1:1", secretKey, sluice.WithFailPolicy(sluice.FailOpen), sluice.WithTimeout(time.Second))
	nan, negative := math.NaN(), -1.0
	for _, tc := range []struct {
		name string
		d    sluice.Decision
	}{
		{"bad name", sluice.Decision{}},
		{"", sluice.Decision{}},
		{"ok", sluice.Decision{Count: &nan}},
		{"ok", sluice.Decision{Count: &negative}},
		{"ok", sluice.Decision{Count: sluice.Count(math.Inf(1))}},
	} {
		if _, err := gone.Limit(ctx, tc.name, tc.d); !errors.Is(err, sluice.ErrInvalidArgument) {
			t.Errorf("Limit(%q, %+v) = %v, want ErrInvalidArgument", tc.name, tc.d, err)
		}
		if _, err := gone.Batch(ctx, []sluice.Item{{Name: "ok"}, {Name: tc.name, Decision: tc.d}}); !errors.Is(err, sluice.ErrInvalidArgument) {
			t.Errorf("Batch with %q: %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	if r, err := gone.Limit(ctx, "ok", sluice.Decision{}); err != nil || !r.Degraded {
		t.Fatalf("a valid call to a gone server under FailOpen: %+v, %v (the policy should answer)", r, err)
	}
	// Every call on one limit refuses such a name, not only the decisions: "x/overrides" would
	// otherwise reach the overrides route (url.PathEscape writes %2F, which Sluice decodes).
	for _, name := range []string{"x/overrides", "bad name", "", ".."} {
		calls := map[string]func() error{
			"Value":          func() error { _, err := gone.Value(ctx, name, ""); return err },
			"Reset":          func() error { return gone.Reset(ctx, name, "") },
			"ResetAll":       func() error { return gone.ResetAll(ctx, name) },
			"Put":            func() error { _, err := gone.Put(ctx, name, sluice.Definition{}); return err },
			"Get":            func() error { _, err := gone.Get(ctx, name); return err },
			"Delete":         func() error { return gone.Delete(ctx, name) },
			"PutOverride":    func() error { _, err := gone.PutOverride(ctx, name, sluice.Override{Match: "m"}); return err },
			"ListOverrides":  func() error { _, err := gone.ListOverrides(ctx, name, sluice.ListOverridesOptions{}); return err },
			"DeleteOverride": func() error { return gone.DeleteOverride(ctx, name, "m") },
		}
		for call, f := range calls {
			if err := f(); !errors.Is(err, sluice.ErrInvalidArgument) {
				t.Errorf("%s(%q) = %v, want ErrInvalidArgument", call, name, err)
			}
		}
	}
	c := newClient(t)
	name := limitName(t, "bulkcheck")
	if _, err := c.Put(ctx, name, sluice.Definition{Kind: sluice.TokenBucket, Rate: 5, Period: 60_000}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Bulk(ctx, []sluice.Item{{Name: name}, {Name: "no spaces please"}, {Name: name, Decision: sluice.Decision{Count: &negative}}, {Name: name}})
	if err != nil || len(res) != 4 {
		t.Fatalf("bulk = %+v, %v", res, err)
	}
	if !res[0].OK || !errors.Is(res[1].Err, sluice.ErrInvalidArgument) || !errors.Is(res[2].Err, sluice.ErrInvalidArgument) || !res[3].OK || res[3].Remaining != 3 {
		t.Fatalf("bulk results %+v: the valid items are decided (in order), the invalid ones fail alone", res)
	}
}
