package sluice_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// lostFirstAnswer is a reverse proxy in front of the real Sluice that forwards the first decision
// (POST …/limit) and then drops Sluice's answer (the connection is cut), as a proxy or a network
// can; it counts the decisions it got and tells on released the status of each lease release.
type lostFirstAnswer struct {
	*httptest.Server
	decisions atomic.Int32
	released  chan int
}

func newLostFirstAnswer(t *testing.T) *lostFirstAnswer {
	t.Helper()
	target, err := url.Parse(baseURL)
	if err != nil {
		t.Fatal(err)
	}
	p := &lostFirstAnswer{released: make(chan int, 4)}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		if strings.HasSuffix(resp.Request.URL.Path, "/release") {
			p.released <- resp.StatusCode
		}
		return nil
	}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/limit") && p.decisions.Add(1) == 1 {
			rp.ServeHTTP(httptest.NewRecorder(), r) // Sluice decides…
			panic(http.ErrAbortHandler)             // …and its answer is lost
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// TestAReplayOfTheRequestsOwnLostAttemptIsItsOwn: the app makes its decisions idempotent per
// visitor request (WithIdempotencyKey) on a concurrency limit of 1, and the answer to the first
// attempt of a decision is lost. The retry Sluice answers with that attempt's stored admission is
// the request's own: the handler runs and the lease is released once it returns. (The middleware
// took every replayed admission for another attempt's: one visitor request, sent twice by the
// client, was refused 429 and its slot held for the lease's TTL.) It holds whether the client
// retries (a new connection) or net/http's Transport would have re-sent the request unseen (a
// reused one); with WithRetries(0) the decision is sent once, and its lost answer is no answer.
func TestAReplayOfTheRequestsOwnLostAttemptIsItsOwn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reused  bool
		retries int
	}{{"a new connection", false, 2}, {"a reused connection", true, 2}, {"a reused connection without retries", true, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			admin := newClient(t)
			name := limitName(t, "conc")
			if _, err := admin.Put(ctx, name, sluice.Definition{Kind: sluice.Concurrency, Rate: 1, LeaseTTL: 600_000}); err != nil {
				t.Fatal(err)
			}
			proxy := newLostFirstAnswer(t)
			transport := &http.Transport{}
			defer transport.CloseIdleConnections()
			c := sluice.New(proxy.URL, secretKey, sluice.WithRetries(tc.retries), sluice.WithHTTPClient(&http.Client{Transport: transport}))
			if tc.reused { // a connection to the proxy waits in the pool for the decision
				if _, err := c.Check(ctx, name, sluice.Decision{Key: "warm-up"}); err != nil {
					t.Fatal(err)
				}
			}
			handled := 0
			h := sluice.Middleware(c, name, sluice.WithKeyFunc(sluice.KeyByHeader("X-User")))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				handled++
				_, _ = w.Write([]byte("ok"))
			}))
			app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(w, r.WithContext(sluice.WithIdempotencyKey(r.Context(), "visit-1-"+name)))
			})
			w := serve(app, "192.0.2.9:1", "X-User", "alice")
			if tc.retries == 0 {
				if w.Code != http.StatusServiceUnavailable || handled != 0 || proxy.decisions.Load() != 1 {
					t.Fatalf("no retries, the answer lost: %d %q, handled %d times, %d decisions sent; want 503, none, 1", w.Code, w.Body, handled, proxy.decisions.Load())
				}
				return
			}
			if w.Code != http.StatusOK || handled != 1 {
				t.Fatalf("one visitor request whose first answer was lost (%d decisions sent): %d %q (Retry-After %q), handled %d times; want 200 and the handler run once",
					proxy.decisions.Load(), w.Code, w.Body, w.Header().Get("Retry-After"), handled)
			}
			select {
			case status := <-proxy.released:
				if status != http.StatusNoContent {
					t.Fatalf("the lease's release: %d, want 204", status)
				}
			case <-ctx.Done():
				t.Fatal("waited for the request's lease to be released")
			}
			if r, err := admin.Check(ctx, name, sluice.Decision{Key: "alice"}); err != nil || !r.OK {
				t.Fatalf("after the request: %+v, %v; want alice's slot free", r, err)
			}
		})
	}
}

