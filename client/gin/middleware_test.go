package sluicegin_test

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	sluicegin "github.com/sluice-dev/sluice/client/gin"
	sluice "github.com/sluice-dev/sluice/client/go"
)

func init() { gin.SetMode(gin.TestMode) }

// limitName is a limit name of its own for each test.
func limitName(t *testing.T) string {
	t.Helper()
	return strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
}

// putLimit stores a token bucket of capacity tokens per minute on the server at url.
func putLimit(t *testing.T, url, key, name string, capacity float64) {
	t.Helper()
	if _, err := sluice.New(url, key).Put(testCtx(t), name, sluice.Definition{Kind: sluice.TokenBucket, Rate: capacity, Period: 60000}); err != nil {
		t.Fatalf("put %s: %v", name, err)
	}
}

// app is a gin engine with the middleware in front of GET /things, recording what ran.
type app struct {
	*gin.Engine
	handled, after int
}

func newApp(t *testing.T, before []gin.HandlerFunc, limit gin.HandlerFunc) *app {
	t.Helper()
	a := &app{Engine: gin.New()}
	a.Use(before...)
	a.Use(limit, func(c *gin.Context) { c.Next(); a.after++ })
	a.GET("/things", func(c *gin.Context) {
		a.handled++
		res, ok := sluicegin.ResultFromContext(c)
		if !ok || !res.OK {
			c.String(http.StatusInternalServerError, "no admitted result: %+v", res)
			return
		}
		if r, ok := sluice.ResultFromContext(c.Request.Context()); !ok || r.Key != res.Key {
			c.String(http.StatusInternalServerError, "the request's context lacks the result")
			return
		}
		c.String(http.StatusOK, "ok")
	})
	return a
}

func (a *app) get(remote string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/things", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	a.ServeHTTP(w, r)
	return w
}

func decodeProblem(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json (body %q)", ct, w.Body.String())
	}
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body.String(), err)
	}
	return p
}

func TestGinAdmitsThenAnswers429WithProblemRetryAfterAndRateLimitHeaders(t *testing.T) {
	name := limitName(t)
	putLimit(t, baseURL, secretKey, name, 2)
	a := newApp(t, nil, sluicegin.Middleware(sluice.New(baseURL, secretKey), name))

	for i := range 2 {
		w := a.get("203.0.113.9:4444")
		if w.Code != http.StatusOK || w.Body.String() != "ok" {
			t.Fatalf("request %d: %d %s", i, w.Code, w.Body.String())
		}
		if w.Header().Get("RateLimit-Policy") != `"`+name+`";q=2;w=60` || !strings.HasPrefix(w.Header().Get("RateLimit"), `"`+name+`";r=`) {
			t.Fatalf("request %d headers: %v", i, w.Header())
		}
	}
	w := a.get("203.0.113.9:5555") // another connection, same client
	if w.Code != http.StatusTooManyRequests || a.handled != 2 || a.after != 2 {
		t.Fatalf("third request: %d (handler ran %d times, the next middleware %d): want 429 and the chain aborted", w.Code, a.handled, a.after)
	}
	if s, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || s < 1 || s > 30 {
		t.Fatalf("Retry-After %q: want 1 to 30 seconds", w.Header().Get("Retry-After"))
	}
	if w.Header().Get("RateLimit-Policy") == "" || !strings.Contains(w.Header().Get("RateLimit"), ";r=0;") {
		t.Fatalf("refusal headers: %v", w.Header())
	}
	p := decodeProblem(t, w)
	if p["code"] != sluice.CodeRateLimited || p["status"] != float64(429) || p["name"] != name || p["retryAfter"].(float64) < 1 {
		t.Fatalf("problem %v", p)
	}
	if w := a.get("203.0.113.10:4444"); w.Code != http.StatusOK {
		t.Fatalf("another client: %d", w.Code)
	}
}

// authenticate is what an authentication middleware does: the user named in X-Test-User
// becomes the gin key "user".
func authenticate(c *gin.Context) {
	if u := c.GetHeader("X-Test-User"); u != "" {
		c.Set("user", u)
	}
}

