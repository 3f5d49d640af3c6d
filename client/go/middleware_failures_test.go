package sluice_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// records is a slog handler that keeps what is logged, level and message.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *records) Enabled(context.Context, slog.Level) bool { return true }
func (l *records) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r)
	return nil
}
func (l *records) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *records) WithGroup(string) slog.Handler      { return l }

// count is how many records were logged at level exactly.
func (l *records) count(level slog.Level) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if r.Level == level {
			n++
		}
	}
	return n
}

// at is what was logged at level or above, one "LEVEL message" a line.
func (l *records) at(level slog.Level) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, r := range l.recs {
		if r.Level >= level {
			b.WriteString(r.Level.String() + " " + r.Message + "\n")
		}
	}
	return b.String()
}

// TestANilLoggerLogsNowhere: WithLogger(nil) is a middleware that logs nothing, not one that
// panics at its first failure (when Sluice is down).
func TestANilLoggerLogsNowhere(t *testing.T) {
	c := sluice.New("http://"+closedAddr(t), secretKey, sluice.WithTimeout(10*time.Second))
	h := sluice.Middleware(c, "api", sluice.WithLogger(nil))(&okHandler{})
	if w := serve(h, "198.51.100.7:1"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("Sluice down, failing closed, logging nowhere: %d %q, want 503", w.Code, w.Body)
	}
}

// leaseReleases is a network that tells on released the status of each lease release Sluice
// answered (0: no answer), after Sluice has answered it; when hold is not nil, a release waits
// for it to close first (or for its own context), as on a Sluice that does not answer.
type leaseReleases struct {
	hold     chan struct{}
	asked    chan struct{}
	released chan int
}

func newLeaseReleases() *leaseReleases {
	return &leaseReleases{asked: make(chan struct{}, 16), released: make(chan int, 16)}
}

func (l *leaseReleases) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasPrefix(r.URL.Path, "/v1/leases/") || !strings.HasSuffix(r.URL.Path, "/release") {
		return http.DefaultTransport.RoundTrip(r)
	}
	l.asked <- struct{}{}
	if l.hold != nil {
		select {
		case <-l.hold:
		case <-r.Context().Done():
			l.released <- 0
			return nil, r.Context().Err()
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	status := 0
	if err == nil {
		status = resp.StatusCode
	}
	l.released <- status
	return resp, err
}

// waitReleased waits for the next lease release to be answered by Sluice, and wants 204.
func (l *leaseReleases) waitReleased(t *testing.T, what string) {
	t.Helper()
	select {
	case status := <-l.released:
		if status != http.StatusNoContent {
			t.Fatalf("the release of %s: status %d, want 204", what, status)
		}
	case <-testCtx(t).Done():
		t.Fatalf("waited for the lease of %s to be released", what)
	}
}

// TestAVisitorWhoHangsUpMidDecisionIsNotLoggedAsAFailure: a visitor who hangs up while Sluice
// decides is no failure of Sluice's: nothing is logged at info level or above (it was a warning
// "no decision; refusing the request (fail closed)", even from a client failing open).
func TestAVisitorWhoHangsUpMidDecisionIsNotLoggedAsAFailure(t *testing.T) {
	ctx := testCtx(t)
	name := limitName(t, "mw")
	putLimit(t, newClient(t), name, 10)
	net := heldAnswers{answered: make(chan struct{}), release: make(chan struct{})}
	logs := &records{}
	c := sluice.New(baseURL, secretKey, sluice.WithFailPolicy(sluice.FailOpen), sluice.WithHTTPClient(&http.Client{Transport: net}))
	h := sluice.Middleware(c, name, sluice.WithLogger(slog.New(logs)))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("the handler ran for a visitor who had left")
	}))
	visitor, leave := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil).WithContext(visitor))
	}()
	select {
	case <-net.answered:
	case <-ctx.Done():
		t.Fatal("waited for Sluice to answer the decision")
	}
	leave()
	select {
	case net.release <- struct{}{}:
	case <-done:
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("waited for the middleware to finish with the visitor who left")
	}
	if got := logs.at(slog.LevelInfo); got != "" {
		t.Fatalf("a visitor who hung up mid-decision was logged:\n%s", got)
	}
}

