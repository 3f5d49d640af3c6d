package api_test

import (
	"net/http"
	"testing"
)

// TestRefundOverHTTP: tokens taken come back (never above the limit), ancestors with them; bad
// refunds are problems naming the field.
func TestRefundOverHTTP(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "api", map[string]any{"kind": "fixed window", "rate": 10, "period": 3600000, "start": 0})
		h.define(t, a.key, "team", map[string]any{"kind": "fixed window", "rate": 10, "period": 3600000, "start": 0,
			"parents": []map[string]any{{"name": "api", "key": "org:{org}"}}})
		attrs := map[string]string{"org": "acme"}
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/team/limit", a.key, map[string]any{"key": "t", "count": 6, "attributes": attrs}), http.StatusOK)
		got := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/team/refund", a.key, map[string]any{"key": "t", "count": 4, "attributes": attrs}), http.StatusOK)
		parents, _ := got["parents"].([]any)
		if got["refunded"] != 4.0 || got["remaining"] != 8.0 || got["key"] != "t" || len(parents) != 1 || parents[0].(map[string]any)["remaining"] != 8.0 {
			t.Fatalf("refund: %v", got)
		}
		got = requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/team/refund", a.key, map[string]any{"key": "t", "count": 50, "attributes": attrs}), http.StatusOK)
		if got["refunded"] != 2.0 || got["remaining"] != 10.0 {
			t.Fatalf("refund past the maximum: %v", got)
		}
		for _, bad := range []struct {
			body  map[string]any
			field string
		}{
			{map[string]any{"key": "t"}, "count"},
			{map[string]any{"key": "t", "count": -1}, "count"},
			{map[string]any{"key": "t", "count": 1, "reserve": true}, "reserve"},
			{map[string]any{"key": "", "count": 1}, "key"},
			{map[string]any{"key": "session:0123456789abcdef0123456789abcdef", "count": 1, "attributes": attrs}, "key"},
			{map[string]any{"key": "ip:0123", "count": 1, "attributes": attrs}, "key"},
			{map[string]any{"key": "t", "count": 1}, "attributes.org"},
		} {
			p := requireProblem(t, h.send(t, http.MethodPost, "/v1/limits/team/refund", a.key, bad.body), http.StatusBadRequest, "invalid_request")
			if p["field"] != bad.field {
				t.Errorf("%v: field %v, want %s", bad.body, p["field"], bad.field)
			}
		}
		requireProblem(t, h.send(t, http.MethodPost, "/v1/limits/nope/refund", a.key, map[string]any{"count": 1}), http.StatusNotFound, "limit_not_found")
	})
}