func TestGinKeysByTheAuthenticatedUserWithCountAndLimitHandler(t *testing.T) {
	name := limitName(t)
	putLimit(t, baseURL, secretKey, name, 3)
	a := newApp(t, []gin.HandlerFunc{authenticate}, sluicegin.Middleware(sluice.New(baseURL, secretKey), name,
		sluicegin.WithKeyFunc(sluicegin.KeyByContextValue("user")),
		sluicegin.WithCountFunc(func(c *gin.Context) (float64, error) { return strconv.ParseFloat(c.DefaultQuery("cost", "2"), 64) }),
		sluicegin.WithLimitHandler(func(c *gin.Context) {
			res, _ := sluicegin.ResultFromContext(c)
			c.String(http.StatusTeapot, "slow down %s", res.Key)
		}),
	))

	if w := a.get("192.0.2.1:1", "X-Test-User", "ann"); w.Code != http.StatusOK {
		t.Fatalf("first: %d %s", w.Code, w.Body.String())
	}
	// Same user from another address: the key is the user, and 2 of 3 tokens are gone.
	w := a.get("192.0.2.2:1", "X-Test-User", "ann")
	if w.Code != http.StatusTeapot || w.Body.String() != "slow down ann" || w.Header().Get("Retry-After") == "" || a.handled != 1 || a.after != 1 {
		t.Fatalf("second: %d %q %v (handler ran %d times)", w.Code, w.Body.String(), w.Header(), a.handled)
	}
	if w := a.get("192.0.2.1:1", "X-Test-User", "bob"); w.Code != http.StatusOK {
		t.Fatalf("bob: %d", w.Code)
	}
	w = a.get("192.0.2.1:1")
	if p := decodeProblem(t, w); w.Code != http.StatusBadRequest || p["code"] != sluice.CodeInvalidRequest || a.handled != 2 {
		t.Fatalf("no user: %d %v", w.Code, p)
	}
}