// TestAVisitorsRetryIsNotTakenForTheCallsOwnReplay: request A of a visitor holds the only slot of
// a concurrency limit of 1 under its Idempotency-Key; the visitor retries it as B under the same
// key, and B's first decision attempt gets a gateway's plain 503 (never forwarded), so Limit
// retries it and Sluice replays A's admission. That replay is A's, not B's own: B is refused
// (429), its handler does not run beside A's, and A's lease is not released by B. (When any
// attempt without Sluice's answer made the replay the call's own, B ran beside A, 2 in flight
// on a limit of 1, and its release freed A's slot.)
func TestAVisitorsRetryIsNotTakenForTheCallsOwnReplay(t *testing.T) {
	ctx := testCtx(t)
	admin := newClient(t)
	name := limitName(t, "conc")
	if _, err := admin.Put(ctx, name, sluice.Definition{Kind: sluice.Concurrency, Rate: 1, LeaseTTL: 600_000}); err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(baseURL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	var decisions atomic.Int32
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/limit") && decisions.Add(1) == 2 { // B's first attempt
			http.Error(w, "503 Service Temporarily Unavailable", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(gateway.Close)
	c := sluice.New(gateway.URL, secretKey, sluice.WithRetries(2))
	inA, releaseA := make(chan struct{}), make(chan struct{})
	var running, most atomic.Int32
	h := sluice.Middleware(c, name, sluice.WithKeyFunc(sluice.KeyByHeader("X-User")))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		defer running.Add(-1)
		if n > most.Load() {
			most.Store(n)
		}
		if r.Header.Get("X-Attempt") == "A" {
			close(inA)
			<-releaseA
		}
		_, _ = w.Write([]byte("ok"))
	}))
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(sluice.WithIdempotencyKey(r.Context(), "visit-1-"+name)))
	})
	doneA := make(chan *httptest.ResponseRecorder, 1)
	go func() { doneA <- serve(app, "192.0.2.9:1", "X-User", "alice", "X-Attempt", "A") }()
	select {
	case <-inA:
	case <-ctx.Done():
		t.Fatal("waited for request A's handler to run")
	}
	b := serve(app, "192.0.2.9:1", "X-User", "alice", "X-Attempt", "B")
	if b.Code != http.StatusTooManyRequests || most.Load() != 1 {
		t.Fatalf("the visitor's retry B while A runs (%d decisions sent): %d %q, at most %d handlers in flight; want 429 and 1",
			decisions.Load(), b.Code, b.Body, most.Load())
	}
	if r, err := admin.Check(ctx, name, sluice.Decision{Key: "alice"}); err != nil || r.OK {
		t.Fatalf("while A runs, after B: %+v, %v; want alice's one slot still A's", r, err)
	}
	close(releaseA)
	if a := <-doneA; a.Code != http.StatusOK {
		t.Fatalf("request A: %d %q, want 200", a.Code, a.Body)
	}
}

// TestAKeyedCallFollowsARedirect: a keyed call is kept from net/http's own re-sending without
// losing what it does for any call: a 308 in front of Sluice (http to https, a moved host) is
// followed with the body and the key, as an unkeyed call's is.
func TestAKeyedCallFollowsARedirect(t *testing.T) {
	ctx := testCtx(t)
	name := limitName(t, "redirected")
	if _, err := newClient(t).Put(ctx, name, sluice.Definition{Kind: sluice.TokenBucket, Rate: 10, Period: 60_000}); err != nil {
		t.Fatal(err)
	}
	moved := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, baseURL+r.URL.RequestURI(), http.StatusPermanentRedirect)
	}))
	t.Cleanup(moved.Close)
	c := sluice.New(moved.URL, secretKey)
	for _, keyed := range []bool{false, true} {
		callCtx := ctx
		if keyed {
			callCtx = sluice.WithIdempotencyKey(ctx, "redirect-"+name)
		}
		if r, err := c.Limit(callCtx, name, sluice.Decision{Key: "k"}); err != nil || !r.OK {
			t.Fatalf("a decision (keyed %v) through a 308: %+v, %v; want it admitted", keyed, r, err)
		}
	}
}
