package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/api"
)

// A fixed window of ten years aligned to the epoch: nothing refills during a test, and its
// numbers (the window's start, fullAt) are known in advance.
func decade(rate float64, extra map[string]any) map[string]any {
	def := map[string]any{"kind": "fixed window", "rate": rate, "period": 315_360_000_000, "start": 0}
	for k, v := range extra {
		def[k] = v
	}
	return def
}

func TestShadowModeOverHTTP(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		created := requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/sh", a.key, decade(1, map[string]any{"mode": "shadow"})), http.StatusOK)
		if created["mode"] != "shadow" || number(t, created, "penalty") != 0 {
			t.Fatalf("created = %v", created)
		}
		enf := requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/enf", a.key, decade(10, nil)), http.StatusOK)
		if enf["mode"] != "enforce" {
			t.Fatalf("the default mode is enforce: %v", enf)
		}

		first := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/sh/limit", a.key, map[string]any{"key": "k", "throws": true}), http.StatusOK)
		if sh, _ := first["shadow"].(map[string]any); first["ok"] != true || sh == nil || sh["ok"] != true || sh["retryAfter"] != nil {
			t.Fatalf("first decision = %v", first)
		}
		// The would-be refusal: 200 with ok true even with throws, what enforcement would have
		// said in "shadow", and no RateLimit headers (a shadow limit constrains nobody yet).
		r := h.send(t, http.MethodPost, "/v1/limits/sh/limit", a.key, map[string]any{"key": "k", "throws": true})
		second := requireJSON(t, r, http.StatusOK)
		sh, _ := second["shadow"].(map[string]any)
		if second["ok"] != true || second["retryAfter"] != nil || sh == nil || sh["ok"] != false || number(t, sh, "retryAfter") < 1 {
			t.Fatalf("would-be refusal = %v", second)
		}
		if r.header.Get("RateLimit") != "" || r.header.Get("RateLimit-Policy") != "" {
			t.Fatalf("a shadow decision carried RateLimit headers: %v", r.header)
		}

		// In a batch the shadow limit refuses nothing; the headers name the enforced limit only.
		r = h.send(t, http.MethodPost, "/v1/limit", a.key, map[string]any{"throws": true, "limits": []any{
			map[string]any{"name": "enf", "key": "k"}, map[string]any{"name": "sh", "key": "k"}}})
		b := requireJSON(t, r, http.StatusOK)
		results, _ := b["results"].([]any)
		if b["ok"] != true || b["retryAfter"] != nil || len(results) != 2 {
			t.Fatalf("batch = %v", b)
		}
		if res := results[1].(map[string]any); res["ok"] != true || res["shadow"].(map[string]any)["ok"] != false {
			t.Fatalf("shadow result in the batch = %v", res)
		}
		if _, has := results[0].(map[string]any)["shadow"]; has {
			t.Fatalf("an enforced result carries shadow: %v", results[0])
		}
		if got := r.header.Get("RateLimit-Policy"); got != `"enf";q=10;w=315360000` {
			t.Fatalf("RateLimit-Policy = %q, want the enforced limit alone", got)
		}

		// Would-be refusals are counted: metrics and the usage charts.
		if got := decisionsCounted(t, h, "sh", "shadow_refused"); got != 2 {
			t.Fatalf("sluice_decisions_total{result=shadow_refused} = %v, want 2", got)
		}
		points, err := h.app.Usage.Series(context.Background(), a.id, "sh", time.Hour, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var allowed, shadow int64
		for _, p := range points {
			allowed, shadow = allowed+p.Allowed, shadow+p.ShadowRefused
		}
		if allowed != 1 || shadow != 2 {
			t.Fatalf("usage: %d allowed, %d shadow-refused, want 1 and 2", allowed, shadow)
		}

		// Switching to enforce keeps the state: the key is refused now, 429 with throws.
		replaced := requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/sh", a.key, decade(1, map[string]any{"mode": "enforce"})), http.StatusOK)
		if replaced["mode"] != "enforce" {
			t.Fatalf("replaced = %v", replaced)
		}
		requireProblem(t, h.send(t, http.MethodPost, "/v1/limits/sh/limit", a.key, map[string]any{"key": "k", "throws": true}),
			http.StatusTooManyRequests, api.CodeRateLimited)

		// fullAt: the fixed window is full again at the start of the next window (ts + period).
		v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/sh/value?key=k", a.key, nil), http.StatusOK)
		if number(t, v, "fullAt") != number(t, v, "ts")+315_360_000_000 {
			t.Fatalf("fullAt = %v, want ts + period: %v", v["fullAt"], v)
		}
		if _, has := v["penaltyUntil"]; has {
			t.Fatalf("penaltyUntil without a penalty: %v", v)
		}
		full := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/sh/value?key=unused", a.key, nil), http.StatusOK)
		if got, has := full["fullAt"]; !has || got != nil {
			t.Fatalf("a full key's fullAt must be null: %v", full)
		}
		audited(t, h, a.id, "limit.create", "sh", "fixed window rate=1 period=315360000000 mode=shadow")
	})
}

