package sluice_test

import (
	"context"
	"errors"
	"io"
	stdnet "net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// heldAnswers is a network that delivers Sluice's answer to a decision only when the test lets
// it: it tells answered once Sluice has answered, then waits for release (or for its request's
// context). Other calls (a lease's release) go straight through.
type heldAnswers struct {
	answered chan struct{}
	release  chan struct{}
}

func (h heldAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.URL.Path, "/limit") {
		return resp, err
	}
	h.answered <- struct{}{}
	select {
	case <-h.release:
		return resp, nil
	case <-r.Context().Done():
		_ = resp.Body.Close()
		return nil, r.Context().Err()
	}
}

// TestTheMiddlewareReleasesTheLeaseOfAVisitorWhoLeftMidDecision: a visitor hangs up after Sluice
// has taken a concurrency lease for the request but before its answer reached the middleware.
// The middleware still waits for the answer and releases the lease (it used to drop the answer
// with the visitor's cancelled context, so each such visitor held a slot for the lease's TTL: two
// of them locked the key out for a minute), and it does not run the handler for nobody.
func TestTheMiddlewareReleasesTheLeaseOfAVisitorWhoLeftMidDecision(t *testing.T) {
	ctx := testCtx(t)
	admin := newClient(t)
	name := limitName(t, "conc")
	if _, err := admin.Put(ctx, name, sluice.Definition{Kind: sluice.Concurrency, Rate: 2, LeaseTTL: 60_000}); err != nil {
		t.Fatal(err)
	}
	net := heldAnswers{answered: make(chan struct{}), release: make(chan struct{})}
	c := sluice.New(baseURL, secretKey, sluice.WithHTTPClient(&http.Client{Transport: net}))
	handled := 0
	h := sluice.Middleware(c, name, sluice.WithKeyFunc(sluice.KeyByHeader("X-User")))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		handled++
		_, _ = w.Write([]byte("ok"))
	}))
	for range 2 {
		visitor, leave := context.WithCancel(ctx)
		req := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(visitor)
		req.Header.Set("X-User", "alice")
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.ServeHTTP(httptest.NewRecorder(), req)
		}()
		<-net.answered // Sluice took the lease
		leave()
		select {
		case net.release <- struct{}{}: // the answer goes on to the middleware
		case <-done: // the middleware gave up on it with the visitor
		}
		<-done
	}
	if handled != 0 {
		t.Errorf("the handler ran %d times for visitors who had left", handled)
	}
	r, err := admin.Check(ctx, name, sluice.Decision{Key: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK {
		t.Fatalf("no request of alice is in flight, yet her concurrency limit refuses for %v: the leases of the visitors who left are held", r.RetryAfter)
	}
}

// TestTheMiddlewareReleasesALeaseOutsideTheRequestsIdempotencyKey: a service that makes its
// decisions idempotent per request of its own (WithIdempotencyKey on the request's context)
// gets its leases released: the release is not sent under the decision's key, which Sluice
// refuses on another request (422), leaving the slot held for the lease's TTL.
func TestTheMiddlewareReleasesALeaseOutsideTheRequestsIdempotencyKey(t *testing.T) {
	ctx := testCtx(t)
	net := newLeaseReleases()
	c := newClient(t, sluice.WithHTTPClient(&http.Client{Transport: net}))
	name := limitName(t, "conc")
	if _, err := c.Put(ctx, name, sluice.Definition{Kind: sluice.Concurrency, Rate: 1, LeaseTTL: 60_000}); err != nil {
		t.Fatal(err)
	}
	limited := sluice.Middleware(c, name, sluice.WithKeyFunc(sluice.KeyByHeader("X-User")))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	for _, order := range []string{"order-1", "order-2", "order-3"} {
		req := httptest.NewRequest(http.MethodPost, "/", nil).WithContext(sluice.WithIdempotencyKey(ctx, order+"-"+name))
		req.Header.Set("X-User", "alice")
		w := httptest.NewRecorder()
		limited.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("%s after the requests before it were answered: %d %s (a lease still held)", order, w.Code, w.Body)
		}
		net.waitReleased(t, order) // sent in the background once the handler returned
	}
}