func TestGinKeyByClientIPBelievesForwardedForOnlyFromTrustedProxies(t *testing.T) {
	name := limitName(t)
	putLimit(t, baseURL, secretKey, name, 1)
	key, err := sluicegin.KeyByClientIP("10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	a := newApp(t, nil, sluicegin.Middleware(sluice.New(baseURL, secretKey), name, sluicegin.WithKeyFunc(key)))
	if w := a.get("198.51.100.7:1", "X-Forwarded-For", "1.1.1.1"); w.Code != http.StatusOK {
		t.Fatalf("first: %d", w.Code)
	}
	if w := a.get("198.51.100.7:1", "X-Forwarded-For", "2.2.2.2"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("a new X-Forwarded-For from the same untrusted peer: %d, want 429", w.Code)
	}
	for _, client := range []string{"1.1.1.1", "2.2.2.2"} {
		if w := a.get("10.0.0.1:1", "X-Forwarded-For", client); w.Code != http.StatusOK {
			t.Fatalf("client %s behind the trusted proxy: %d", client, w.Code)
		}
	}
	if _, err := sluicegin.KeyByClientIP("not-an-address"); err == nil {
		t.Fatal("a bad trusted proxy was accepted")
	}
	h := newApp(t, nil, sluicegin.Middleware(sluice.New(baseURL, secretKey), name, sluicegin.WithKeyFunc(sluicegin.KeyByHeader("X-Client"))))
	if w := h.get("198.51.100.7:1"); w.Code != http.StatusBadRequest || h.handled != 0 {
		t.Fatalf("KeyByHeader without the header: %d", w.Code)
	}
}

func TestGinFailsOpenOrClosedOnceTheServerIsStopped(t *testing.T) {
	srv := startTestServer(t)
	name := limitName(t)
	putLimit(t, srv.URL, srv.Key, name, 5)
	quiet := sluicegin.WithLogger(slog.New(slog.DiscardHandler))
	closed := newApp(t, nil, sluicegin.Middleware(sluice.New(srv.URL, srv.Key, sluice.WithRetries(0)), name, quiet))
	open := newApp(t, nil, sluicegin.Middleware(sluice.New(srv.URL, srv.Key, sluice.WithRetries(0), sluice.WithFailPolicy(sluice.FailOpen)), name, quiet))
	var seen error
	hooked := newApp(t, nil, sluicegin.Middleware(sluice.New(srv.URL, srv.Key, sluice.WithRetries(0)), name,
		sluicegin.WithErrorHandler(func(c *gin.Context, err error) {
			seen = err
			c.String(http.StatusBadGateway, "no limiter")
		})))
	for _, a := range []*app{closed, open, hooked} {
		if w := a.get("198.51.100.7:1"); w.Code != http.StatusOK || w.Header().Get("RateLimit") == "" {
			t.Fatalf("while Sluice runs: %d %v", w.Code, w.Header())
		}
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	w := closed.get("198.51.100.7:1")
	if p := decodeProblem(t, w); w.Code != http.StatusServiceUnavailable || p["code"] != sluice.CodeUnavailable || w.Header().Get("Retry-After") != "1" || closed.handled != 1 || closed.after != 1 {
		t.Fatalf("fail closed with Sluice stopped: %d %v %v (handler ran %d times)", w.Code, p, w.Header(), closed.handled)
	}
	w = open.get("198.51.100.7:1")
	if w.Code != http.StatusOK || w.Body.String() != "ok" || open.handled != 2 || w.Header().Get("RateLimit") != "" {
		t.Fatalf("fail open with Sluice stopped: %d %q %v", w.Code, w.Body.String(), w.Header())
	}
	res, _ := sluice.New(srv.URL, srv.Key, sluice.WithRetries(0), sluice.WithFailPolicy(sluice.FailOpen)).Limit(testCtx(t), name, sluice.Decision{Key: "x"})
	if !res.Degraded {
		t.Fatalf("the fail-open result is not marked Degraded: %+v", res)
	}
	w = hooked.get("198.51.100.7:1")
	var e *sluice.Error
	if w.Code != http.StatusBadGateway || w.Body.String() != "no limiter" || seen == nil || errors.As(seen, &e) || hooked.handled != 1 {
		t.Fatalf("error handler with Sluice stopped: %d %q, saw %v", w.Code, w.Body.String(), seen)
	}
}

func TestGinAnswers500WhenSluiceRejectsTheDecisionItself(t *testing.T) {
	a := newApp(t, nil, sluicegin.Middleware(sluice.New(baseURL, secretKey), limitName(t)+".never-defined", sluicegin.WithLogger(slog.New(slog.DiscardHandler))))
	w := a.get("198.51.100.7:1")
	if p := decodeProblem(t, w); w.Code != http.StatusInternalServerError || p["code"] != sluice.CodeInternal || a.handled != 0 {
		t.Fatalf("unknown limit: %d %v", w.Code, p)
	}
}

// TestGinAnswers500WhenTheClientCannotSendTheDecision: a client that can send nothing (here a
// secret key with a trailing newline) refuses every decision with ErrInvalidArgument, this
// server's misconfiguration: 500, even when the client fails open (Sluice was never asked).
func TestGinAnswers500WhenTheClientCannotSendTheDecision(t *testing.T) {
	client := sluice.New(baseURL, secretKey+"\n", sluice.WithFailPolicy(sluice.FailOpen))
	a := newApp(t, nil, sluicegin.Middleware(client, limitName(t), sluicegin.WithLogger(slog.New(slog.DiscardHandler))))
	w := a.get("198.51.100.7:1")
	if p := decodeProblem(t, w); w.Code != http.StatusInternalServerError || p["code"] != sluice.CodeInternal || a.handled != 0 {
		t.Fatalf("a secret key with a newline, failing open: %d %v, handled %d times", w.Code, p, a.handled)
	}
}

func ExampleMiddleware() {
	client := sluice.New("https://sluice.example.com", "sk_live_…", sluice.WithTimeout(500*time.Millisecond))
	r := gin.New()
	r.Use(func(c *gin.Context) { c.Set("user", "ann") }) // your authentication
	r.Use(sluicegin.Middleware(client, "api", sluicegin.WithKeyFunc(sluicegin.KeyByContextValue("user"))))
	r.GET("/things", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	_ = r.Run(":8081")
}

// TestGinReleasesTheConcurrencyLeaseOnceTheChainHasRun: on a concurrency limit of 1, requests
// of one client one after another are all admitted (the middleware frees the request's slot
// once the rest of the chain has run), not refused until the lease's TTL (a minute) ends. The
// release is sent in the background once the chain has run: each request waits for it.
func TestGinReleasesTheConcurrencyLeaseOnceTheChainHasRun(t *testing.T) {
	name := limitName(t)
	if _, err := sluice.New(baseURL, secretKey).Put(testCtx(t), name, sluice.Definition{Kind: sluice.Concurrency, Rate: 1, LeaseTTL: 60_000}); err != nil {
		t.Fatal(err)
	}
	net := leaseReleases{released: make(chan int, 4)}
	a := newApp(t, nil, sluicegin.Middleware(sluice.New(baseURL, secretKey, sluice.WithHTTPClient(&http.Client{Transport: net})), name))
	for i := range 3 {
		if w := a.get("203.0.113.9:4444"); w.Code != http.StatusOK {
			t.Fatalf("request %d: %d (Retry-After %q), want 200: the previous request's lease was not released", i+1, w.Code, w.Header().Get("Retry-After"))
		}
		select {
		case status := <-net.released:
			if status != http.StatusNoContent {
				t.Fatalf("the release of request %d: status %d, want 204", i+1, status)
			}
		case <-testCtx(t).Done():
			t.Fatalf("waited for the lease of request %d to be released", i+1)
		}
	}
}

// leaseReleases is a network that tells on released the status of each lease release once Sluice
// has answered it (0: no answer).
type leaseReleases struct{ released chan int }

func (l leaseReleases) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if strings.HasPrefix(r.URL.Path, "/v1/leases/") && strings.HasSuffix(r.URL.Path, "/release") {
		status := 0
		if err == nil {
			status = resp.StatusCode
		}
		l.released <- status
	}
	return resp, err
}

type ginUser struct{ id string }

func (u *ginUser) String() string { return u.id }

// TestGinANilUserIsNoUser: a nil pointer stored as the user (whose String has a pointer receiver)
// is a request without one, 400, not a panic; a named integer type is keyed by its number.
func TestGinANilUserIsNoUser(t *testing.T) {
	name := limitName(t)
	putLimit(t, baseURL, secretKey, name, 5)
	type accountID int64
	a := newApp(t, []gin.HandlerFunc{func(c *gin.Context) {
		if c.GetHeader("X-Test-User") == "" {
			c.Set("user", (*ginUser)(nil))
		} else {
			c.Set("user", accountID(42))
		}
	}}, sluicegin.Middleware(sluice.New(baseURL, secretKey), name, sluicegin.WithKeyFunc(sluicegin.KeyByContextValue("user"))))
	w := a.get("192.0.2.1:1")
	if p := decodeProblem(t, w); w.Code != http.StatusBadRequest || p["code"] != sluice.CodeInvalidRequest || a.handled != 0 {
		t.Fatalf("a nil *ginUser: %d %v, handled %d times; want 400", w.Code, p, a.handled)
	}
	if w := a.get("192.0.2.1:1", "X-Test-User", "yes"); w.Code != http.StatusOK {
		t.Fatalf("an accountID: %d %s", w.Code, w.Body.String())
	}
	if v, err := sluice.New(baseURL, secretKey).Value(testCtx(t), name, "42"); err != nil || v.Value >= 5 {
		t.Fatalf("the key 42 holds %+v, %v; want a token spent", v, err)
	}
}