func TestPenaltyAndGCRAOverHTTP(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		created := requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/login", a.key,
			map[string]any{"kind": "gcra", "rate": 1, "period": 3_600_000, "capacity": 2, "penalty": 60_000}), http.StatusOK)
		// The kind is returned as written: "gcra" is the token bucket under its other name.
		if created["kind"] != "gcra" || number(t, created, "penalty") != 60_000 || number(t, created, "capacity") != 2 {
			t.Fatalf("created = %v", created)
		}
		list := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits", a.key, nil), http.StatusOK)
		if l := list["limits"].([]any)[0].(map[string]any); l["kind"] != "gcra" {
			t.Fatalf("listed as %v", l["kind"])
		}
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/login/limit", a.key, map[string]any{"key": "ip", "count": 2}), http.StatusOK)
		refused := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/login/limit", a.key, map[string]any{"key": "ip"}), http.StatusOK)
		// Its own wait is an hour's emission interval, longer than the penalty: that one counts.
		if refused["ok"] != false || number(t, refused, "retryAfter") < 3_599_000 {
			t.Fatalf("refusal = %v", refused)
		}
		v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/login/value?key=ip", a.key, nil), http.StatusOK)
		now := float64(time.Now().UnixMilli())
		if pu := number(t, v, "penaltyUntil"); pu < now+50_000 || pu > now+60_000 {
			t.Fatalf("penaltyUntil %v, want about a minute from now (%v)", pu, now)
		}
		// gcra's fullAt is the token bucket's: ts + missing * period / rate, missing = 2 - value
		// (about two emission intervals), rounded up to a whole ms.
		want := number(t, v, "ts") + (2-number(t, v, "value"))*3_600_000
		if got := number(t, v, "fullAt"); got < want-0.01 || got > want+1 {
			t.Fatalf("fullAt = %v, want %v: %v", got, want, v)
		}
		// A short-period limit with a long penalty: the refusal's retryAfter is the penalty.
		requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/burst", a.key,
			map[string]any{"kind": "token bucket", "rate": 100, "period": 1000, "penalty": 600_000}), http.StatusOK)
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/burst/limit", a.key, map[string]any{"key": "x", "count": 100}), http.StatusOK)
		p := requireProblem(t, h.send(t, http.MethodPost, "/v1/limits/burst/limit", a.key, map[string]any{"key": "x", "count": 100, "throws": true}),
			http.StatusTooManyRequests, api.CodeRateLimited)
		if ra := number(t, p, "retryAfter"); ra != 600_000 {
			t.Fatalf("retryAfter %v, want the penalty (600000)", ra)
		}
		// While the penalty runs even a single token is refused, with the penalty's time left.
		d := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/burst/limit", a.key, map[string]any{"key": "x"}), http.StatusOK)
		if ra := number(t, d, "retryAfter"); d["ok"] != false || ra > 600_000 || ra < 500_000 {
			t.Fatalf("during the penalty = %v", d)
		}
		audited(t, h, a.id, "limit.create", "login", "gcra rate=1 period=3600000 penalty=60000")
	})
}

func TestShadowPenaltyAndGCRABadInput(t *testing.T) {
	cases := []struct {
		name, method, path, body string
		code, field              string
	}{
		{"unknown mode", "PUT", "/v1/limits/y", `{"kind":"token bucket","rate":1,"period":1000,"mode":"dry-run"}`, api.CodeInvalidConfig, "mode"},
		{"empty mode", "PUT", "/v1/limits/y", `{"kind":"token bucket","rate":1,"period":1000,"mode":""}`, api.CodeInvalidConfig, "mode"},
		{"mode of the wrong type", "PUT", "/v1/limits/y", `{"kind":"token bucket","rate":1,"period":1000,"mode":true}`, api.CodeInvalidRequest, "mode"},
		{"negative penalty", "PUT", "/v1/limits/y", `{"kind":"token bucket","rate":1,"period":1000,"penalty":-1}`, api.CodeInvalidConfig, "penalty"},
		{"penalty over a day", "PUT", "/v1/limits/y", `{"kind":"token bucket","rate":1,"period":1000,"penalty":86400001}`, api.CodeInvalidConfig, "penalty"},
		{"fractional penalty", "PUT", "/v1/limits/y", `{"kind":"token bucket","rate":1,"period":1000,"penalty":1.5}`, api.CodeInvalidConfig, "penalty"},
		{"penalty with shards", "PUT", "/v1/limits/y", `{"kind":"gcra","rate":1,"period":1000,"penalty":10,"shards":2}`, api.CodeInvalidConfig, "penalty"},
		{"kind in capitals", "PUT", "/v1/limits/y", `{"kind":"GCRA","rate":1,"period":1000}`, api.CodeInvalidConfig, "kind"},
		{"inline config with a bad mode", "POST", "/v1/limits/adhoc/limit", `{"config":{"kind":"gcra","rate":1,"period":1000,"mode":"x"}}`, api.CodeInvalidConfig, "config.mode"},
	}
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				p := requireProblem(t, h.send(t, tc.method, tc.path, a.key, tc.body), http.StatusBadRequest, tc.code)
				if got, _ := p["field"].(string); got != tc.field {
					t.Fatalf("field = %q, want %q: %v", got, tc.field, p)
				}
			})
		}
		requireProblem(t, h.send(t, http.MethodGet, "/v1/limits/y", a.key, nil), http.StatusNotFound, api.CodeLimitNotFound)
	})
}

// decisionsCounted reads sluice_decisions_total for one limit name and result from the app's
// registry.
func decisionsCounted(t *testing.T, h *harness, name, result string) float64 {
	t.Helper()
	families, err := h.app.Metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != "sluice_decisions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["name"] == name && labels["result"] == result {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// audited fails unless the tenant's audit log holds action on target with detail.
func audited(t *testing.T, h *harness, tenantID int64, action, target, detail string) {
	t.Helper()
	entries, err := h.tenants.AuditLog(context.Background(), tenantID, 100)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, e := range entries {
		if e.Action == action && e.Target == target && e.Detail == detail {
			return
		}
		seen = append(seen, e.Action+" "+e.Target+" "+e.Detail)
	}
	t.Fatalf("no audit entry %s %s %q in:\n%s", action, target, detail, strings.Join(seen, "\n"))
}