// TestABulkItemsErrorNamesItsOwnIndex: items the client refuses before sending are not sent, so
// Sluice numbers the others among those it got; an item's error names its place among the
// caller's items, not another's.
func TestABulkItemsErrorNamesItsOwnIndex(t *testing.T) {
	ctx := testCtx(t)
	c := newClient(t)
	n := limitName(t, "b")
	putLimit(t, c, n, 3)
	out, err := c.Bulk(ctx, []sluice.Item{
		{Name: "bad/name", Decision: sluice.Decision{Key: "a"}},
		{Name: n, Decision: sluice.Decision{Key: "ip:x"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var e *sluice.Error
	if out[0].Err == nil || !errors.As(out[1].Err, &e) {
		t.Fatalf("items' errors: %v; %v", out[0].Err, out[1].Err)
	}
	if e.Field != "decisions[1].key" {
		t.Fatalf("item 1's error names field %q, want decisions[1].key", e.Field)
	}
}

// hungSluice is a network on which Sluice never answers: it tells asked when a call is sent, and
// the call ends only with its context.
type hungSluice struct{ asked chan struct{} }

func (h hungSluice) RoundTrip(r *http.Request) (*http.Response, error) {
	select {
	case h.asked <- struct{}{}:
	default:
	}
	<-r.Context().Done()
	return nil, r.Context().Err()
}

// TestADeadlinePassedMidDecisionIsAnswered: a request whose own deadline passes while Sluice
// decides still has its visitor, who gets the error handler's answer (503 by default), whichever
// of the request's deadline and the decision's copy of it fires first. (The middleware took a
// passed deadline for a visitor gone, about half the time, and wrote nothing: an empty 200.)
func TestADeadlinePassedMidDecisionIsAnswered(t *testing.T) {
	c := sluice.New(baseURL, secretKey, sluice.WithHTTPClient(&http.Client{Transport: hungSluice{asked: make(chan struct{}, 1)}}))
	h := sluice.Middleware(c, "api")(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("the handler ran for a request Sluice never decided")
	}))
	for range 20 { // the two timers race: each order, many times
		ctx, cancel := context.WithTimeout(testCtx(t), 5*time.Millisecond)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
		cancel()
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("the request's deadline passed while Sluice decided: answered %d %q, want the fail-closed 503", w.Code, w.Body)
		}
	}
}

// TestWithoutATimeoutADecisionEndsWithItsVisitor: WithTimeout(0) bounds a call by its context
// alone, so the middleware's decision ends when its visitor hangs up (no lease can be released
// for an answer never read), instead of waiting on a Sluice that does not answer.
func TestWithoutATimeoutADecisionEndsWithItsVisitor(t *testing.T) {
	net := hungSluice{asked: make(chan struct{}, 1)}
	c := sluice.New(baseURL, secretKey, sluice.WithTimeout(0), sluice.WithHTTPClient(&http.Client{Transport: net}))
	h := sluice.Middleware(c, "api")(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("the handler ran for a visitor who left")
	}))
	visitor, leave := context.WithCancel(context.Background()) // no deadline: the visitor's leaving is all that can end it
	defer leave()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil).WithContext(visitor))
	}()
	<-net.asked
	leave()
	select {
	case <-done:
	case <-testCtx(t).Done():
		t.Fatal("waited for the middleware to give up the decision of a visitor who left, with no client timeout")
	}
}

