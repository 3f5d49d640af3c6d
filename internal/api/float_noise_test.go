package api_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestTheValueOfAFullShardedKeyIsAtMostItsMaximum: a key no decision touched is full; the sum
// over its shards must not exceed the limit's maximum (1e7 in 7 shards sums to 10000000.000000002).
func TestTheValueOfAFullShardedKeyIsAtMostItsMaximum(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", map[string]any{"kind": "token bucket", "rate": 1e7, "period": 1000, "shards": 7})
		v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/x/value?key=k", a.key, nil), http.StatusOK)
		if got := number(t, v, "value"); got > 1e7 {
			t.Fatalf("value %v of a full key exceeds the maximum 1e7 (fullAt %v)", got, v["fullAt"])
		}
	})
}

// TestAnEmptyPathSegmentNamesNoRoute: a path with an empty segment matches no path of the
// document, which answers such a path 404 not_found; gin matched the empty segment as a :param.
func TestAnEmptyPathSegmentNamesNoRoute(t *testing.T) {
	h := newHarness(t, sqliteURL(t))
	a := h.newTenant(t, "acme")
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/limits//limit", ""},                // was 405 method_not_allowed, Allow: POST
		{"POST", "/v1/holds//settle", `{"counts":[1]}`}, // was 404 no such hold (or 400 on another body)
		{"POST", "/v1/limits//limit", `{}`},             // was 404 limit_not_found
	} {
		var body any
		if c.body != "" {
			body = c.body
		}
		requireProblem(t, h.send(t, c.method, c.path, a.key, body), http.StatusNotFound, "not_found")
	}
}

// TestABodyOfAnotherMediaTypeIsReadAsJSON: the server does not read Content-Type (curl -d sends
// application/x-www-form-urlencoded); the document said bodies were application/json only, and
// now says so. Each answer is checked against the document.
func TestABodyOfAnotherMediaTypeIsReadAsJSON(t *testing.T) {
	h := newHarness(t, sqliteURL(t))
	a := h.newTenant(t, "acme")
	defineFixed(t, h, a.key, "x", 10)
	for i, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data", ""} {
		req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/limits/x/limit", strings.NewReader(`{"key":"a"}`))
		req.Header.Set("Authorization", "Bearer "+a.key)
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		r := response{status: res.StatusCode, header: res.Header, body: raw}
		checkContract(t, request{method: req.Method, target: "/v1/limits/x/limit", contentType: ct, body: []byte(`{"key":"a"}`)}, r)
		if d := requireJSON(t, r, http.StatusOK); d["ok"] != true || d["remaining"] != float64(9-i) {
			t.Fatalf("Content-Type %q: %s, want the decision of the JSON body", ct, r)
		}
	}
}

// TestAWindowAdmitsItsRateInFractionalCounts: a window of 0.3 admits three counts of 0.1
// (a budget of $0.30 spent 10 cents at a time). 0.3 - 0.1 - 0.1 is 0.09999999999999998 in
// floating point, so the third was refused for the rest of the window while the answer said
// "remaining": 0.1; a token bucket only got by on the refill of the millisecond between.
func TestAWindowAdmitsItsRateInFractionalCounts(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		for _, def := range []map[string]any{
			{"kind": "fixed window", "rate": 0.3, "period": 86400000},
			{"kind": "sliding window", "rate": 0.3, "period": 86400000},
			{"kind": "quota", "rate": 0.3, "calendar": "month", "timeZone": "UTC"},
		} {
			h.define(t, a.key, "budget", def)
			for i := range 3 {
				d := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/budget/limit", a.key, map[string]any{"key": "k", "count": 0.1}), http.StatusOK)
				if d["ok"] != true {
					t.Errorf("%s: count 0.1 number %d of 0.3 refused: %v", def["kind"], i+1, d)
				}
			}
			// The rate is spent: a fourth 0.1 is refused.
			if d := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/budget/limit", a.key, map[string]any{"key": "k", "count": 0.1}), http.StatusOK); d["ok"] != false {
				t.Errorf("%s: a fourth 0.1 of 0.3 admitted: %v", def["kind"], d)
			}
			// A probe of count 0 never refuses unless the value is negative.
			if d := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/budget/limit", a.key, map[string]any{"key": "k", "count": 0}), http.StatusOK); d["ok"] != true {
				t.Errorf("%s: a count-0 probe of the spent key refused: %v", def["kind"], d)
			}
			// A batch of 0.1 and 0.2 on one key of a limit of 0.3 fits at once (it was 400
			// count_exceeds_capacity: 0.1 + 0.2 is 0.30000000000000004).
			b := h.send(t, http.MethodPost, "/v1/limit", a.key, map[string]any{"limits": []any{
				map[string]any{"name": "budget", "key": "b", "count": 0.1}, map[string]any{"name": "budget", "key": "b", "count": 0.2}}})
			if b.status != http.StatusOK || requireJSON(t, b, http.StatusOK)["ok"] != true {
				t.Errorf("%s: a batch of 0.1 and 0.2 on a limit of 0.3: %s", def["kind"], b)
			}
			for _, k := range []string{"k", "b"} {
				if r := h.send(t, http.MethodPost, "/v1/limits/budget/reset", a.key, map[string]any{"key": k}); r.status != http.StatusNoContent {
					t.Fatalf("reset: %s", r)
				}
			}
		}
	})
}
