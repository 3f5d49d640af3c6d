package sluice_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// rewritingProxy is a reverse proxy in front of the real Sluice that replaces the body of every
// 200 or 201 answer whose request path passes match with body (keeping its status and headers).
func rewritingProxy(t *testing.T, match func(path string) bool, body string) string {
	t.Helper()
	target, err := url.Parse(baseURL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		if (resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated) || !match(resp.Request.URL.Path) {
			return nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(strings.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

func decisionPath(p string) bool {
	return strings.HasSuffix(p, "/limit") || strings.HasSuffix(p, "/check") || p == "/v1/decisions"
}

// TestADecisionAnswerWithoutItsRequiredMembersDoesNotDecode: a 200 answer of {} or null (or with
// a decision lacking a member the OpenAPI document requires) is an answer that does not decode,
// an error whatever the fail policy, as garbage is; not a refusal nobody made (it was a Result
// with OK false and no error, which the middleware answered 429 without Retry-After).
func TestADecisionAnswerWithoutItsRequiredMembersDoesNotDecode(t *testing.T) {
	ctx := testCtx(t)
	name := limitName(t, "b")
	putLimit(t, newClient(t), name, 100)
	for _, body := range []string{`{}`, `null`, `{"ok":null,"retryAfter":null,"remaining":1,"name":"x","key":null}`,
		`{"ok":true,"retryAfter":null,"remaining":1,"key":null}`, `{"results":[{}]}`} {
		proxy := rewritingProxy(t, decisionPath, body)
		for _, policy := range []struct {
			name string
			p    sluice.FailPolicy
		}{{"fail closed", sluice.FailClosed}, {"fail open", sluice.FailOpen}} {
			c := sluice.New(proxy, secretKey, sluice.WithFailPolicy(policy.p))
			for what, call := range map[string]func() (sluice.Result, error){
				"Limit": func() (sluice.Result, error) { return c.Limit(ctx, name, sluice.Decision{Key: "k"}) },
				"Check": func() (sluice.Result, error) { return c.Check(ctx, name, sluice.Decision{Key: "k"}) },
				"batched Limit": func() (sluice.Result, error) {
					return sluice.New(proxy, secretKey, sluice.WithFailPolicy(policy.p), sluice.WithBatching(time.Millisecond, 10)).Limit(ctx, name, sluice.Decision{Key: "k"})
				},
			} {
				r, err := call()
				if err == nil || !strings.Contains(err.Error(), "decode the answer") || errors.Is(err, sluice.ErrInvalidArgument) {
					t.Errorf("%s, %s, answered 200 %s: %+v, %v; want an error: the answer does not decode", what, policy.name, body, r, err)
				}
			}
		}
		logs := &records{}
		h := sluice.Middleware(sluice.New(proxy, secretKey), name, sluice.WithLogger(loggerInto(logs)))(&okHandler{})
		if w := serve(h, "198.51.100.7:1"); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" {
			t.Errorf("the middleware, Sluice answering 200 %s: %d (Retry-After %q) %q; want 503: no decision", body, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
	}
}

// TestAHoldOrRefundAnswerWithoutItsRequiredMembersDoesNotDecode: a hold's or a refund's answer of
// {} or null is an answer that does not decode, an error, as a decision's is: not a hold without
// an ID or a refund of nothing (both were a zero value and no error).
func TestAHoldOrRefundAnswerWithoutItsRequiredMembersDoesNotDecode(t *testing.T) {
	ctx := testCtx(t)
	name := limitName(t, "hr")
	if _, err := newClient(t).Put(ctx, name, sluice.Definition{Kind: sluice.FixedWindow, Rate: 100, Period: 3_600_000}); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{`{}`, `null`, `{"holdId":"h","expiresAt":1}`, `{"name":"x","key":null,"refunded":1}`} {
		c := sluice.New(rewritingProxy(t, func(p string) bool { return p == "/v1/holds" || strings.HasSuffix(p, "/refund") }, body), secretKey)
		h, err := c.Hold(ctx, []sluice.HoldItem{{Name: name, Key: "k", Count: 1}}, time.Minute)
		if err == nil || !strings.Contains(err.Error(), "decode the answer") {
			t.Errorf("Hold answered 201 %s: %+v, %v; want an error: the answer does not decode", body, h, err)
		}
		r, err := c.Refund(ctx, name, sluice.Refund{Key: "k", Count: 1})
		if err == nil || !strings.Contains(err.Error(), "decode the answer") {
			t.Errorf("Refund answered 200 %s: %+v, %v; want an error: the answer does not decode", body, r, err)
		}
	}
}

// gatewayProxy is a reverse proxy in front of the real Sluice that answers decisions (…/limit)
// itself with a gateway's 429: an HTML page and Retry-After: 7, as a rate limit in front of
// Sluice would; everything else goes through.
func gatewayProxy(t *testing.T) string {
	t.Helper()
	target, err := url.Parse(baseURL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/limit") {
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte("<h1>429 Too Many Requests</h1>"))
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestAGatewaysTooManyRequestsIsSluiceUnavailable: a 429 that is not Sluice's problem (a gateway
// in front of it limiting this service) means Sluice was not asked: the fail policy applies
// (open: admitted, degraded) and the middleware failing closed answers 503 with the gateway's
// Retry-After, logged as Sluice unavailable; not a 500 "decision refused as invalid" logged as
// an error (which dropped the Retry-After).
func TestAGatewaysTooManyRequestsIsSluiceUnavailable(t *testing.T) {
	ctx := testCtx(t)
	proxy := gatewayProxy(t)
	r, err := sluice.New(proxy, secretKey, sluice.WithFailPolicy(sluice.FailOpen)).Limit(ctx, "api", sluice.Decision{Key: "k"})
	if err != nil || !r.OK || !r.Degraded {
		t.Fatalf("fail open, a gateway's 429: %+v, %v; want admitted, degraded", r, err)
	}
	_, err = sluice.New(proxy, secretKey).Limit(ctx, "api", sluice.Decision{Key: "k"})
	var e *sluice.Error
	if !errors.As(err, &e) || e.Status != http.StatusTooManyRequests || e.Code != "" || e.RetryAfter != 7*time.Second {
		t.Fatalf("fail closed, a gateway's 429: %v; want its *Error (429, no code, RetryAfter 7s)", err)
	}
	logs := &records{}
	h := sluice.Middleware(sluice.New(proxy, secretKey), "api", sluice.WithLogger(loggerInto(logs)))(&okHandler{})
	w := serve(h, "198.51.100.7:1")
	if p := decodeProblem(t, w); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "7" || p["code"] != sluice.CodeUnavailable {
		t.Fatalf("the middleware failing closed, a gateway's 429: %d (Retry-After %q) %v; want 503, Retry-After 7", w.Code, w.Header().Get("Retry-After"), p)
	}
	if got := logs.at(slog.LevelError); got != "" {
		t.Fatalf("a gateway's 429 was logged as an error:\n%s", got)
	}
}

// TestABatchWindowLongerThanTheTimeoutIsCut: a batch window as long as the client's timeout, or
// longer, made every batched call run out of time waiting for its batch (and a FailOpen client
// admit unasked): it is cut to half the timeout, so a lone call's batch is sent with time left.
func TestABatchWindowLongerThanTheTimeoutIsCut(t *testing.T) {
	ctx := testCtx(t)
	name := limitName(t, "b")
	putLimit(t, newClient(t), name, 10)
	c := newClient(t, sluice.WithBatching(time.Hour, 10), sluice.WithTimeout(4*time.Second))
	if r, err := c.Limit(ctx, name, sluice.Decision{Key: "k"}); err != nil || !r.OK || r.Degraded {
		t.Fatalf("a lone call, a batch window of an hour, a timeout of 4s: %+v, %v; want Sluice's admission", r, err)
	}
}

// TestABaseURLWithAQueryOrFragmentIsRefused: the routes are appended to the base URL, so after a
// query or a fragment they would never reach the path (calls failed confusingly, or, failing
// open, admitted unasked): every call is ErrInvalidArgument, whatever the fail policy.
func TestABaseURLWithAQueryOrFragmentIsRefused(t *testing.T) {
	ctx := testCtx(t)
	for _, base := range []string{baseURL + "/?x=1", baseURL + "#f", baseURL + "?", baseURL + "/sluice?x=1#f"} {
		c := sluice.New(base, secretKey, sluice.WithFailPolicy(sluice.FailOpen))
		if r, err := c.Limit(ctx, "api", sluice.Decision{Key: "k"}); !errors.Is(err, sluice.ErrInvalidArgument) {
			t.Errorf("base URL %q, failing open: %+v, %v; want ErrInvalidArgument", base, r, err)
		}
	}
}

// TestABaseURLWithAPathPrefixIsKept: a Sluice a reverse proxy serves under a path prefix is
// reached with the prefix in the base URL, with or without a trailing slash.
func TestABaseURLWithAPathPrefixIsKept(t *testing.T) {
	ctx := testCtx(t)
	target, err := url.Parse(baseURL)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/sluice/", http.StripPrefix("/sluice", httputil.NewSingleHostReverseProxy(target)))
	proxy := httptest.NewServer(mux)
	defer proxy.Close()
	name := limitName(t, "b")
	for _, base := range []string{proxy.URL + "/sluice", proxy.URL + "/sluice/"} {
		c := sluice.New(base, secretKey)
		if _, err := c.Put(ctx, name, sluice.Definition{Kind: sluice.TokenBucket, Rate: 10, Period: 60_000}); err != nil {
			t.Fatalf("base URL %q: Put: %v", base, err)
		}
		if r, err := c.Limit(ctx, name, sluice.Decision{Key: "k"}); err != nil || !r.OK {
			t.Fatalf("base URL %q: Limit: %+v, %v", base, r, err)
		}
		if v, err := c.Value(ctx, name, "k"); err != nil || v.Value >= 10 {
			t.Fatalf("base URL %q: Value: %+v, %v; want a token spent", base, v, err)
		}
	}
}

// firstAttemptHangs is a reverse proxy in front of the real Sluice before which the first
// request of each route suffix it is given (…/check, …/limit) hangs, never forwarded, until its
// client gives up; it counts the requests of each.
type firstAttemptHangs struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string]int
}

func newFirstAttemptHangs(t *testing.T, suffixes ...string) *firstAttemptHangs {
	t.Helper()
	target, err := url.Parse(baseURL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	p := &firstAttemptHangs{seen: map[string]int{}}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, s := range suffixes {
			if strings.HasSuffix(r.URL.Path, s) {
				p.mu.Lock()
				p.seen[s]++
				n := p.seen[s]
				p.mu.Unlock()
				if n == 1 {
					// Read to the end: only then does the server watch the connection, and
					// end r's context when the client hangs up.
					_, _ = io.Copy(io.Discard, r.Body)
					<-r.Context().Done()
					return
				}
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *firstAttemptHangs) count(suffix string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[suffix]
}

// TestAnAttemptTheHTTPClientsTimeoutEndedIsRetried: with WithHTTPClient(&http.Client{Timeout: …})
// an attempt that runs out of that time got no answer, a network error like any: a call that may
// be retried (Check) is retried while it has time left (it was not: the timeout's error is a
// context.DeadlineExceeded, taken for the call's own); one that may not (Limit without an
// Idempotency-Key) still is not.
func TestAnAttemptTheHTTPClientsTimeoutEndedIsRetried(t *testing.T) {
	ctx := testCtx(t)
	name := limitName(t, "b")
	putLimit(t, newClient(t), name, 10)
	proxy := newFirstAttemptHangs(t, "/check", "/limit")
	c := sluice.New(proxy.URL, secretKey, sluice.WithTimeout(20*time.Second), sluice.WithBackoff(time.Millisecond, time.Millisecond),
		sluice.WithHTTPClient(&http.Client{Timeout: 1500 * time.Millisecond}))
	if r, err := c.Check(ctx, name, sluice.Decision{Key: "k"}); err != nil || !r.OK || proxy.count("/check") != 2 {
		t.Fatalf("Check whose first attempt the http.Client's timeout ended: %+v, %v, %d attempts; want admitted on the second", r, err, proxy.count("/check"))
	}
	if r, err := c.Limit(ctx, name, sluice.Decision{Key: "k"}); err == nil || proxy.count("/limit") != 1 {
		t.Fatalf("Limit (no Idempotency-Key) whose first attempt the http.Client's timeout ended: %+v, %v, %d attempts; want its error, sent once", r, err, proxy.count("/limit"))
	}
}
