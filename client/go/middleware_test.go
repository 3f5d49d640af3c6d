package sluice_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// okHandler answers 200 "ok" and records the decision the middleware passed on.
type okHandler struct{ calls int }

func (h *okHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.calls++
	if res, ok := sluice.ResultFromContext(r.Context()); !ok || !res.OK {
		http.Error(w, fmt.Sprintf("no admitted result in the context: %+v", res), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte("ok"))
}

func serve(h http.Handler, remote string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/things", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func decodeProblem(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body.String(), err)
	}
	return p
}

func TestMiddlewareAdmitsThenAnswers429WithProblemRetryAfterAndRateLimitHeaders(t *testing.T) {
	c := newClient(t)
	name := limitName(t, "mw")
	putLimit(t, c, name, 2)
	next := &okHandler{}
	h := sluice.Middleware(c, name)(next)

	for i := range 2 {
		w := serve(h, "203.0.113.9:4444")
		if w.Code != http.StatusOK || w.Body.String() != "ok" {
			t.Fatalf("request %d: %d %s", i, w.Code, w.Body.String())
		}
		if w.Header().Get("RateLimit-Policy") != `"`+name+`";q=2;w=60` || !strings.HasPrefix(w.Header().Get("RateLimit"), `"`+name+`";r=`) {
			t.Fatalf("request %d headers: %v", i, w.Header())
		}
	}
	w := serve(h, "203.0.113.9:5555") // another connection, same client
	if w.Code != http.StatusTooManyRequests || next.calls != 2 {
		t.Fatalf("third request: %d (handler called %d times)", w.Code, next.calls)
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
	if w := serve(h, "203.0.113.10:4444"); w.Code != http.StatusOK {
		t.Fatalf("another client: %d", w.Code)
	}
}

func TestMiddlewareWithKeyCountAndLimitHandler(t *testing.T) {
	c := newClient(t)
	name := limitName(t, "mw")
	putLimit(t, c, name, 3)
	next := &okHandler{}
	h := sluice.Middleware(c, name,
		sluice.WithKeyFunc(sluice.KeyByHeader("X-User")),
		sluice.WithCountFunc(func(r *http.Request) (float64, error) { return 2, nil }),
		sluice.WithLimitHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, _ := sluice.ResultFromContext(r.Context())
			w.WriteHeader(http.StatusTeapot)
			fmt.Fprintf(w, "slow down %s", res.Key)
		})),
	)(next)

	if w := serve(h, "192.0.2.1:1", "X-User", "ann"); w.Code != http.StatusOK {
		t.Fatalf("first: %d %s", w.Code, w.Body.String())
	}
	// Same user from another address: the key is the header, and 2 of 3 tokens are gone.
	w := serve(h, "192.0.2.2:1", "X-User", "ann")
	if w.Code != http.StatusTeapot || w.Body.String() != "slow down ann" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("second: %d %q %v", w.Code, w.Body.String(), w.Header())
	}
	if w := serve(h, "192.0.2.1:1", "X-User", "bob"); w.Code != http.StatusOK {
		t.Fatalf("bob: %d", w.Code)
	}
	w = serve(h, "192.0.2.1:1")
	if p := decodeProblem(t, w); w.Code != http.StatusBadRequest || p["code"] != sluice.CodeInvalidRequest || next.calls != 2 {
		t.Fatalf("no X-User: %d %v", w.Code, p)
	}
}

func TestKeyByClientIPBelievesForwardedForOnlyFromTrustedProxies(t *testing.T) {
	key, err := sluice.KeyByClientIP("10.0.0.0/8", "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		remote, xff, want string
	}{
		{"198.51.100.7:9", "", "198.51.100.7"},
		{"198.51.100.7:9", "203.0.113.1", "198.51.100.7"},                // untrusted peer: forged header ignored
		{"10.1.2.3:9", "203.0.113.1", "203.0.113.1"},                     // trusted proxy
		{"10.1.2.3:9", "203.0.113.1, 192.0.2.1", "203.0.113.1"},          // through two trusted proxies
		{"10.1.2.3:9", "6.6.6.6, 203.0.113.1", "203.0.113.1"},            // the client's own forged entry is left of it
		{"10.1.2.3:9", "garbage, 10.9.9.9", "10.9.9.9"},                  // a broken entry: the last address vouched for
		{"10.1.2.3:9", "", "10.1.2.3"},                                   // a proxy's own request
		{"[2001:db8:1:2:3:4:5:6]:9", "203.0.113.1", "2001:db8:1:2::/64"}, // IPv6 by its /64
		{"[::ffff:198.51.100.7]:9", "", "198.51.100.7"},                  // an IPv4-mapped peer
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.remote
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		if got, err := key(r); err != nil || got != tc.want {
			t.Errorf("peer %s, X-Forwarded-For %q: key %q, %v; want %q", tc.remote, tc.xff, got, err, tc.want)
		}
	}
	if _, err := sluice.KeyByClientIP("not-an-address"); err == nil {
		t.Fatal("a bad trusted proxy was accepted")
	}
}