// TestARequestCancelledWithItsVisitorStillThereIsAnswered: a request context cancelled while
// Sluice decides is not always a visitor gone; a server shutting down (its BaseContext cancelled)
// cancels every request while their visitors wait for an answer. They get the error handler's
// answer (503), not an empty 200 with neither the handler nor the error handler run.
func TestARequestCancelledWithItsVisitorStillThereIsAnswered(t *testing.T) {
	net := hungSluice{asked: make(chan struct{}, 1)}
	c := sluice.New(baseURL, secretKey, sluice.WithTimeout(300*time.Millisecond), sluice.WithHTTPClient(&http.Client{Transport: net}))
	h := sluice.Middleware(c, "api")(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("the handler ran for a request Sluice never decided")
	}))
	base, shutDown := context.WithCancel(context.Background())
	defer shutDown()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.BaseContext = func(stdnet.Listener) context.Context { return base }
	srv.Start()
	defer srv.Close()
	go func() {
		<-net.asked
		shutDown()
	}()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a request cancelled by the server's shutdown while Sluice decided: %d %q, want the fail-closed 503", resp.StatusCode, body)
	}
}

// TestAReplayedLeaseRunsNothing: a service makes its decisions idempotent per request of its own
// (WithIdempotencyKey on the request's context) and puts the middleware on a concurrency limit of
// 1. A retry of a request (the same key) is answered by Sluice with the first attempt's stored
// admission and lease; the middleware refuses it (429) instead of running the handler beside the
// first attempt, or after it on a slot another request now holds. (It ran them: six requests at
// once under a limit of 1.)
func TestAReplayedLeaseRunsNothing(t *testing.T) {
	ctx := testCtx(t)
	net := newLeaseReleases()
	c := newClient(t, sluice.WithHTTPClient(&http.Client{Transport: net}))
	name := limitName(t, "conc")
	if _, err := c.Put(ctx, name, sluice.Definition{Kind: sluice.Concurrency, Rate: 1, LeaseTTL: 60_000}); err != nil {
		t.Fatal(err)
	}
	entered := make(chan string, 4)
	leave := make(chan struct{})
	limited := sluice.Middleware(c, name, sluice.WithKeyFunc(func(*http.Request) (string, error) { return "shared", nil }))(
		http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			entered <- r.Header.Get("Idempotency-Key")
			<-leave
		}))
	serve := func(order string) chan int {
		code := make(chan int, 1)
		go func() {
			req := httptest.NewRequest(http.MethodPost, "/", nil).WithContext(sluice.WithIdempotencyKey(ctx, order+"-"+name))
			req.Header.Set("Idempotency-Key", order)
			w := httptest.NewRecorder()
			limited.ServeHTTP(w, req)
			code <- w.Code
		}()
		return code
	}
	wait := func(what string, ch chan int) int {
		t.Helper()
		select {
		case c := <-ch:
			return c
		case <-ctx.Done():
			t.Fatalf("waited for the answer to %s", what)
			return 0
		}
	}
	first := serve("order-1")
	select {
	case <-entered: // order-1 holds the only slot
	case <-ctx.Done():
		t.Fatal("waited for order-1's handler")
	}
	if got := wait("order-1's retry while it runs", serve("order-1")); got != http.StatusTooManyRequests {
		t.Fatalf("order-1's retry while order-1 runs: %d, want 429 (its slot is the first attempt's)", got)
	}
	close(leave)
	if got := wait("order-1", first); got != http.StatusOK {
		t.Fatalf("order-1: %d", got)
	}
	net.waitReleased(t, "order-1") // sent in the background once its handler returned
	<-leave                        // closed: handlers from now on return at once
	if got := wait("order-2", serve("order-2")); got != http.StatusOK {
		t.Fatalf("order-2 after order-1 ended: %d, want 200", got)
	}
	if got := wait("order-1's retry after it ended", serve("order-1")); got != http.StatusTooManyRequests {
		t.Fatalf("order-1's retry after it ended: %d, want 429", got)
	}
	if n := len(entered); n != 1 { // order-2's
		t.Fatalf("handlers run after order-1: %d, want 1 (order-2's)", n)
	}
}
