package api_test

import (
	"net/http"
	"testing"
)

// TestAnExplicitNullIsRefusedWhereTheDocumentDoesNotAllowIt: a member the document types without
// "null" and given as null is a 400 invalid_request naming it, worded as a value of the wrong type
// is ("count must be a number") with ", not null"; not read as an absent member (a refund of
// {"key": null} once refilled the global key, a reset of {"allKeys": null} reset it). The one
// nullable member of a request (an override's expiresAt) still takes null.
func TestAnExplicitNullIsRefusedWhereTheDocumentDoesNotAllowIt(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", frozenWindow)
		h.define(t, a.key, "y", frozenWindow)
		// the global key of x has 7 of 10 left; nothing below may change it
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/x/limit", a.key, map[string]any{"count": 3}), http.StatusOK)

		const def = `"kind":"token bucket","rate":1,"period":1000`
		for _, tc := range []struct {
			method, path, body string
			field              string
			wrongType          string // the same member with a value of the wrong type, whose detail + ", not null" is the null's
			detail             string // the detail, when no wrongType says it
		}{
			{method: "POST", path: "/v1/limits/x/limit", body: `{"key":null}`, field: "key", wrongType: `{"key":1}`},
			{method: "POST", path: "/v1/limits/x/check", body: `{"key":null}`, field: "key", wrongType: `{"key":1}`},
			{method: "POST", path: "/v1/limits/x/limit", body: `{"key":"a","count":null}`, field: "count", wrongType: `{"key":"a","count":"1"}`},
			{method: "POST", path: "/v1/limits/x/limit", body: `{"session":null}`, field: "session", wrongType: `{"session":1}`},
			{method: "POST", path: "/v1/limits/x/limit", body: `{"ip":null}`, field: "ip", wrongType: `{"ip":1}`},
			{method: "POST", path: "/v1/limits/x/limit", body: `{"reserve":null}`, field: "reserve", wrongType: `{"reserve":1}`},
			{method: "POST", path: "/v1/limits/x/limit", body: `{"throws":null}`, field: "throws", wrongType: `{"throws":1}`},
			{method: "POST", path: "/v1/limits/x/limit", body: `{"config":null}`, field: "config", wrongType: `{"config":1}`},
			{method: "POST", path: "/v1/limits/x/limit", body: `{"attributes":null}`, field: "attributes", wrongType: `{"attributes":1}`},
			{method: "POST", path: "/v1/limits/x/limit", body: `{"attributes":{"org":null}}`, field: "attributes.org", detail: "attributes.org must be a string, not null"},
			{method: "POST", path: "/v1/limits/fresh/limit", body: `{"config":{` + def + `,"capacity":null}}`, field: "config.capacity", wrongType: `{"config":{` + def + `,"capacity":"1"}}`},
			{method: "POST", path: "/v1/limits/x/reset", body: `{"allKeys":null}`, field: "allKeys", wrongType: `{"allKeys":1}`},
			{method: "POST", path: "/v1/limits/x/refund", body: `{"key":null,"count":5}`, field: "key", wrongType: `{"key":1,"count":5}`},
			{method: "POST", path: "/v1/limits/x/refund", body: `{"count":null}`, field: "count", wrongType: `{"count":"5"}`},
			{method: "POST", path: "/v1/limit", body: `{"limits":[{"name":"x"},{"name":"y","key":null}]}`, field: "limits[1].key", detail: "limits[1].key must be a string, not null"},
			{method: "POST", path: "/v1/limit", body: `{"limits":null}`, field: "limits", wrongType: `{"limits":1}`},
			{method: "POST", path: "/v1/check", body: `{"limits":[{"name":"x","count":null}],"throws":null}`, field: "limits[0].count", detail: "limits[0].count must be a number, not null"},
			{method: "POST", path: "/v1/decisions", body: `{"decisions":[{"name":"x","count":null},{"name":"y"}]}`, field: "decisions[0].count", detail: "decisions[0].count must be a number, not null"},
			{method: "POST", path: "/v1/decisions", body: `{"decisions":[{"name":null}]}`, field: "decisions[0].name", detail: "decisions[0].name must be a string, not null"},
			{method: "POST", path: "/v1/holds", body: `{"limits":[{"name":"x","key":null,"count":1}],"ttl":1000}`, field: "limits[0].key", detail: "limits[0].key must be a string, not null"},
			{method: "POST", path: "/v1/holds", body: `{"limits":[{"name":"x","count":1}],"ttl":null}`, field: "ttl", wrongType: `{"limits":[{"name":"x","count":1}],"ttl":"1"}`},
			{method: "PUT", path: "/v1/limits/fresh", body: `{` + def + `,"capacity":null}`, field: "capacity", wrongType: `{` + def + `,"capacity":"1"}`},
			{method: "PUT", path: "/v1/limits/fresh", body: `{"kind":null,"rate":1,"period":1000}`, field: "kind", wrongType: `{"kind":1,"rate":1,"period":1000}`},
			{method: "PUT", path: "/v1/limits/fresh", body: `{` + def + `,"parents":[{"name":"x","key":null}]}`, field: "parents[0].key", detail: "parents[0].key must be a string, not null"},
			{method: "PUT", path: "/v1/limits/x/overrides", body: `{"match":"a","rate":null}`, field: "rate", wrongType: `{"match":"a","rate":"1"}`},
			{method: "PUT", path: "/v1/limits/x/overrides", body: `{"match":null}`, field: "match", wrongType: `{"match":1}`},
			{method: "POST", path: "/v1/webhooks", body: `{"url":"https://example.com/hook","events":["key.created"],"refusalThreshold":null}`, field: "refusalThreshold",
				wrongType: `{"url":"https://example.com/hook","events":["key.created"],"refusalThreshold":"1"}`},
			{method: "POST", path: "/v1/sessions/authorize", body: `{"sessionId":null,"payload":"x"}`, field: "sessionId", wrongType: `{"sessionId":1,"payload":"x"}`},
		} {
			want := tc.detail
			if tc.wrongType != "" {
				p := requireProblem(t, h.send(t, tc.method, tc.path, a.key, tc.wrongType), http.StatusBadRequest, "invalid_request")
				if p["field"] != tc.field {
					t.Fatalf("%s %s %s: field %v, want %s", tc.method, tc.path, tc.wrongType, p["field"], tc.field)
				}
				want = p["detail"].(string) + ", not null"
			}
			r := h.send(t, tc.method, tc.path, a.key, tc.body)
			if r.status != http.StatusBadRequest {
				t.Errorf("%s %s %s: %s, want 400 invalid_request naming %s", tc.method, tc.path, tc.body, r, tc.field)
				continue
			}
			p := requireProblem(t, r, http.StatusBadRequest, "invalid_request")
			if p["field"] != tc.field || p["detail"] != want {
				t.Errorf("%s %s %s: field %v, detail %q; want %s, %q", tc.method, tc.path, tc.body, p["field"], p["detail"], tc.field, want)
			}
		}

		v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/x/value", a.key, nil), http.StatusOK)
		if number(t, v, "value") != 7 {
			t.Errorf("the global key of x after the refused nulls: %v, want 7 left (nothing reset, refunded or consumed)", v)
		}

		// expiresAt is nullable: null means what absence does (never expires).
		o := requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/x/overrides", a.key, `{"match":"a","rate":5,"expiresAt":null}`), http.StatusOK)
		if o["expiresAt"] != nil {
			t.Errorf("an override with expiresAt null: %v, want one that never expires", o)
		}
	})
}