func TestMiddlewareCannotBeDodgedWithForwardedForFromAnUntrustedPeer(t *testing.T) {
	c := newClient(t)
	name := limitName(t, "mw")
	putLimit(t, c, name, 1)
	key, err := sluice.KeyByClientIP("10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	h := sluice.Middleware(c, name, sluice.WithKeyFunc(key))(&okHandler{})
	if w := serve(h, "198.51.100.7:1", "X-Forwarded-For", "1.1.1.1"); w.Code != http.StatusOK {
		t.Fatalf("first: %d", w.Code)
	}
	if w := serve(h, "198.51.100.7:1", "X-Forwarded-For", "2.2.2.2"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("a new X-Forwarded-For from the same untrusted peer: %d, want 429", w.Code)
	}
	// Behind the trusted proxy, two clients have a token each.
	for _, client := range []string{"1.1.1.1", "2.2.2.2"} {
		if w := serve(h, "10.0.0.1:1", "X-Forwarded-For", client); w.Code != http.StatusOK {
			t.Fatalf("client %s behind the proxy: %d", client, w.Code)
		}
	}
}

func TestMiddlewareAppliesTheFailPolicyWhenSluiceIsUnreachable(t *testing.T) {
	closed, _ := unreachable(t)
	w := serve(sluice.Middleware(closed, "x", sluice.WithLogger(slog.New(slog.DiscardHandler)))(&okHandler{}), "198.51.100.7:1")
	if p := decodeProblem(t, w); w.Code != http.StatusServiceUnavailable || p["code"] != sluice.CodeUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("fail closed: %d %v", w.Code, p)
	}

	open, _ := unreachable(t, sluice.WithFailPolicy(sluice.FailOpen))
	next := &okHandler{}
	w = serve(sluice.Middleware(open, "x")(next), "198.51.100.7:1")
	if w.Code != http.StatusOK || next.calls != 1 || w.Header().Get("RateLimit") != "" {
		t.Fatalf("fail open: %d %v", w.Code, w.Header())
	}

	var seen error
	w = serve(sluice.Middleware(closed, "x", sluice.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
		seen = err
		w.WriteHeader(http.StatusBadGateway)
	}))(&okHandler{}), "198.51.100.7:1")
	var e *sluice.Error
	if w.Code != http.StatusBadGateway || seen == nil || errors.As(seen, &e) {
		t.Fatalf("error handler: %d, saw %v", w.Code, seen)
	}
}

func TestMiddlewareAnswers500WhenSluiceRejectsTheDecisionItself(t *testing.T) {
	c := newClient(t)
	h := sluice.Middleware(c, limitName(t, "never-defined"), sluice.WithLogger(slog.New(slog.DiscardHandler)))(&okHandler{})
	w := serve(h, "198.51.100.7:1")
	if p := decodeProblem(t, w); w.Code != http.StatusInternalServerError || p["code"] != sluice.CodeInternal {
		t.Fatalf("unknown limit: %d %v", w.Code, p)
	}
}

func TestMiddlewareRefusesWith400WhenTheCountCannotBeTold(t *testing.T) {
	next := &okHandler{}
	h := sluice.Middleware(newClient(t), limitName(t, "mw"), sluice.WithCountFunc(func(r *http.Request) (float64, error) {
		return strconv.ParseFloat(r.Header.Get("X-Cost"), 64)
	}))(next)
	for _, cost := range []string{"lots", "-3", "NaN", "1e16"} {
		w := serve(h, "198.51.100.7:1", "X-Cost", cost)
		if p := decodeProblem(t, w); w.Code != http.StatusBadRequest || p["code"] != sluice.CodeInvalidRequest || next.calls != 0 {
			t.Fatalf("cost %q: %d %v", cost, w.Code, p)
		}
	}
	// A limit name Sluice cannot know is this server's mistake: a 500, never a pass or a 503.
	badName := sluice.Middleware(newClient(t, sluice.WithFailPolicy(sluice.FailOpen)), "no such name", sluice.WithLogger(slog.New(slog.DiscardHandler)))(next)
	if w := serve(badName, "198.51.100.7:1"); w.Code != http.StatusInternalServerError || next.calls != 0 {
		t.Fatalf("an invalid limit name under FailOpen: %d", w.Code)
	}
}

