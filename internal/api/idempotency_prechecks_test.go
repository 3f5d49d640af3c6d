package api_test

import (
	"context"
	"testing"

	"github.com/sluice-dev/sluice/internal/tenants"
)

// README, Idempotent decisions: "a retry with the same key and the same request ... within 24
// hours gets that answer again with Idempotent-Replayed: true and consumes nothing". A retry whose
// answer is stored must be replayed whatever changed since; the engine does so (even for a limit
// deleted meanwhile), but the API refuses the retry before the engine sees it when the plan's
// burst was lowered or the request's anonymous session lost its authorization.
func TestARetryIsReplayedAfterThePlansBurstShrank(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", bucket10PerMinute)
		setPlan(t, h, a.id, tenants.PlanSettings{DecisionsPerSecond: ptr(100.0)})
		body := `{"limits":[{"name":"x","key":"a"},{"name":"x","key":"b"},{"name":"x","key":"c"}]}`
		first := sendIdem(t, h.url, "/v1/limit", a.key, body, "retry-1")
		requireJSON(t, first, 200)
		setPlan(t, h, a.id, tenants.PlanSettings{DecisionsPerSecond: ptr(2.0)}) // burst 2 < 3 items
		again := sendIdem(t, h.url, "/v1/limit", a.key, body, "retry-1")
		requireReplay(t, first, again) // was: 429 tenant_quota_exceeded, not replayed
		// A request with another key is new, and the smaller plan refuses it.
		other := sendIdem(t, h.url, "/v1/limit", a.key, body, "retry-2")
		requireProblem(t, other, 400, "count_exceeds_capacity")
	})
}

func TestARetryIsReplayedAfterItsSessionWasRevoked(t *testing.T) {
	t.Parallel()
	eachSessionDB(t, nil, func(t *testing.T, h *sessionHarness) {
		tn := h.newCaptchaTenant(t, "acme")
		h.define(t, tn.key, "x", bucket10PerMinute)
		sid := h.authorized(t, tn)
		body := `{"session":"` + sid + `"}`
		first := sendIdem(t, h.url, "/v1/limits/x/limit", tn.key, body, "retry-1")
		requireJSON(t, first, 200)
		if err := h.store.Revoke(context.Background(), tn.id, sid); err != nil {
			t.Fatal(err)
		}
		again := sendIdem(t, h.url, "/v1/limits/x/limit", tn.key, body, "retry-1")
		requireReplay(t, first, again) // was: 403 session_not_authorized, not replayed
		other := sendIdem(t, h.url, "/v1/limits/x/limit", tn.key, body, "retry-2")
		requireProblem(t, other, 403, "session_not_authorized")
	})
}

// The bulk variant: the retry says Idempotent-Replayed: true, yet item 0, decided and stored by
// the first attempt, is answered 403 session_not_authorized instead of its stored decision.
func TestABulkRetryMarkedReplayedAnswersWhatWasStored(t *testing.T) {
	t.Parallel()
	eachSessionDB(t, nil, func(t *testing.T, h *sessionHarness) {
		tn := h.newCaptchaTenant(t, "acme")
		h.define(t, tn.key, "x", bucket10PerMinute)
		sid := h.authorized(t, tn)
		body := `{"decisions":[{"name":"x","session":"` + sid + `"},{"name":"x","key":"k"}]}`
		first := sendIdem(t, h.url, "/v1/decisions", tn.key, body, "bulk-1")
		requireJSON(t, first, 200)
		if err := h.store.Revoke(context.Background(), tn.id, sid); err != nil {
			t.Fatal(err)
		}
		again := sendIdem(t, h.url, "/v1/decisions", tn.key, body, "bulk-1")
		requireReplay(t, first, again) // was: Idempotent-Replayed: true with results[0] a 403 problem
	})
}

// The hold variant: the retry is refused, so the client never learns the holdId of the hold its
// first attempt made, which keeps its amounts reserved until its ttl (up to 24 h).
func TestAHoldsRetryIsReplayedAfterThePlansBurstShrank(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", bucket10PerMinute)
		h.define(t, a.key, "y", bucket10PerMinute)
		setPlan(t, h, a.id, tenants.PlanSettings{DecisionsPerSecond: ptr(100.0)})
		body := `{"limits":[{"name":"x","key":"a","count":1},{"name":"y","key":"a","count":1}],"ttl":60000}`
		first := sendIdem(t, h.url, "/v1/holds", a.key, body, "hold-1")
		requireJSON(t, first, 201)
		setPlan(t, h, a.id, tenants.PlanSettings{DecisionsPerSecond: ptr(1.0)}) // burst 1 < 2 limits
		again := sendIdem(t, h.url, "/v1/holds", a.key, body, "hold-1")
		requireReplay(t, first, again)
	})
}
