package api_test

import (
	"net/http"
	"testing"
)

// TestRenderedNumbersStayWithinTheirBounds: the 9-decimal rounding of token counts
// (math.Round(v*1e9)/1e9) moves a value that already has at most 9 decimals up by an ulp:
// 4377141.871 renders as 4377141.871000001, so a full key's value, a probe's remaining, and a
// refund's refunded exceed the maximum and the count refunded.
func TestRenderedNumbersStayWithinTheirBounds(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		const max = 4377141.871
		h.define(t, a.key, "x", map[string]any{"kind": "fixed window", "rate": max, "period": 86400000})
		v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/x/value?key=k", a.key, nil), http.StatusOK)
		if got := number(t, v, "value"); got > max {
			t.Errorf("value %v of a full key exceeds the maximum %v", got, max)
		}
		d := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/x/limit", a.key, map[string]any{"key": "k", "count": 0}), http.StatusOK)
		if got := number(t, d, "remaining"); got > max {
			t.Errorf("remaining %v of a full key exceeds the maximum %v", got, max)
		}
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/x/limit", a.key, map[string]any{"key": "k", "count": max}), http.StatusOK)
		r := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/x/refund", a.key, map[string]any{"key": "k", "count": max}), http.StatusOK)
		if got := number(t, r, "refunded"); got > max {
			t.Errorf("refunded %v exceeds the count refunded %v", got, max)
		}
	})
}

// TestASlidingWindowRefundedInFullIsFull: 0.1 and 0.2 taken and both refunded leave 2.8e-17
// in the sub-interval's counter; the value reads 1 (the maximum) but fullAt was a minute away.
func TestASlidingWindowRefundedInFullIsFull(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", map[string]any{"kind": "sliding window", "rate": 1, "period": 60000, "resolution": 60})
		for _, c := range []float64{0.1, 0.2} {
			requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/x/limit", a.key, map[string]any{"key": "k", "count": c}), http.StatusOK)
		}
		for _, c := range []float64{0.2, 0.1} {
			requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/x/refund", a.key, map[string]any{"key": "k", "count": c}), http.StatusOK)
		}
		v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/x/value?key=k", a.key, nil), http.StatusOK)
		if number(t, v, "value") == 1 && v["fullAt"] != nil {
			t.Fatalf("value 1 of 1, but fullAt %v", v["fullAt"])
		}
	})
}
