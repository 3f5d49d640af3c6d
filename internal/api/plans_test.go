package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
	"github.com/sluice-dev/sluice/internal/webhooks"
)

func setPlan(t *testing.T, h *harness, tenantID int64, p tenants.PlanSettings) {
	t.Helper()
	if err := h.tenants.SetPlan(context.Background(), tenantID, p, "test"); err != nil {
		t.Fatalf("set plan: %v", err)
	}
}

// TestNoisyTenantGets429WhileAnotherIsUnaffected: a tenant over its plan's decision rate gets 429
// tenant_quota_exceeded with Retry-After on every decision route (single, batch, check, bulk
// item), whatever throws says, and none of its own limits is consumed by a refused decision;
// another tenant on the same instance decides on, unaffected. Setting the plan back applies at
// once. The plan is one decision per 1,000 s, so no refill can happen while the test runs.
// TestABadCountIsA400WhateverThePlan: a count no limit takes is refused (400, naming the item)
// before the plan's rate is spent or read: a tenant past its plan's burst learns what is wrong
// with its request, not that it should wait.
func TestABadCountIsA400WhateverThePlan(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", bucket10PerMinute)
		setPlan(t, h, a.id, tenants.PlanSettings{DecisionsPerSecond: ptr(1.0)}) // a burst of 1
		body := map[string]any{"limits": []map[string]any{{"name": "x", "key": "a", "count": -1}, {"name": "x", "key": "b"}}}
		p := requireProblem(t, h.send(t, http.MethodPost, "/v1/limit", a.key, body), http.StatusBadRequest, "invalid_request")
		if p["field"] != "limits[0].count" || !strings.Contains(p["detail"].(string), "must be a number >= 0 and <= 1e+15") {
			t.Fatalf("a negative count in a batch past the plan's burst: %v", p)
		}
	})
}

func TestNoisyTenantGets429WhileAnotherIsUnaffected(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		noisy, quiet := h.newTenant(t, "noisy"), h.newTenant(t, "quiet")
		for _, k := range []string{noisy.key, quiet.key} {
			// A window of ten years that began at the epoch: nothing refills while the test runs.
			h.define(t, k, "api", map[string]any{"kind": "fixed window", "rate": 1000, "period": 315360000000, "start": 0})
		}
		setPlan(t, h, noisy.id, tenants.PlanSettings{DecisionsPerSecond: ptr(0.001)})

		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/api/limit", noisy.key, map[string]any{"key": "u"}), http.StatusOK)
		for _, c := range []struct {
			path string
			body any
		}{
			{"/v1/limits/api/limit", map[string]any{"key": "u"}},
			{"/v1/limits/api/limit", map[string]any{"key": "u", "throws": true}},
			{"/v1/limits/api/check", map[string]any{"key": "u"}},
			{"/v1/limit", map[string]any{"limits": []map[string]any{{"name": "api", "key": "u"}}}},
			{"/v1/check", map[string]any{"limits": []map[string]any{{"name": "api", "key": "u"}}}},
		} {
			r := h.send(t, http.MethodPost, c.path, noisy.key, c.body)
			p := requireProblem(t, r, http.StatusTooManyRequests, "tenant_quota_exceeded")
			if s, _ := strconv.Atoi(r.header.Get("Retry-After")); s < 990 || s > 1000 {
				t.Fatalf("%s: Retry-After %q, want about 1000 s (one decision per 1000 s)", c.path, r.header.Get("Retry-After"))
			}
			if !strings.Contains(p["detail"].(string), "0.001 per second") {
				t.Fatalf("%s: problem %v should name the plan's rate", c.path, p)
			}
		}
		bulk := requireJSON(t, h.send(t, http.MethodPost, "/v1/decisions", noisy.key,
			map[string]any{"decisions": []map[string]any{{"name": "api", "key": "a"}, {"name": "api", "key": "b"}}}), http.StatusOK)
		for i, r := range bulk["results"].([]any) {
			if e, _ := r.(map[string]any)["error"].(map[string]any); e == nil || e["code"] != "tenant_quota_exceeded" {
				t.Fatalf("bulk item %d: %v, want the problem tenant_quota_exceeded", i, r)
			}
		}
		// Only the one admitted decision consumed the noisy tenant's limit.
		for key, want := range map[string]float64{"u": 999, "a": 1000, "b": 1000} {
			v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/api/value?key="+key, noisy.key, nil), http.StatusOK)
			if number(t, v, "value") != want {
				t.Fatalf("the noisy tenant's limit for %s = %v, want %v: a refused decision consumed it", key, v["value"], want)
			}
		}
		// The quiet tenant, same instance, same limit name and key: 50 decisions, all admitted.
		for i := range 50 {
			d := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/api/limit", quiet.key, map[string]any{"key": "u"}), http.StatusOK)
			if d["ok"] != true {
				t.Fatalf("the quiet tenant's decision %d: %v", i, d)
			}
		}
		// A batch larger than the plan's burst can never pass: said at once, as a request to change
		// (400, no Retry-After that would have it retried for ever), on every route that takes one.
		setPlan(t, h, noisy.id, tenants.PlanSettings{DecisionsPerSecond: ptr(2.0)})
		three := []map[string]any{{"name": "api", "key": "x"}, {"name": "api", "key": "y"}, {"name": "api", "key": "z"}}
		for _, path := range []string{"/v1/limit", "/v1/check", "/v1/holds"} {
			body := map[string]any{"limits": three}
			if path == "/v1/holds" {
				body["ttl"] = 60000
			}
			res := h.send(t, http.MethodPost, path, noisy.key, body)
			if ra := res.header.Get("Retry-After"); ra != "" {
				t.Fatalf("POST %s of a batch no wait admits: Retry-After %q, want none", path, ra)
			}
			p := requireProblem(t, res, http.StatusBadRequest, "count_exceeds_capacity")
			if p["field"] != "limits" || !strings.Contains(p["detail"].(string), "3 decisions in one request") {
				t.Fatalf("POST %s of a batch larger than the plan's burst: %v", path, p)
			}
		}
		// Back to the default plan: admitted again at once.
		setPlan(t, h, noisy.id, tenants.PlanSettings{})
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limit", noisy.key, map[string]any{"limits": three}), http.StatusOK)
	})
}