func TestMiddlewareFailsOpenOrClosedOnceTheServerIsStopped(t *testing.T) {
	srv := startTestServer(t)
	ctx := testCtx(t)
	name := limitName(t, "mw")
	if _, err := sluice.New(srv.URL, srv.Key).Put(ctx, name, sluice.Definition{Kind: sluice.TokenBucket, Rate: 5, Period: 60000}); err != nil {
		t.Fatal(err)
	}
	quiet := sluice.WithLogger(slog.New(slog.DiscardHandler))
	closedNext, openNext := &okHandler{}, &okHandler{}
	closed := sluice.Middleware(sluice.New(srv.URL, srv.Key, sluice.WithRetries(0)), name, quiet)(closedNext)
	open := sluice.Middleware(sluice.New(srv.URL, srv.Key, sluice.WithRetries(0), sluice.WithFailPolicy(sluice.FailOpen)), name, quiet)(openNext)
	for _, h := range []http.Handler{closed, open} {
		if w := serve(h, "198.51.100.7:1"); w.Code != http.StatusOK || w.Header().Get("RateLimit") == "" {
			t.Fatalf("while Sluice runs: %d %v", w.Code, w.Header())
		}
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	w := serve(closed, "198.51.100.7:1")
	if p := decodeProblem(t, w); w.Code != http.StatusServiceUnavailable || p["code"] != sluice.CodeUnavailable || w.Header().Get("Retry-After") != "1" || closedNext.calls != 1 {
		t.Fatalf("fail closed with Sluice stopped: %d %v %v", w.Code, p, w.Header())
	}
	w = serve(open, "198.51.100.7:1")
	if w.Code != http.StatusOK || openNext.calls != 2 || w.Header().Get("RateLimit") != "" {
		t.Fatalf("fail open with Sluice stopped: %d %v (handler called %d times)", w.Code, w.Header(), openNext.calls)
	}
}

type userKey struct{}

type userID int

func (u userID) String() string { return fmt.Sprintf("user-%d", int(u)) }

func TestMiddlewareKeysByTheAuthenticatedUserInTheRequestContext(t *testing.T) {
	c := newClient(t)
	name := limitName(t, "mw")
	putLimit(t, c, name, 1)
	next := &okHandler{}
	limited := sluice.Middleware(c, name, sluice.WithKeyFunc(sluice.KeyByContextValue(userKey{})))(next)
	// What an authentication middleware does: the user from X-Test-User goes into the context.
	authenticate := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.Header.Get("X-Test-User"); u != "" {
			n, _ := strconv.Atoi(u)
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, userID(n)))
		}
		limited.ServeHTTP(w, r)
	})

	if w := serve(authenticate, "198.51.100.7:1", "X-Test-User", "1"); w.Code != http.StatusOK {
		t.Fatalf("user 1: %d %s", w.Code, w.Body.String())
	}
	w := serve(authenticate, "198.51.100.8:1", "X-Test-User", "1") // another address, same user
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("user 1 again: %d, want 429", w.Code)
	}
	if v, err := c.Value(testCtx(t), name, "user-1"); err != nil || v.Value >= 1 {
		t.Fatalf("the key user-1 holds %+v, %v; want its token spent", v, err)
	}
	if w := serve(authenticate, "198.51.100.7:1", "X-Test-User", "2"); w.Code != http.StatusOK {
		t.Fatalf("user 2: %d", w.Code)
	}
	w = serve(authenticate, "198.51.100.7:1")
	if p := decodeProblem(t, w); w.Code != http.StatusBadRequest || p["code"] != sluice.CodeInvalidRequest || next.calls != 2 {
		t.Fatalf("no user: %d %v", w.Code, p)
	}
}

func TestKeyFromValueTakesStringsStringersAndIntegersOnly(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{{"ann", "ann"}, {userID(7), "user-7"}, {int64(42), "42"}, {uint8(3), "3"}} {
		if got, err := sluice.KeyFromValue(tc.v, "user"); err != nil || got != tc.want {
			t.Errorf("%#v: %q, %v; want %q", tc.v, got, err, tc.want)
		}
	}
	for _, v := range []any{nil, "", 1.5, struct{}{}} {
		if got, err := sluice.KeyFromValue(v, "user"); err == nil {
			t.Errorf("%#v: key %q, want an error", v, got)
		}
	}
}

