package sluice_test

import (
	"errors"
	"io"
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