// TestPlanCountQuotasAre409OverHTTP: creating a limit or an override past the plan is 409
// plan_quota_reached naming the quota; replacing one is not a creation; deleting frees a place.
func TestPlanCountQuotasAre409OverHTTP(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		setPlan(t, h, a.id, tenants.PlanSettings{MaxLimits: ptr(int64(2)), MaxOverrides: ptr(int64(1))})
		tb := map[string]any{"kind": "token bucket", "rate": 10, "period": 1000}
		h.define(t, a.key, "one", tb)
		h.define(t, a.key, "two", tb)
		p := requireProblem(t, h.send(t, http.MethodPut, "/v1/limits/three", a.key, tb), http.StatusConflict, "plan_quota_reached")
		if !strings.Contains(p["detail"].(string), "at most 2 limits") {
			t.Fatalf("problem %v should name the quota", p)
		}
		h.define(t, a.key, "two", map[string]any{"kind": "token bucket", "rate": 20, "period": 1000}) // a replacement
		if r := h.send(t, http.MethodDelete, "/v1/limits/one", a.key, nil); r.status != http.StatusNoContent {
			t.Fatalf("delete: %v", r)
		}
		h.define(t, a.key, "three", tb)

		requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/two/overrides", a.key, map[string]any{"match": "vip", "rate": 50}), http.StatusOK)
		requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/two/overrides", a.key, map[string]any{"match": "vip", "rate": 60}), http.StatusOK)
		p = requireProblem(t, h.send(t, http.MethodPut, "/v1/limits/three/overrides", a.key, map[string]any{"match": "vip", "rate": 50}), http.StatusConflict, "plan_quota_reached")
		if !strings.Contains(p["detail"].(string), "at most 1 override;") {
			t.Fatalf("problem %v should name the quota", p)
		}
		// Keys have no API route; the quota holds for every way of creating one.
		setPlan(t, h, a.id, tenants.PlanSettings{MaxKeys: ptr(int64(1))}) // the tenant holds one already
		_, _, err := h.tenants.CreateKey(context.Background(), a.id, tenants.KindSecret, "second", "test")
		if !strings.Contains(err.Error(), "at most 1 API key; revoke one") {
			t.Fatalf("a key past the plan: %v", err)
		}
		entries, err := h.tenants.AuditLog(context.Background(), a.id, 50)
		if err != nil {
			t.Fatal(err)
		}
		var plans int
		for _, e := range entries {
			if e.Action == "plan.update" {
				plans++
			}
		}
		if plans != 2 {
			t.Fatalf("audited %d plan changes, want 2: %+v", plans, entries)
		}
	})
}