// TestMiddlewareAnswersThePlansRefusalWith429: a tenant over its plan's decision rate gets
// Sluice's 429 tenant_quota_exceeded, which the middleware passes on as a 429 with Retry-After
// and a problem of that code, logged as a warning: not a 500 "internal error", and not failing
// open either (Sluice answered).
func TestMiddlewareAnswersThePlansRefusalWith429(t *testing.T) {
	srv := startTestServer(t, "PLAN_DECISIONS_PER_SECOND=1")
	c := sluice.New(srv.URL, srv.Key, sluice.WithFailPolicy(sluice.FailOpen))
	name := limitName(t, "mw")
	putLimit(t, c, name, 100)
	logs := &records{}
	h := sluice.Middleware(c, name, sluice.WithLogger(slog.New(logs)))(&okHandler{})

	// The plan admits one decision a second (a burst of one): of requests in a quick row, the
	// plan refuses all but about one a second.
	var refused *httptest.ResponseRecorder
	for i := 0; i < 20 && refused == nil; i++ {
		switch w := serve(h, "198.51.100.7:1"); w.Code {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			refused = w
		default:
			t.Fatalf("request %d: %d %s", i, w.Code, w.Body.String())
		}
	}
	if refused == nil {
		t.Fatal("the plan refused none of 20 requests")
	}
	if s, err := strconv.Atoi(refused.Header().Get("Retry-After")); err != nil || s < 1 || s > 2 {
		t.Fatalf("Retry-After %q: want 1 or 2 seconds", refused.Header().Get("Retry-After"))
	}
	p := decodeProblem(t, refused)
	if p["code"] != sluice.CodeTenantQuotaExceeded || p["status"] != float64(429) || p["retryAfter"].(float64) < 1 {
		t.Fatalf("problem %v", p)
	}
	if logs.count(slog.LevelError) != 0 || logs.count(slog.LevelWarn) == 0 {
		t.Fatalf("logged:\n%s want warnings, no error", logs.at(slog.LevelDebug))
	}
}

// TestMiddlewareAnswers400ForAKeySluiceRefuses: a key taken from the request that Sluice cannot
// take (too long, reserved, not UTF-8) is the visitor's doing: a 400 as for a request without a
// key, with nothing logged as an error, rather than a 500.
func TestMiddlewareAnswers400ForAKeySluiceRefuses(t *testing.T) {
	c := newClient(t)
	name := limitName(t, "mw")
	putLimit(t, c, name, 100)
	logs := &records{}
	next := &okHandler{}
	h := sluice.Middleware(c, name, sluice.WithKeyFunc(sluice.KeyByHeader("X-User")), sluice.WithLogger(slog.New(logs)))(next)
	for _, key := range []string{strings.Repeat("k", 257), "ip:203.0.113.1", "session:abc", "u\xff"} {
		w := serve(h, "198.51.100.7:1", "X-User", key)
		if p := decodeProblem(t, w); w.Code != http.StatusBadRequest || p["code"] != sluice.CodeInvalidRequest {
			t.Errorf("key %q: %d %v", key, w.Code, p)
		}
	}
	if next.calls != 0 || logs.count(slog.LevelError) != 0 {
		t.Fatalf("handler called %d times; logged:\n%s", next.calls, logs.at(slog.LevelDebug))
	}
	if w := serve(h, "198.51.100.7:1", "X-User", strings.Repeat("k", 256)); w.Code != http.StatusOK {
		t.Fatalf("a key of 256 bytes: %d %s", w.Code, w.Body.String())
	}
}

// TestKeyByClientIPTakesBracketedIPv6AndMappedPrefixes: an X-Forwarded-For entry written
// "[2001:db8::1]" is that address (not a broken entry that leaves every visitor keyed by the
// proxy), and a trusted proxy written as an IPv4-mapped prefix trusts the IPv4 peers it covers,
// as the TypeScript middleware does.
func TestKeyByClientIPTakesBracketedIPv6AndMappedPrefixes(t *testing.T) {
	key, err := sluice.KeyByClientIP("::ffff:10.0.0.0/104", "2001:db8:ff::1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		remote, xff, want string
	}{
		{"10.1.2.3:9", "[2001:db8:1:2::9]", "2001:db8:1:2::/64"},
		{"10.1.2.3:9", "[2001:db8:1:2::9], [2001:db8:ff::1]", "2001:db8:1:2::/64"},
		{"10.1.2.3:9", "203.0.113.1", "203.0.113.1"},
		{"[::ffff:10.1.2.3]:9", "203.0.113.1", "203.0.113.1"},
		{"11.1.2.3:9", "203.0.113.1", "11.1.2.3"},
		{"10.1.2.3:9", "[2001:db8::1]:443", "10.1.2.3"}, // a port is not taken (nor by the TypeScript middleware)
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.remote
		r.Header.Set("X-Forwarded-For", tc.xff)
		if got, err := key(r); err != nil || got != tc.want {
			t.Errorf("peer %s, X-Forwarded-For %q: key %q, %v; want %q", tc.remote, tc.xff, got, err, tc.want)
		}
	}
}

