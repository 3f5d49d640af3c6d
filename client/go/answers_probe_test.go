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
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// rewritingProxy is a reverse proxy in front of the real Sluice that replaces the body of every
// 200 answer whose request path passes match with body (keeping its status and headers).
func rewritingProxy(t *testing.T, match func(path string) bool, body string) string {
	t.Helper()
	target, err := url.Parse(baseURL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.StatusCode != http.StatusOK || !match(resp.Request.URL.Path) {
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

// TestABatchWindowNoShorterThanTheTimeoutIsRefused: a batch window as long as the client's
// timeout, or longer, would make every batched call run out of time waiting for its batch (and a
// FailOpen client admit everything unasked): the client refuses every call with
// ErrInvalidArgument, as it does a malformed base URL, whatever the fail policy.
func TestABatchWindowNoShorterThanTheTimeoutIsRefused(t *testing.T) {
	ctx := testCtx(t)
	name := limitName(t, "b")
	putLimit(t, newClient(t), name, 10)
	for _, window := range []time.Duration{time.Second, 2 * time.Second} {
		c := newClient(t, sluice.WithBatching(window, 10), sluice.WithTimeout(time.Second), sluice.WithFailPolicy(sluice.FailOpen))
		if r, err := c.Limit(ctx, name, sluice.Decision{Key: "k"}); !errors.Is(err, sluice.ErrInvalidArgument) {
			t.Errorf("a batch window of %v, a timeout of 1s, failing open: %+v, %v; want ErrInvalidArgument", window, r, err)
		}
	}
	c := newClient(t, sluice.WithBatching(time.Millisecond, 10), sluice.WithTimeout(time.Second))
	if r, err := c.Limit(ctx, name, sluice.Decision{Key: "k"}); err != nil || !r.OK {
		t.Fatalf("a batch window of 1ms, a timeout of 1s: %+v, %v", r, err)
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