// TestTenantNearItsPlanQuotaReachesItsWebhook: the creation that first brings a tenant's limits
// to 80 % of its plan queues tenant.quota_near in its transaction; a decision that leaves less
// than 20 % of the plan's burst queues it for the decision rate (once an hour, not on every
// decision). A real receiver on loopback gets each once, with the quota, the count and the max;
// later creations and decisions send no more.
func TestTenantNearItsPlanQuotaReachesItsWebhook(t *testing.T) {
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		cfg := apptest.Config(url)
		cfg.WebhookAllowPrivate = true // the receiver is on loopback
		a := apptest.Start(t, cfg, app.Options{})
		h := &harness{app: a, db: a.DB, tenants: a.Tenants, engine: a.Engine, router: a.Router, url: a.BaseURL()}
		ctx := context.Background()
		var mu sync.Mutex
		var got []string
		rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var p struct {
				Type string                 `json:"type"`
				Data tenants.QuotaNearEvent `json:"data"`
			}
			b, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(b, &p)
			mu.Lock()
			got = append(got, p.Type+" "+p.Data.Quota+" "+strconv.FormatInt(p.Data.Used, 10)+"/"+strconv.FormatInt(p.Data.Max, 10))
			mu.Unlock()
		}))
		defer rcv.Close()
		acme := h.newTenant(t, "acme")
		if _, _, err := a.Webhooks.CreateEndpoint(ctx, acme.id, rcv.URL, []string{webhooks.EventTenantQuotaNear}); err != nil {
			t.Fatal(err)
		}
		setPlan(t, h, acme.id, tenants.PlanSettings{MaxLimits: ptr(int64(5))})
		for _, name := range []string{"l1", "l2", "l3", "l4", "l5"} {
			h.define(t, acme.key, name, map[string]any{"kind": "token bucket", "rate": 10, "period": 1000})
		}
		// A plan of one decision per 1,000 s (a burst of one): the first decision leaves nothing.
		setPlan(t, h, acme.id, tenants.PlanSettings{MaxLimits: ptr(int64(5)), DecisionsPerSecond: ptr(0.001)})
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/l1/limit", acme.key, map[string]any{"key": "u"}), http.StatusOK)
		requireProblem(t, h.send(t, http.MethodPost, "/v1/limits/l1/limit", acme.key, map[string]any{"key": "u"}), http.StatusTooManyRequests, "tenant_quota_exceeded")
		setPlan(t, h, acme.id, tenants.PlanSettings{MaxLimits: ptr(int64(5)), DecisionsPerSecond: ptr(100_000.0)})             // refills within the millisecond
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/l1/limit", acme.key, map[string]any{"key": "u"}), http.StatusOK) // near again, within the hour
		if _, err := a.Webhooks.DeliverDue(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		slices.Sort(got)
		if want := []string{"tenant.quota_near decisions 1/1", "tenant.quota_near limits 4/5"}; !slices.Equal(got, want) {
			t.Fatalf("receiver got %q, want %q", got, want)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// TestHoldsSpendThePlansDecisions: a hold spends one decision of the tenant's plan per limit it
// holds, all or nothing with the hold: a plan refusal is 429 tenant_quota_exceeded (a hold of more
// limits than the plan admits at once, 400 count_exceeds_capacity) and holds
// nothing, a hold refused by the tenant's own limit spends nothing of the plan, an admitted
// hold's results do not show the plan, and a hold retried under its Idempotency-Key replays
// without spending again. Another tenant holds on, unaffected. The plan is one decision per
// 1,000 s (a burst of one), so nothing refills while the test runs.
func TestHoldsSpendThePlansDecisions(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		noisy, quiet := h.newTenant(t, "noisy"), h.newTenant(t, "quiet")
		for _, k := range []string{noisy.key, quiet.key} {
			h.define(t, k, "tokens", map[string]any{"kind": "fixed window", "rate": 100, "period": 315360000000, "start": 0})
			h.define(t, k, "calls", map[string]any{"kind": "fixed window", "rate": 1, "period": 315360000000, "start": 0})
		}
		post := func(k, body, idemKey string) response {
			return sendIdemMethod(t, http.MethodPost, h.url, "/v1/holds", k, body, idemKey)
		}
		// Before the plan: the calls limit of x is used up by a hold.
		callX := `{"limits":[{"name":"calls","key":"x","count":1}],"ttl":60000}`
		if r := post(noisy.key, callX, "before-plan"); r.status != http.StatusCreated {
			t.Fatalf("hold before the plan: %s", r)
		}
		setPlan(t, h, noisy.id, tenants.PlanSettings{DecisionsPerSecond: ptr(0.001)})

		two := `{"limits":[{"name":"tokens","key":"a","count":1},{"name":"tokens","key":"b","count":1}],"ttl":60000}`
		p := requireProblem(t, post(noisy.key, two, "two"), http.StatusBadRequest, "count_exceeds_capacity")
		if !strings.Contains(p["detail"].(string), "2 decisions in one request") {
			t.Fatalf("a hold of more limits than the plan's burst: %v", p)
		}
		// Refused by the tenant's own limit: the plan's one decision is not spent.
		requireProblem(t, post(noisy.key, callX, "refused"), http.StatusTooManyRequests, "rate_limited")

		hold := `{"limits":[{"name":"tokens","key":"u","count":5}],"ttl":60000}`
		first := post(noisy.key, hold, "h1")
		if first.status != http.StatusCreated {
			t.Fatalf("the plan's one decision should admit this hold: %s", first)
		}
		var held struct {
			HoldID  string
			Results []struct{ Name string }
		}
		if err := json.Unmarshal(first.body, &held); err != nil || held.HoldID == "" {
			t.Fatalf("hold body %s: %v", first.body, err)
		}
		if len(held.Results) != 1 || held.Results[0].Name != "tokens" {
			t.Fatalf("the hold's results %+v should be the tenant's one limit, without the plan", held.Results)
		}
		requireReplay(t, first, post(noisy.key, hold, "h1")) // spends nothing: the plan has no decision left

		r := post(noisy.key, hold, "h2")
		p = requireProblem(t, r, http.StatusTooManyRequests, "tenant_quota_exceeded")
		if s, _ := strconv.Atoi(r.header.Get("Retry-After")); s < 990 || s > 1000 {
			t.Fatalf("Retry-After %q, want about 1000 s (one decision per 1000 s)", r.header.Get("Retry-After"))
		}
		if !strings.Contains(p["detail"].(string), "0.001 per second") {
			t.Fatalf("problem %v should name the plan's rate", p)
		}
		if v := valueOf(t, h, noisy.key, "/v1/limits/tokens/value?key=u"); v != 95 {
			t.Fatalf("tokens of u = %v, want 95: held once (the replay and the plan's refusal hold nothing)", v)
		}
		// The plan's refusal is stored under its key like any answer: a retry replays it.
		requireReplay(t, r, post(noisy.key, hold, "h2"))

		// The quiet tenant, same instance and names: holds of two limits, admitted.
		for i := range 5 {
			if r := post(quiet.key, two, "q"+strconv.Itoa(i)); r.status != http.StatusCreated {
				t.Fatalf("the quiet tenant's hold %d: %s", i, r)
			}
		}
		// Back to the default plan: holds of two limits admitted again at once.
		setPlan(t, h, noisy.id, tenants.PlanSettings{})
		if r := post(noisy.key, two, "after"); r.status != http.StatusCreated {
			t.Fatalf("a hold after the plan went back to the default: %s", r)
		}
	})
}