// TestKeyByClientIPTrustsIPv4PeersOnlyThroughIPv4Entries: an IPv6 prefix that covers
// ::ffff:0:0/96 ("::/0", "::/8") trusts IPv6 peers only, not every IPv4 peer (whose forged
// X-Forwarded-For would then choose its key), and an IPv4-mapped prefix shorter than /96
// ("::ffff:10.0.0.0/8", which is ::/8) is a configuration error, as in the TypeScript middleware.
func TestKeyByClientIPTrustsIPv4PeersOnlyThroughIPv4Entries(t *testing.T) {
	for _, s := range []string{"::ffff:10.0.0.0/8", "::ffff:0:0/95", "::ffff:10.0.0.0/0"} {
		if _, err := sluice.KeyByClientIP(s); err == nil {
			t.Errorf("the IPv4-mapped prefix %q was accepted", s)
		}
	}
	for _, s := range []string{"::/0", "::/8", "::/80", "::fffe:0:0/95"} {
		key, err := sluice.KeyByClientIP(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		for _, tc := range []struct {
			remote, want string
		}{
			{"198.51.100.9:1234", "198.51.100.9"},
			{"[::ffff:198.51.100.9]:1234", "198.51.100.9"},
		} {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.remote
			r.Header.Set("X-Forwarded-For", "203.0.113.66")
			if got, err := key(r); err != nil || got != tc.want {
				t.Errorf("trusting %q, peer %s: key %q, %v; want %q", s, tc.remote, got, err, tc.want)
			}
		}
	}
	// "::/0" still trusts IPv6 peers, and "::ffff:0:0/96" every IPv4 one, as written.
	for _, tc := range []struct {
		trusted, remote, want string
	}{
		{"::/0", "[2001:db8::1]:1234", "203.0.113.0"},
		{"::ffff:0:0/96", "198.51.100.9:1234", "203.0.113.0"},
	} {
		key, err := sluice.KeyByClientIP(tc.trusted)
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.remote
		r.Header.Set("X-Forwarded-For", tc.want)
		if got, err := key(r); err != nil || got != tc.want {
			t.Errorf("trusting %q, peer %s: key %q, %v; want %q", tc.trusted, tc.remote, got, err, tc.want)
		}
	}
}

// TestMiddlewareReleasesItsConcurrencyLeaseWhenTheRequestIsAnswered: on a concurrency limit of 1
// a request holds the key's one slot while its handler runs (a second request of the same key
// meanwhile is refused) and frees it once answered, so requests one after another are all
// admitted, not refused until the lease's TTL (a minute here) ends. The release is sent in the
// background once the handler returns: each request waits for the one before it to be released.
func TestMiddlewareReleasesItsConcurrencyLeaseWhenTheRequestIsAnswered(t *testing.T) {
	net := newLeaseReleases()
	c, ctx := newClient(t, sluice.WithHTTPClient(&http.Client{Transport: net})), testCtx(t)
	name := limitName(t, "inflight")
	if _, err := c.Put(ctx, name, sluice.Definition{Kind: sluice.Concurrency, Rate: 1, LeaseTTL: 60_000}); err != nil {
		t.Fatal(err)
	}
	var inner *httptest.ResponseRecorder
	var h http.Handler
	h = sluice.Middleware(c, name)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if inner == nil { // the first request: another of its key arrives while it runs
			inner = serve(h, "192.0.2.9:1234")
		}
		_, _ = w.Write([]byte("ok"))
	}))
	if first := serve(h, "192.0.2.9:1234"); first.Code != http.StatusOK {
		t.Fatalf("the first request: %d %s", first.Code, first.Body)
	}
	if inner.Code != http.StatusTooManyRequests {
		t.Fatalf("a request of the same key while the first ran: %d, want 429 (the one slot is the first's)", inner.Code)
	}
	net.waitReleased(t, "the first request")
	for i := range 3 {
		if next := serve(h, "192.0.2.9:1234"); next.Code != http.StatusOK {
			t.Fatalf("request %d after the first was answered: %d (Retry-After %q), want 200: its lease was not released", i+2, next.Code, next.Header().Get("Retry-After"))
		}
		net.waitReleased(t, fmt.Sprintf("request %d", i+2))
	}
}
