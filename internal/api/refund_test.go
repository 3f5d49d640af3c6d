package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
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

// TestARefundRetriedUnderItsIdempotencyKeyGivesBackOnce: a refund retried with the same
// Idempotency-Key (its answer lost) replays the first answer and gives nothing back again, so a
// retry cannot admit more than was used; another key is another refund, and the same key on
// another request is 422.
func TestARefundRetriedUnderItsIdempotencyKeyGivesBackOnce(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "api", map[string]any{"kind": "fixed window", "rate": 10, "period": 3600000, "start": 0})
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/api/limit", a.key, map[string]any{"key": "t", "count": 8}), http.StatusOK)

		first := sendIdem(t, h.url, "/v1/limits/api/refund", a.key, `{"key":"t","count":3}`, "r1")
		if first.status != http.StatusOK || !strings.Contains(string(first.body), `"refunded":3`) || !strings.Contains(string(first.body), `"remaining":5`) {
			t.Fatalf("the refund: %s", first)
		}
		requireReplay(t, first, sendIdem(t, h.url, "/v1/limits/api/refund", a.key, `{"key":"t","count":3}`, "r1"))
		v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/api/value?key=t", a.key, nil), http.StatusOK)
		if v["value"] != 5.0 {
			t.Fatalf("after a refund of 3 and its retry, the key holds %v, want 5 (given back once)", v["value"])
		}
		again := sendIdem(t, h.url, "/v1/limits/api/refund", a.key, `{"key":"t","count":3}`, "r2")
		if again.status != http.StatusOK || again.header.Get(api.IdempotentReplayedHeader) != "" || !strings.Contains(string(again.body), `"remaining":8`) {
			t.Fatalf("a refund under another key: %s, want 200 giving back 3 more", again)
		}
		requireProblem(t, sendIdem(t, h.url, "/v1/limits/api/refund", a.key, `{"key":"t","count":1}`, "r1"), http.StatusUnprocessableEntity, "idempotency_key_reused")
		requireProblem(t, sendIdem(t, h.url, "/v1/limits/api/refund", a.key, `{"key":"t","count":1}`, "r3", "r4"), http.StatusBadRequest, "invalid_request")
	})
}

// TestConcurrentIdempotentRefundsThroughTwoInstancesGiveBackOnce: 32 copies of one refund under
// one Idempotency-Key at once, through two instances on one PostgreSQL, give the tokens back
// once: one is answered as decided, the others replay its answer.
func TestConcurrentIdempotentRefundsThroughTwoInstancesGiveBackOnce(t *testing.T) {
	t.Parallel()
	url := testkit.URL(t, db.Postgres)
	first, second := newHarness(t, url), newHarness(t, url)
	a := first.newTenant(t, "acme")
	defineFixed(t, first, a.key, "once", 100)
	requireJSON(t, first.send(t, http.MethodPost, "/v1/limits/once/limit", a.key, map[string]any{"key": "hot", "count": 50}), http.StatusOK)
	const n = 32
	out := sendAtOnce(t, []*harness{first, second}, n, "/v1/limits/once/refund", a.key, `{"key":"hot","count":10}`, "refund-once")
	fresh := 0
	for i, r := range out {
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"refunded":10`) || !strings.Contains(string(r.body), `"remaining":60`) {
			t.Fatalf("refund %d: %s, want the first refund's answer (10 back, 60 left)", i, r)
		}
		if r.header.Get(api.IdempotentReplayedHeader) == "" {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d of %d concurrent refunds under one key were answered as decided, want 1", fresh, n)
	}
	if v := valueOf(t, first, a.key, "/v1/limits/once/value?key=hot"); v != 60 {
		t.Fatalf("after %d concurrent refunds of 10 under one key: %v left, want 60 (given back once)", n, v)
	}
}