// TestBulkDecisionsNearThePlanAreAudited: a bulk request whose items leave less than a fifth of
// the plan's burst records plan.quota_near (and queues its event), with an Idempotency-Key as
// without one; a replay of the same request records nothing more.
func TestBulkDecisionsNearThePlanAreAudited(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		for i, idem := range [][]string{nil, {"bulk-1"}} {
			acme := h.newTenant(t, fmt.Sprintf("acme%d", i))
			near := func() int64 {
				var n int64
				if err := h.db.Gorm.Raw("SELECT count(*) FROM audit_log WHERE tenant_id = ? AND action = 'plan.quota_near'", acme.id).Scan(&n).Error; err != nil {
					t.Fatal(err)
				}
				return n
			}
			h.define(t, acme.key, "l1", map[string]any{"kind": "token bucket", "rate": 10, "period": 1000})
			setPlan(t, h, acme.id, tenants.PlanSettings{DecisionsPerSecond: ptr(0.001)}) // a burst of one
			before := near()
			body := `{"decisions":[{"name":"l1","key":"u"}]}`
			for range 2 { // the second is a replay with the key, a plan refusal without
				if r := sendIdem(t, h.url, "/v1/decisions", acme.key, body, idem...); r.status != http.StatusOK {
					t.Fatalf("bulk: %d %s", r.status, r.body)
				}
			}
			if got := near() - before; got != 1 {
				t.Errorf("Idempotency-Key %v: %d plan.quota_near entries, want 1", idem, got)
			}
		}
	})
}

