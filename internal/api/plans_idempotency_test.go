package api_test

import (
	"net/http"
	"testing"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// TestThePlansRefusalsUnderAnIdempotencyKey: the plan refusing a decision is a decision, stored
// under its key and replayed, even once the plan is lifted; a batch larger than the plan admits at
// once is refused before any decision, stores nothing, and its retry is decided afresh (as the
// document's Idempotency-Key parameter and README say).
func TestThePlansRefusalsUnderAnIdempotencyKey(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", bucket10PerMinute)
		setPlan(t, h, a.id, tenants.PlanSettings{DecisionsPerSecond: ptr(0.001)}) // a burst of 1

		if r := sendIdem(t, h.url, "/v1/limits/x/limit", a.key, `{"key":"u"}`, "k0"); r.status != http.StatusOK {
			t.Fatalf("the plan's one decision: %s", r)
		}
		refused := sendIdem(t, h.url, "/v1/limits/x/limit", a.key, `{"key":"u"}`, "k1")
		if refused.status != http.StatusTooManyRequests {
			t.Fatalf("the decision after the plan's burst: %s, want 429", refused)
		}
		batch := `{"limits":[{"name":"x","key":"v"},{"name":"x","key":"w"}]}`
		tooLarge := sendIdem(t, h.url, "/v1/limit", a.key, batch, "k2")
		if tooLarge.status != http.StatusBadRequest {
			t.Fatalf("a batch of two under a burst of one: %s, want 400", tooLarge)
		}

		setPlan(t, h, a.id, tenants.PlanSettings{})
		requireReplay(t, refused, sendIdem(t, h.url, "/v1/limits/x/limit", a.key, `{"key":"u"}`, "k1"))
		again := sendIdem(t, h.url, "/v1/limit", a.key, batch, "k2")
		if again.status != http.StatusOK || again.header.Get(api.IdempotentReplayedHeader) != "" {
			t.Fatalf("the batch's retry once the plan is lifted: %s, want 200 decided afresh", again)
		}
	})
}