// TestTheResponseDoesNotWaitForTheLeasesRelease: on a concurrency limit, an admitted request's
// response is complete once its handler returns, whatever Sluice does with the release that
// follows (it waited for the release's round trip, so a Sluice that did not answer delayed every
// admitted response up to the client's timeout, even failing open); the release still frees the
// slot once it reaches Sluice.
func TestTheResponseDoesNotWaitForTheLeasesRelease(t *testing.T) {
	ctx := testCtx(t)
	admin := newClient(t)
	name := limitName(t, "conc")
	if _, err := admin.Put(ctx, name, sluice.Definition{Kind: sluice.Concurrency, Rate: 1, LeaseTTL: 60_000}); err != nil {
		t.Fatal(err)
	}
	net := newLeaseReleases()
	net.hold = make(chan struct{})
	c := sluice.New(baseURL, secretKey, sluice.WithTimeout(time.Minute), sluice.WithHTTPClient(&http.Client{Transport: net}))
	h := sluice.Middleware(c, name, sluice.WithKeyFunc(sluice.KeyByHeader("X-User")))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- serve(h, "192.0.2.9:1", "X-User", "alice") }()
	select {
	case w := <-done:
		if w.Code != http.StatusOK {
			t.Fatalf("the admitted request: %d %q", w.Code, w.Body)
		}
	case <-ctx.Done():
		t.Fatal("waited for the admitted request's response while Sluice held back its lease's release: the response waits for the release")
	}
	select {
	case <-net.asked:
	case <-ctx.Done():
		t.Fatal("waited for the middleware to send the lease's release")
	}
	close(net.hold)
	net.waitReleased(t, "alice's request")
	if r, err := admin.Check(ctx, name, sluice.Decision{Key: "alice"}); err != nil || !r.OK {
		t.Fatalf("after the release: %+v, %v; want alice's slot free", r, err)
	}
}

// loggerInto is a logger into l.
func loggerInto(l *records) *slog.Logger { return slog.New(l) }

// TestACountOverTheCapacityIsTheVisitors413: a count function's count (the visitor's request)
// over what the limit can ever admit is answered 413 count_exceeds_capacity, and logged as a
// warning at most once a minute, however many such requests come (it was a 500 and an error
// logged per request: visitors could fill the error log).
func TestACountOverTheCapacityIsTheVisitors413(t *testing.T) {
	c := newClient(t)
	name := limitName(t, "mw")
	putLimit(t, c, name, 3)
	logs := &records{}
	h := sluice.Middleware(c, name, sluice.WithLogger(loggerInto(logs)), sluice.WithCountFunc(func(r *http.Request) (float64, error) {
		return strconv.ParseFloat(r.Header.Get("X-Cost"), 64)
	}))(&okHandler{})
	for i := range 3 {
		w := serve(h, "198.51.100.7:1", "X-Cost", "5")
		if p := decodeProblem(t, w); w.Code != http.StatusRequestEntityTooLarge || p["code"] != sluice.CodeCountExceedsCapacity {
			t.Fatalf("request %d costing 5 of a limit of 3: %d %v; want 413 count_exceeds_capacity", i+1, w.Code, p)
		}
	}
	if got := logs.at(slog.LevelWarn); strings.Count(got, "\n") != 1 || !strings.HasPrefix(got, "WARN ") {
		t.Fatalf("three requests over the capacity logged at warning level or above:\n%s\nwant one warning", got)
	}
	if w := serve(h, "198.51.100.7:1", "X-Cost", "2"); w.Code != http.StatusOK {
		t.Fatalf("a request costing 2 of 3: %d %q", w.Code, w.Body)
	}
}