// TestAPlanRefusalWaitsForTheTenantsOwnRefusalsToo: a request the plan refuses beside one of the
// tenant's own limits that refuses too, for longer, says the longer wait (retrying when the plan
// admits again is refused again) and, where an answer has headers, carries the tenant's limits'
// RateLimit headers as any refusal does: a single limit, a check, a batch, a hold, a bulk item,
// and a bulk item under an Idempotency-Key. The engine's clock stands still: nothing refills.
func TestAPlanRefusalWaitsForTheTenantsOwnRefusalsToo(t *testing.T) {
	eachDBWithEngineClock(t, func(t *testing.T, h *harness, _ *engineClock) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "tiny", map[string]any{"kind": "token bucket", "rate": 1, "period": 600_000})
		h.define(t, a.key, "x", bucket10PerMinute)
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/tiny/limit", a.key, map[string]any{"key": "k"}), http.StatusOK)
		setPlan(t, h, a.id, tenants.PlanSettings{DecisionsPerSecond: ptr(2.0)}) // a burst of 2
		for range 2 {                                                           // the plan's burst, spent
			requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/x/limit", a.key, map[string]any{"key": "spend"}), http.StatusOK)
		}
		batch := map[string]any{"limits": []map[string]any{{"name": "tiny", "key": "k"}, {"name": "x", "key": "z"}}}
		for _, c := range []struct {
			path string
			body any
		}{
			{"/v1/limits/tiny/limit", map[string]any{"key": "k"}},
			{"/v1/limits/tiny/check", map[string]any{"key": "k"}},
			{"/v1/limit", batch},
			{"/v1/check", batch},
			{"/v1/holds", map[string]any{"limits": []map[string]any{{"name": "tiny", "key": "k"}}, "ttl": 60_000}},
		} {
			r := h.send(t, http.MethodPost, c.path, a.key, c.body)
			requireProblem(t, r, http.StatusTooManyRequests, "tenant_quota_exceeded")
			if s, _ := strconv.Atoi(r.header.Get("Retry-After")); s < 599 {
				t.Errorf("%s refused by the plan beside tiny (empty for 600 s): Retry-After %q, want tiny's wait", c.path, r.header.Get("Retry-After"))
			}
			if !strings.Contains(r.header.Get("RateLimit"), `"tiny"`) {
				t.Errorf("%s refused by the plan: RateLimit %q, want the tenant's limits' headers", c.path, r.header.Get("RateLimit"))
			}
		}
		bulk := `{"decisions": [{"name": "tiny", "key": "k"}]}`
		for _, idem := range [][]string{nil, {"bulk-1"}} {
			r := sendIdem(t, h.url, "/v1/decisions", a.key, bulk, idem...)
			item := requireJSON(t, r, http.StatusOK)["results"].([]any)[0].(map[string]any)["error"].(map[string]any)
			if item["code"] != "tenant_quota_exceeded" || item["retryAfter"].(float64) < 599_000 {
				t.Errorf("a bulk item refused by the plan beside tiny (Idempotency-Key %q): %v, want tiny's wait", idem, item)
			}
		}
	})
}
