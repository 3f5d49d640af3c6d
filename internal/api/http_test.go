package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/tenants"
)

func TestDefinitionLifecycleOverHTTP(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		def := map[string]any{"kind": "token bucket", "rate": 10, "period": 60000, "capacity": 20, "jitter": 5}
		created := requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/sendMessage", a.key, def), http.StatusOK)
		if created["name"] != "sendMessage" || created["kind"] != "token bucket" || number(t, created, "rate") != 10 ||
			number(t, created, "period") != 60000 || number(t, created, "capacity") != 20 || number(t, created, "jitter") != 5 ||
			number(t, created, "shards") != 1 {
			t.Fatalf("created definition = %v", created)
		}
		for _, f := range []string{"createdAt", "updatedAt"} {
			if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(created[f])); err != nil {
				t.Fatalf("%s = %v: %v", f, created[f], err)
			}
		}

		got := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/sendMessage", a.key, nil), http.StatusOK)
		if got["name"] != "sendMessage" || number(t, got, "capacity") != 20 || got["createdAt"] != created["createdAt"] {
			t.Fatalf("GET = %v, want %v", got, created)
		}

		replaced := requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/sendMessage", a.key,
			map[string]any{"kind": "fixed window", "rate": 5, "period": 1000, "start": 0}), http.StatusOK)
		if replaced["kind"] != "fixed window" || number(t, replaced, "rate") != 5 || replaced["capacity"] != nil {
			t.Fatalf("replaced definition = %v", replaced)
		}
		h.define(t, a.key, "other.limit:v2", map[string]any{"kind": "sliding window", "rate": 3, "period": 6000, "resolution": 6})

		list := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits", a.key, nil), http.StatusOK)
		limits, _ := list["limits"].([]any)
		names := map[string]bool{}
		for _, l := range limits {
			names[l.(map[string]any)["name"].(string)] = true
		}
		if len(limits) != 2 || !names["sendMessage"] || !names["other.limit:v2"] {
			t.Fatalf("list = %v", list)
		}

		del := h.send(t, http.MethodDelete, "/v1/limits/sendMessage", a.key, nil)
		if del.status != http.StatusNoContent || len(del.body) != 0 {
			t.Fatalf("DELETE: %s", del)
		}
		requireProblem(t, h.send(t, http.MethodGet, "/v1/limits/sendMessage", a.key, nil), http.StatusNotFound, api.CodeLimitNotFound)
		requireProblem(t, h.send(t, http.MethodDelete, "/v1/limits/sendMessage", a.key, nil), http.StatusNotFound, api.CodeLimitNotFound)
	})
}

func TestEmptyListIsAnEmptyArrayNotNull(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		r := h.send(t, http.MethodGet, "/v1/limits", a.key, nil)
		requireJSON(t, r, http.StatusOK)
		if strings.TrimSpace(string(r.body)) != `{"limits":[]}` {
			t.Fatalf("body = %s", r.body)
		}
	})
}

func TestDecisionsConsumeCheckValueAndReset(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "sendMessage", bucket10PerMinute)

		d := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/sendMessage/limit", a.key, map[string]any{"key": "alice", "count": 3}), http.StatusOK)
		if d["ok"] != true || d["retryAfter"] != nil || number(t, d, "remaining") != 7 || d["name"] != "sendMessage" || d["key"] != "alice" {
			t.Fatalf("limit = %v", d)
		}
		// check computes the same decision and never writes.
		for range 3 {
			c := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/sendMessage/check", a.key, map[string]any{"key": "alice", "count": 2}), http.StatusOK)
			if c["ok"] != true || math.Abs(number(t, c, "remaining")-5) > 0.5 {
				t.Fatalf("check = %v", c)
			}
		}
		v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/sendMessage/value?key=alice", a.key, nil), http.StatusOK)
		if math.Abs(number(t, v, "value")-7) > 0.5 {
			t.Fatalf("value after limit 3 and three checks = %v, want ~7", v)
		}
		ts := number(t, v, "ts")
		if now := float64(time.Now().UnixMilli()); ts > now || ts < now-60000 {
			t.Fatalf("ts = %v, now %v", ts, now)
		}
		shards, _ := v["shards"].([]any)
		if len(shards) != 1 || math.Abs(number(t, shards[0].(map[string]any), "value")-7) > 0.5 {
			t.Fatalf("shards = %v", v["shards"])
		}
		cfg, _ := v["config"].(map[string]any)
		if cfg["kind"] != "token bucket" || number(t, cfg, "rate") != 10 || number(t, cfg, "period") != 60000 {
			t.Fatalf("config = %v", v["config"])
		}

		// The global key (no "key") is a distinct key.
		g := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/sendMessage/limit", a.key, map[string]any{}), http.StatusOK)
		if g["ok"] != true || g["key"] != nil || number(t, g, "remaining") != 9 {
			t.Fatalf("global-key limit = %v", g)
		}

		reset := h.send(t, http.MethodPost, "/v1/limits/sendMessage/reset", a.key, map[string]any{"key": "alice"})
		if reset.status != http.StatusNoContent {
			t.Fatalf("reset key: %s", reset)
		}
		v = requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/sendMessage/value?key=alice", a.key, nil), http.StatusOK)
		if number(t, v, "value") != 10 {
			t.Fatalf("value after reset = %v, want full (10)", v)
		}
		// the global key kept its state until allKeys resets everything
		v = requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/sendMessage/value", a.key, nil), http.StatusOK)
		if math.Abs(number(t, v, "value")-9) > 0.5 {
			t.Fatalf("global value = %v, want ~9", v)
		}
		h.send(t, http.MethodPost, "/v1/limits/sendMessage/limit", a.key, map[string]any{"key": "bob", "count": 4})
		reset = h.send(t, http.MethodPost, "/v1/limits/sendMessage/reset", a.key, map[string]any{"allKeys": true})
		if reset.status != http.StatusNoContent {
			t.Fatalf("reset allKeys: %s", reset)
		}
		for _, q := range []string{"", "?key=bob"} {
			v = requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/sendMessage/value"+q, a.key, nil), http.StatusOK)
			if number(t, v, "value") != 10 {
				t.Fatalf("value%s after allKeys reset = %v", q, v)
			}
		}
	})
}

func TestInlineConfigAppliesWhenNoDefinitionIsStored(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		body := map[string]any{"key": "k", "config": map[string]any{"kind": "fixed window", "rate": 2, "period": 60000}}
		for i, wantOK := range []bool{true, true, false} {
			d := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/adhoc/limit", a.key, body), http.StatusOK)
			if d["ok"] != wantOK {
				t.Fatalf("decision %d = %v, want ok=%v", i, d, wantOK)
			}
		}
	})
}

func TestBatchLimitAndCheckDecideAll(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "perUser", bucket10PerMinute)
		h.define(t, a.key, "global", frozenWindow)
		batch := map[string]any{"limits": []any{
			map[string]any{"name": "perUser", "key": "alice", "count": 2},
			map[string]any{"name": "global", "count": 1},
		}}
		b := requireJSON(t, h.send(t, http.MethodPost, "/v1/limit", a.key, batch), http.StatusOK)
		results, _ := b["results"].([]any)
		if b["ok"] != true || b["retryAfter"] != nil || len(results) != 2 {
			t.Fatalf("batch = %v", b)
		}
		r0, r1 := results[0].(map[string]any), results[1].(map[string]any)
		if r0["name"] != "perUser" || r0["key"] != "alice" || number(t, r0, "remaining") != 8 ||
			r1["name"] != "global" || r1["key"] != nil || number(t, r1, "remaining") != 9 {
			t.Fatalf("results = %v", results)
		}
		c := requireJSON(t, h.send(t, http.MethodPost, "/v1/check", a.key, batch), http.StatusOK)
		if c["ok"] != true {
			t.Fatalf("check batch = %v", c)
		}
		v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/global/value", a.key, nil), http.StatusOK)
		if number(t, v, "value") != 9 {
			t.Fatalf("global value after limit+check batches = %v, want 9 (check must not consume)", v)
		}
		// both limits announce themselves in the headers
		if p := b0Header(t, h, a.key, batch); !strings.Contains(p, `"perUser";q=10;w=60`) || !strings.Contains(p, `"global";q=10;w=315360000`) {
			t.Fatalf("RateLimit-Policy = %q", p)
		}
	})
}

func b0Header(t *testing.T, h *harness, key string, batch any) string {
	t.Helper()
	r := h.send(t, http.MethodPost, "/v1/check", key, batch)
	requireJSON(t, r, http.StatusOK)
	return r.header.Get("RateLimit-Policy")
}

func TestBatchIsAllOrNothingAndReportsTheLargestRetryAfter(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "roomy", bucket10PerMinute)
		h.define(t, a.key, "halfMinute", map[string]any{"kind": "token bucket", "rate": 2, "period": 60000})
		h.define(t, a.key, "fullMinute", map[string]any{"kind": "token bucket", "rate": 1, "period": 60000})
		h.send(t, http.MethodPost, "/v1/limits/halfMinute/limit", a.key, map[string]any{"key": "k", "count": 2})
		h.send(t, http.MethodPost, "/v1/limits/fullMinute/limit", a.key, map[string]any{"key": "k", "count": 1})

		batch := map[string]any{"limits": []any{
			map[string]any{"name": "roomy", "key": "k", "count": 5},
			map[string]any{"name": "halfMinute", "key": "k"},
			map[string]any{"name": "fullMinute", "key": "k"},
		}}
		b := requireJSON(t, h.send(t, http.MethodPost, "/v1/limit", a.key, batch), http.StatusOK)
		results := b["results"].([]any)
		half, full := results[1].(map[string]any), results[2].(map[string]any)
		if b["ok"] != false || half["ok"] != false || full["ok"] != false {
			t.Fatalf("batch = %v", b)
		}
		ra, halfRA, fullRA := number(t, b, "retryAfter"), number(t, half, "retryAfter"), number(t, full, "retryAfter")
		if ra != fullRA || fullRA <= halfRA || ra < 55000 || ra > 60000 || halfRA < 25000 || halfRA > 30000 {
			t.Fatalf("retryAfter batch %v, halfMinute %v, fullMinute %v: want the largest (~60000)", ra, halfRA, fullRA)
		}
		// nothing was consumed: the roomy limit never saw its 5 tokens
		v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/roomy/value?key=k", a.key, nil), http.StatusOK)
		if number(t, v, "value") != 10 || len(v["shards"].([]any)) != 1 {
			t.Fatalf("roomy value after refused batch = %v, want untouched 10", v)
		}

		// throws: the 429 names the limit with the largest retryAfter
		batch["throws"] = true
		r := h.send(t, http.MethodPost, "/v1/limit", a.key, batch)
		p := requireProblem(t, r, http.StatusTooManyRequests, api.CodeRateLimited)
		if p["name"] != "fullMinute" || number(t, p, "retryAfter") < 55000 {
			t.Fatalf("429 problem = %v", p)
		}
		if want := strconv.FormatInt(int64(math.Ceil(number(t, p, "retryAfter")/1000)), 10); r.header.Get("Retry-After") != want {
			t.Fatalf("Retry-After %q, want %q", r.header.Get("Retry-After"), want)
		}
		v = requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/roomy/value?key=k", a.key, nil), http.StatusOK)
		if number(t, v, "value") != 10 {
			t.Fatalf("roomy value after thrown batch = %v", v)
		}
	})
}

func TestDecisionsCarryRateLimitHeaders(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "sendMessage", bucket10PerMinute)
		r := h.send(t, http.MethodPost, "/v1/limits/sendMessage/limit", a.key, map[string]any{"key": "alice"})
		requireJSON(t, r, http.StatusOK)
		if got := r.header.Get("RateLimit-Policy"); got != `"sendMessage";q=10;w=60` {
			t.Fatalf("RateLimit-Policy = %q", got)
		}
		// 9 left; one token refills in 6 s
		if got := r.header.Get("RateLimit"); got != `"sendMessage";r=9;t=6` {
			t.Fatalf("RateLimit = %q", got)
		}
		r = h.send(t, http.MethodPost, "/v1/limits/sendMessage/check", a.key, map[string]any{"key": "alice", "count": 9})
		requireJSON(t, r, http.StatusOK)
		if got := r.header.Get("RateLimit"); !strings.HasPrefix(got, `"sendMessage";r=0;t=`) {
			t.Fatalf("RateLimit after check of 9 = %q", got)
		}
		// a refusal: t is the retryAfter in seconds
		h.send(t, http.MethodPost, "/v1/limits/sendMessage/limit", a.key, map[string]any{"key": "alice", "count": 9})
		r = h.send(t, http.MethodPost, "/v1/limits/sendMessage/limit", a.key, map[string]any{"key": "alice", "count": 2})
		d := requireJSON(t, r, http.StatusOK)
		want := fmt.Sprintf(`"sendMessage";r=0;t=%d`, int64(math.Ceil(number(t, d, "retryAfter")/1000)))
		if d["ok"] != false || r.header.Get("RateLimit") != want {
			t.Fatalf("refusal %v with RateLimit %q, want %q", d, r.header.Get("RateLimit"), want)
		}
	})
}

func TestThrowsTurnsARefusalInto429WithRetryAfterRoundedUp(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		// 3 tokens per 10 s: one token takes 3333.3 ms, so Retry-After must round up to 4.
		h.define(t, a.key, "login", map[string]any{"kind": "token bucket", "rate": 3, "period": 10000})
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/login/limit", a.key, map[string]any{"key": "ip1", "count": 3, "throws": true}), http.StatusOK)
		r := h.send(t, http.MethodPost, "/v1/limits/login/limit", a.key, map[string]any{"key": "ip1", "throws": true})
		p := requireProblem(t, r, http.StatusTooManyRequests, api.CodeRateLimited)
		ra := number(t, p, "retryAfter")
		if p["name"] != "login" || ra <= 0 || ra > 3334 {
			t.Fatalf("problem = %v", p)
		}
		secs, err := strconv.Atoi(r.header.Get("Retry-After"))
		if err != nil || float64(secs)*1000 < ra || float64(secs-1)*1000 >= ra {
			t.Fatalf("Retry-After = %q for retryAfter %v ms: want whole seconds rounded up", r.header.Get("Retry-After"), ra)
		}
		if want := fmt.Sprintf(`"login";r=0;t=%d`, secs); r.header.Get("RateLimit") != want {
			t.Fatalf("RateLimit on 429 = %q, want %q", r.header.Get("RateLimit"), want)
		}
		// without throws the same refusal is a 200 with ok=false
		d := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/login/check", a.key, map[string]any{"key": "ip1"}), http.StatusOK)
		if d["ok"] != false {
			t.Fatalf("check = %v", d)
		}
	})
}

func TestInputErrorsAreProblemsWithTheirCode(t *testing.T) {
	long := strings.Repeat("k", 257)
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code, field        string
	}{
		{"unknown field", "POST", "/v1/limits/x/limit", `{"key":"a","colour":"red"}`, 400, api.CodeInvalidRequest, "colour"},
		{"wrong type", "POST", "/v1/limits/x/limit", `{"key":"a","count":"three"}`, 400, api.CodeInvalidRequest, "count"},
		{"malformed JSON", "POST", "/v1/limits/x/limit", `{"key":`, 400, api.CodeInvalidRequest, ""},
		{"trailing data", "POST", "/v1/limits/x/limit", `{"key":"a"} {}`, 400, api.CodeInvalidRequest, ""},
		{"empty body", "POST", "/v1/limits/x/limit", nil, 400, api.CodeInvalidRequest, ""},
		{"empty key", "POST", "/v1/limits/x/limit", `{"key":""}`, 400, api.CodeInvalidRequest, "key"},
		{"overlong key", "POST", "/v1/limits/x/limit", map[string]any{"key": long}, 400, api.CodeInvalidRequest, "key"},
		{"reserved key prefix", "POST", "/v1/limits/x/limit", `{"key":"session:abc"}`, 400, api.CodeInvalidRequest, "key"},
		{"key and session", "POST", "/v1/limits/x/check", `{"key":"a","session":"0123456789abcdef0123"}`, 400, api.CodeInvalidRequest, "session"},
		{"negative count", "POST", "/v1/limits/x/limit", `{"count":-1}`, 400, api.CodeInvalidRequest, "count"},
		{"reset with key and allKeys", "POST", "/v1/limits/x/reset", `{"key":"a","allKeys":true}`, 400, api.CodeInvalidRequest, "allKeys"},
		{"value with bad key", "GET", "/v1/limits/x/value?key=" + long, nil, 400, api.CodeInvalidRequest, "key"},
		{"batch without limits", "POST", "/v1/limit", `{"limits":[]}`, 400, api.CodeInvalidRequest, "limits"},
		{"batch with a bad name", "POST", "/v1/check", `{"limits":[{"name":"no spaces"}]}`, 400, api.CodeInvalidRequest, "limits[0].name"},
		{"bad name on PUT", "PUT", "/v1/limits/" + strings.Repeat("n", 129), bucket10PerMinute, 400, api.CodeInvalidRequest, "name"},
		// HTTP clients resolve /v1/limits/.. away as a dot segment: no limit may have that name.
		{"a dot-segment name on PUT", "PUT", "/v1/limits/..", bucket10PerMinute, 400, api.CodeInvalidRequest, "name"},
		{"a dot-segment name in a batch", "POST", "/v1/check", `{"limits":[{"name":"."}]}`, 400, api.CodeInvalidRequest, "limits[0].name"},
		{"missing rate", "PUT", "/v1/limits/y", `{"kind":"token bucket","period":1000}`, 400, api.CodeInvalidConfig, "rate"},
		{"bad kind", "PUT", "/v1/limits/y", `{"kind":"leaky","rate":1,"period":1000}`, 400, api.CodeInvalidConfig, "kind"},
		{"zero period", "PUT", "/v1/limits/y", `{"kind":"token bucket","rate":1,"period":0}`, 400, api.CodeInvalidConfig, "period"},
		{"huge rate", "PUT", "/v1/limits/y", `{"kind":"token bucket","rate":1e308,"period":1000}`, 400, api.CodeInvalidConfig, "rate"},
		{"capacity on sliding window", "PUT", "/v1/limits/y", `{"kind":"sliding window","rate":1,"period":1000,"capacity":3}`, 400, api.CodeInvalidConfig, "capacity"},
		{"zero shards", "PUT", "/v1/limits/y", `{"kind":"token bucket","rate":1,"period":1000,"shards":0}`, 400, api.CodeInvalidConfig, "shards"},
		{"bad inline config", "POST", "/v1/limits/adhoc/limit", `{"config":{"kind":"token bucket","rate":-1,"period":1000}}`, 400, api.CodeInvalidConfig, "config.rate"},
		{"count over capacity", "POST", "/v1/limits/x/limit", `{"count":11}`, 400, api.CodeCountExceedsCapacity, "count"},
		{"count over capacity in batch", "POST", "/v1/check", `{"limits":[{"name":"x","count":11}]}`, 400, api.CodeCountExceedsCapacity, "limits[0].count"},
		{"config with stored definition", "POST", "/v1/limits/x/limit", map[string]any{"config": bucket10PerMinute}, 409, api.CodeDefinitionExists, "config"},
		{"unknown limit", "POST", "/v1/limits/nope/limit", `{}`, 404, api.CodeLimitNotFound, ""},
		{"unknown limit in batch", "POST", "/v1/limit", `{"limits":[{"name":"x"},{"name":"nope"}]}`, 404, api.CodeLimitNotFound, "limits[1].name"},
		{"value of unknown limit", "GET", "/v1/limits/nope/value", nil, 404, api.CodeLimitNotFound, ""},
		{"reset of unknown limit", "POST", "/v1/limits/nope/reset", `{"allKeys":true}`, 404, api.CodeLimitNotFound, ""},
		{"impossible name on GET", "GET", "/v1/limits/" + strings.Repeat("n", 129), nil, 404, api.CodeLimitNotFound, ""},
		{"unknown path", "GET", "/v1/nothing/here", nil, 404, api.CodeNotFound, ""},
		{"another method on a known path (405 with Allow)", "PATCH", "/v1/limits/x", `{}`, 405, api.CodeMethodNotAllowed, ""},
		{"an unknown query parameter", "GET", "/v1/limits/x/value?key=a&bogus=1", nil, 400, api.CodeInvalidRequest, "bogus"},
		{"a query parameter given twice", "GET", "/v1/limits/x/value?key=a&key=b", nil, 400, api.CodeInvalidRequest, "key"},
		{"a query parameter where none is taken", "GET", "/v1/limits?limit=5", nil, 400, api.CodeInvalidRequest, "limit"},
		{"a bare % in a query value", "GET", "/v1/limits/x/value?key=50%off", nil, 400, api.CodeInvalidRequest, "key"},
		{"a ; in a query", "GET", "/v1/limits/x/value?key=a;b", nil, 400, api.CodeInvalidRequest, "key"},
		{"a malformed second value", "GET", "/v1/limits/x/value?key=a&key=%zz", nil, 400, api.CodeInvalidRequest, "key"},
		{"session without checker", "POST", "/v1/limits/x/limit", `{"session":"0123456789abcdef0123"}`, 403, api.CodeSessionNotAuthorized, ""},
		{"session with config for a stored definition", "POST", "/v1/limits/x/limit", map[string]any{"session": "0123456789abcdef0123", "config": bucket10PerMinute}, 409, api.CodeDefinitionExists, "config"},
		{"session in batch", "POST", "/v1/limit", `{"limits":[{"name":"x","key":"a"},{"name":"x","session":"0123456789abcdef0123"}]}`, 403, api.CodeSessionNotAuthorized, "limits[1].session"},
		{"unknown limit of a session in batch", "POST", "/v1/limit", `{"limits":[{"name":"x","key":"a"},{"name":"nope","session":"0123456789abcdef0123"}]}`, 404, api.CodeLimitNotFound, "limits[1].name"},
		{"malformed session", "POST", "/v1/limits/x/limit", `{"session":"short"}`, 400, api.CodeInvalidRequest, "session"},
		{"payload too large", "POST", "/v1/limits/x/limit", `{"key":"` + strings.Repeat("a", api.MaxBodyBytes) + `"}`, 413, api.CodePayloadTooLarge, ""},
		{"payload too large on PUT", "PUT", "/v1/limits/x", strings.Repeat(" ", api.MaxBodyBytes+1) + `{}`, 413, api.CodePayloadTooLarge, ""},
		{"payload too large on the JWK set", "GET", "/.well-known/jwks.json", strings.Repeat(" ", 1<<20+1), 413, api.CodePayloadTooLarge, ""},
	}
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", bucket10PerMinute)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				p := requireProblem(t, h.send(t, tc.method, tc.path, a.key, tc.body), tc.status, tc.code)
				if got, _ := p["field"].(string); got != tc.field {
					t.Fatalf("field = %q, want %q: %v", got, tc.field, p)
				}
			})
		}
		// none of the refused requests consumed anything
		v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/x/value", a.key, nil), http.StatusOK)
		if number(t, v, "value") != 10 {
			t.Fatalf("x after refused requests = %v", v)
		}
	})
}

func TestSessionFallsBackToHashedClientIPWhenTheDefinitionAllowsIt(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		def := map[string]any{"kind": "token bucket", "rate": 2, "period": 60000, "ipFallback": true}
		h.define(t, a.key, "anon", def)
		body := map[string]any{"session": "0123456789abcdef0123"}
		d := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/anon/limit", a.key, body), http.StatusOK)
		key, _ := d["key"].(string)
		if d["ok"] != true || !strings.HasPrefix(key, "ip:") || strings.Contains(key, "127.0.0") {
			t.Fatalf("fallback decision = %v, want a hashed ip: key", d)
		}
		// another session from the same IP prefix shares the allowance
		d = requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/anon/limit", a.key, map[string]any{"session": "another-session-id-0001"}), http.StatusOK)
		if d["key"] != key || number(t, d, "remaining") > 0.1 {
			t.Fatalf("second session = %v", d)
		}
		// inline config may opt in as well
		inline := map[string]any{"session": "0123456789abcdef0123", "config": def}
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/anonInline/check", a.key, inline), http.StatusOK)
		// the same session on a limit without ipFallback is refused
		h.define(t, a.key, "strict", bucket10PerMinute)
		requireProblem(t, h.send(t, http.MethodPost, "/v1/limits/strict/limit", a.key, body), http.StatusForbidden, api.CodeSessionNotAuthorized)
	})
}

func TestAuthenticationFailuresAre401(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", bucket10PerMinute)
		badChecksum := a.key[:len(a.key)-1] + flipBase62(a.key[len(a.key)-1])
		// well-formed, valid checksum, but never issued by this server
		unknown := reissue(t, h, a.key)
		cases := map[string]string{
			"no header":      "",
			"bad scheme":     "Basic " + a.key,
			"no secret":      "Bearer ",
			"bad checksum":   "Bearer " + badChecksum,
			"unknown key":    "Bearer " + unknown,
			"not a key":      "Bearer hunter2",
			"lowercase key":  "Bearer " + strings.ToLower(a.key),
			"publishable pk": "Bearer pk_live_" + a.key[8:],
		}
		for name, auth := range cases {
			t.Run(name, func(t *testing.T) {
				r := sendAuth(t, h.url, http.MethodGet, "/v1/limits/x", auth, nil)
				requireProblem(t, r, http.StatusUnauthorized, api.CodeUnauthorized)
				if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
					t.Fatalf("WWW-Authenticate = %q", r.header.Get("WWW-Authenticate"))
				}
			})
		}
		// the scheme is case-insensitive
		requireJSON(t, sendAuth(t, h.url, http.MethodGet, "/v1/limits/x", "bearer "+a.key, nil), http.StatusOK)

		// Two Authorization headers are refused, not read as the first: here they name two
		// tenants, and the first would have read b's limits.
		b := h.newTenant(t, "beta")
		for _, second := range []string{"Bearer " + a.key, "Bearer " + b.key, "garbage"} {
			req, err := http.NewRequest(http.MethodGet, h.url+"/v1/limits", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Add("Authorization", "Bearer "+b.key)
			req.Header.Add("Authorization", second)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("GET /v1/limits with two Authorization headers (b's key, then %q): %d, want 401", second[:min(len(second), 12)], res.StatusCode)
			}
		}
	})
}

// reissue returns a well-formed key with a valid checksum that this server never issued: a key
// created on another, throwaway database.
func reissue(t *testing.T, _ *harness, _ string) string {
	t.Helper()
	other := newHarness(t, sqliteURL(t))
	return other.newTenant(t, "elsewhere").key
}

func flipBase62(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

func TestRevokedKeyIsRefusedImmediately(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		requireJSON(t, h.send(t, http.MethodGet, "/v1/limits", a.key, nil), http.StatusOK)
		if err := h.tenants.RevokeKey(context.Background(), a.id, a.keyID, "test"); err != nil {
			t.Fatal(err)
		}
		requireProblem(t, h.send(t, http.MethodGet, "/v1/limits", a.key, nil), http.StatusUnauthorized, api.CodeUnauthorized)
	})
}

func TestPublishableKeyIsForbiddenOnSecretRoutes(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		_, pk, err := h.tenants.CreateKey(context.Background(), a.id, tenants.KindPublishable, "widget", "test")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(pk, "pk_live_") {
			t.Fatalf("publishable key %q", pk[:8])
		}
		requireProblem(t, h.send(t, http.MethodGet, "/v1/limits", pk, nil), http.StatusForbidden, api.CodeForbidden)
		requireProblem(t, h.send(t, http.MethodPut, "/v1/limits/x", pk, bucket10PerMinute), http.StatusForbidden, api.CodeForbidden)
		// and nothing was defined through it
		list := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits", a.key, nil), http.StatusOK)
		if n := len(list["limits"].([]any)); n != 0 {
			t.Fatalf("%d limits defined through a publishable key", n)
		}
	})
}

func TestOpenAPIDocumentIsServedPublicly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteURL(t))
	r := h.send(t, http.MethodGet, "/v1/openapi.json", "", nil)
	doc := requireJSON(t, r, http.StatusOK)
	if doc["openapi"] != "3.1.0" || string(r.body) != string(api.OpenAPIDocument) {
		t.Fatalf("served document differs from api.OpenAPIDocument: %s", r)
	}
}

func TestClosedDatabaseFailsClosedWith503(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", bucket10PerMinute)
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/x/limit", a.key, map[string]any{"key": "k"}), http.StatusOK)
		if err := h.db.Close(); err != nil {
			t.Fatal(err)
		}
		for _, req := range []struct {
			method, path string
			body         any
		}{
			{"POST", "/v1/limits/x/limit", map[string]any{"key": "k"}},
			{"POST", "/v1/limits/x/check", map[string]any{"key": "k"}},
			{"POST", "/v1/limit", map[string]any{"limits": []any{map[string]any{"name": "x"}}}},
			{"GET", "/v1/limits", nil},
		} {
			r := h.send(t, req.method, req.path, a.key, req.body)
			requireProblem(t, r, http.StatusServiceUnavailable, api.CodeUnavailable)
			if strings.Contains(string(r.body), `"ok"`) || strings.Contains(string(r.body), "sql") {
				t.Fatalf("%s %s leaked a decision or internals: %s", req.method, req.path, r)
			}
			if r.header.Get("Retry-After") == "" {
				t.Fatalf("503 without Retry-After: %s", r)
			}
		}
	})
}

// TestExtremeFixedWindowRefusalSaysRetryMuchLater: a valid but extreme definition (a millionth
// of a millionth per day) is refused with the largest retryAfter and Retry-After, never 0.
func TestExtremeFixedWindowRefusalSaysRetryMuchLater(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "rare", map[string]any{"kind": "fixed window", "rate": 1e-12, "period": 86_400_000, "capacity": 1})
		admitted := h.send(t, http.MethodPost, "/v1/limits/rare/limit", a.key, map[string]any{})
		requireJSON(t, admitted, http.StatusOK)
		// t stops where retryAfter does (10^15 ms), admitted or refused.
		if got := admitted.header.Get("RateLimit"); got != `"rare";r=0;t=1000000000000` {
			t.Fatalf("the admitted decision's RateLimit: %q, want t capped at 10^12 s", got)
		}
		refused := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/rare/limit", a.key, map[string]any{}), http.StatusOK)
		if refused["ok"] != false || number(t, refused, "retryAfter") != 1e15 {
			t.Fatalf("second decision = %v, want refused with retryAfter 1e15", refused)
		}
		r := h.send(t, http.MethodPost, "/v1/limits/rare/limit", a.key, map[string]any{"throws": true})
		p := requireProblem(t, r, http.StatusTooManyRequests, api.CodeRateLimited)
		if number(t, p, "retryAfter") != 1e15 || r.header.Get("Retry-After") != "1000000000000" {
			t.Fatalf("429 = %v, Retry-After %q", p, r.header.Get("Retry-After"))
		}
	})
}

// TestStrictJSONRefusesDuplicateMembersAndOutOfRangeNumbers: encoding/json would keep the last
// of two members silently; Sluice names the member instead. A number the field cannot hold is
// named too, as a configuration error when it is one.
func TestStrictJSONRefusesDuplicateMembersAndOutOfRangeNumbers(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", bucket10PerMinute)
		for _, tc := range []struct{ method, path, body, code, field string }{
			{http.MethodPost, "/v1/limits/x/limit", `{"count":1,"count":5}`, api.CodeInvalidRequest, "count"},
			{http.MethodPost, "/v1/limit", `{"limits":[{"name":"x"},{"name":"x","key":"a","key":"b"}]}`, api.CodeInvalidRequest, "limits[1].key"},
			{http.MethodPut, "/v1/limits/y", `{"kind":"token bucket","rate":1,"rate":2,"period":1000}`, api.CodeInvalidRequest, "rate"},
			{http.MethodPut, "/v1/limits/y", `{"kind":"token bucket","rate":1e400,"period":1000}`, api.CodeInvalidConfig, "rate"},
			{http.MethodPut, "/v1/limits/y", `{"kind":"token bucket","rate":1,"period":1e30}`, api.CodeInvalidConfig, "period"},
			{http.MethodPost, "/v1/limits/z/limit", `{"config":{"kind":"token bucket","rate":1e400,"period":1000}}`, api.CodeInvalidConfig, "config.rate"},
			{http.MethodPost, "/v1/limits/x/limit", `{"count":1e400}`, api.CodeInvalidRequest, "count"},
			// encoding/json matches member names in any case: {"KEY": …} would be taken as "key".
			{http.MethodPost, "/v1/limits/x/limit", `{"key":"alice","KEY":"bob"}`, api.CodeInvalidRequest, "KEY"},
			{http.MethodPost, "/v1/limits/x/limit", `{"count":1,"COUNT":5}`, api.CodeInvalidRequest, "COUNT"},
			{http.MethodPost, "/v1/limit", `{"limits":[{"name":"x"},{"name":"x","Key":"a"}]}`, api.CodeInvalidRequest, "limits[1].Key"},
			{http.MethodPost, "/v1/decisions", `{"Decisions":[{"NAME":"x","Count":4}]}`, api.CodeInvalidRequest, "Decisions"},
			{http.MethodPost, "/v1/decisions", `{"decisions":[{"name":"x","Count":4}]}`, api.CodeInvalidRequest, "decisions[0].Count"},
			{http.MethodPost, "/v1/holds", `{"limits":[{"name":"x","count":1}],"TTL":1000}`, api.CodeInvalidRequest, "TTL"},
			{http.MethodPut, "/v1/limits/y", `{"kind":"token bucket","Rate":1,"period":1000}`, api.CodeInvalidRequest, "Rate"},
			{http.MethodPost, "/v1/limits/z/limit", `{"config":{"kind":"token bucket","rate":1,"Period":1000}}`, api.CodeInvalidRequest, "config.Period"},
		} {
			p := requireProblem(t, h.send(t, tc.method, tc.path, a.key, tc.body), http.StatusBadRequest, tc.code)
			if p["field"] != tc.field {
				t.Errorf("%s %s %s: field %v, want %s (%v)", tc.method, tc.path, tc.body, p["field"], tc.field, p)
			}
		}
		// Nothing was consumed by the refused bodies.
		if v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/x/value", a.key, nil), http.StatusOK); number(t, v, "value") != 10 {
			t.Fatalf("value after refused bodies = %v", v)
		}
	})
}

// TestProblemsNameTheItemTheyAreAbout: a problem with one item of a batch, a bulk request or a
// hold names its field under the item's path, also when the engine finds it (a count past what
// any limit holds, past this one's capacity, or past it with the batch's earlier items on the
// same key) or the inline config's conversion does.
func TestProblemsNameTheItemTheyAreAbout(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "m", frozenWindow)
		h.define(t, a.key, "org", map[string]any{"kind": "fixed window", "rate": 2, "period": 60000})
		h.define(t, a.key, "child", map[string]any{"kind": "fixed window", "rate": 10, "period": 60000, "parents": []any{map[string]any{"name": "org", "key": "{org}"}}})
		for _, tc := range []struct{ path, body, code, field string }{
			{"/v1/limit", `{"limits":[{"name":"m","key":"a"},{"name":"m","key":"b","count":1e16}]}`, api.CodeInvalidRequest, "limits[1].count"},
			{"/v1/limit", `{"limits":[{"name":"m","key":"a"},{"name":"m","key":"b","count":11}]}`, "count_exceeds_capacity", "limits[1].count"},
			{"/v1/limit", `{"limits":[{"name":"m","key":"a"},{"name":"nope","key":"b"}]}`, "limit_not_found", "limits[1].name"},
			{"/v1/limit", `{"limits":[{"name":"i","config":{"kind":"token bucket","rate":0,"period":1000}}]}`, api.CodeInvalidConfig, "limits[0].config.rate"},
			{"/v1/limits/i/limit", `{"config":{"kind":"token bucket","rate":0,"period":1000}}`, api.CodeInvalidConfig, "config.rate"},
			{"/v1/holds", `{"limits":[{"name":"m","key":"a"},{"name":"m","key":"b","count":11}],"ttl":1000}`, "count_exceeds_capacity", "limits[1].count"},
			// Found on the item's parent: still the item's.
			{"/v1/limit", `{"limits":[{"name":"m","key":"a"},{"name":"child","key":"c","count":5,"attributes":{"org":"x"}}]}`, "count_exceeds_capacity", "limits[1].count"},
			{"/v1/holds", `{"limits":[{"name":"m","key":"a"},{"name":"child","key":"c","count":5,"attributes":{"org":"x"}}],"ttl":1000}`, "count_exceeds_capacity", "limits[1].count"},
			// Items that each fit but together on one key never can: the item that makes it so.
			{"/v1/check", `{"limits":[{"name":"m","key":"s","count":6},{"name":"m","key":"s","count":5}]}`, "count_exceeds_capacity", "limits[1].count"},
			{"/v1/holds", `{"limits":[{"name":"m","key":"s","count":6},{"name":"m","key":"s","count":5}],"ttl":1000}`, "count_exceeds_capacity", "limits[1].count"},
			{"/v1/limit", `{"limits":[{"name":"child","key":"c","count":1,"attributes":{"org":"y"}},{"name":"child","key":"d","count":2,"attributes":{"org":"y"}}]}`, "count_exceeds_capacity", "limits[1].count"},
		} {
			r := h.send(t, http.MethodPost, tc.path, a.key, tc.body)
			p := requireProblem(t, r, r.status, tc.code)
			if p["field"] != tc.field {
				t.Errorf("%s %s: field %v, want %s (%v)", tc.path, tc.body, p["field"], tc.field, p)
			}
		}
		// 6 + 5 on one key of a window of 10: a 400 naming the second item, not a 429 whose
		// Retry-After would be refused again for ever.
		p := requireProblem(t, h.send(t, http.MethodPost, "/v1/limit", a.key, `{"limits":[{"name":"m","key":"s","count":6},{"name":"m","key":"s","count":5}]}`),
			http.StatusBadRequest, "count_exceeds_capacity")
		if p["field"] != "limits[1].count" {
			t.Errorf("6 + 5 on one key of a limit of 10: field %v, want limits[1].count (%v)", p["field"], p)
		}
		if v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/m/value?key=s", a.key, nil), http.StatusOK); number(t, v, "value") != 10 {
			t.Fatalf("value of key s after the refused batches = %v, want 10", v)
		}
		got := requireJSON(t, h.send(t, http.MethodPost, "/v1/decisions", a.key, `{"decisions":[{"name":"m","key":"a"},{"name":"m","key":"b","count":11}]}`), http.StatusOK)
		item := got["results"].([]any)[1].(map[string]any)
		if e, _ := item["error"].(map[string]any); e == nil || e["field"] != "decisions[1].count" || e["code"] != "count_exceeds_capacity" {
			t.Errorf("bulk item 1: %v, want count_exceeds_capacity about decisions[1].count", item)
		}
		// Nothing was consumed by the refused items.
		if v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/m/value?key=a", a.key, nil), http.StatusOK); number(t, v, "value") != 9 {
			t.Fatalf("value of key a after the refused requests = %v, want 9 (the bulk request's first item only)", v)
		}
	})
}

// TestKnownPathWithAnotherMethodIs405WithAllow: not a 404, which would say the route is missing.
func TestKnownPathWithAnotherMethodIs405WithAllow(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		for _, tc := range []struct{ method, path, allow string }{
			{http.MethodDelete, "/v1/limit", "POST"},
			{http.MethodPost, "/v1/limits", "GET, HEAD"},
			{http.MethodPatch, "/v1/limits/x", "GET, PUT, DELETE, HEAD"},
			{http.MethodGet, "/v1/limits/x/limit", "POST"},
			{http.MethodHead, "/v1/limits/x/limit", "POST"},
			{http.MethodPost, "/.well-known/jwks.json", "GET, HEAD"}, // the API's, outside /v1
		} {
			r := h.send(t, tc.method, tc.path, a.key, nil)
			if tc.method == http.MethodHead { // no body to read the problem from
				if r.status != http.StatusMethodNotAllowed {
					t.Errorf("%s %s: %d, want 405", tc.method, tc.path, r.status)
				}
			} else {
				requireProblem(t, r, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed)
			}
			if got := r.header.Get("Allow"); got != tc.allow {
				t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
			}
		}
	})
}

// TestHeadIsTheGetWithoutItsBody: through the real server, HEAD on any path answers what GET
// answers (status, content type, Allow, WWW-Authenticate, and the length of GET's body),
// authenticated or not. (That no body follows on the wire is httpserver's
// TestHeadIsAnsweredWhereverGetIs: Go's client reads none after a HEAD.)
func TestHeadIsTheGetWithoutItsBody(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteURL(t))
	a := h.newTenant(t, "acme")
	h.define(t, a.key, "x", bucket10PerMinute)
	for _, tc := range []struct{ path, key string }{
		{"/v1/limits", a.key},
		{"/v1/limits/x", a.key},
		{"/v1/limits/x/value?key=a", a.key},
		{"/v1/limits", ""},                    // 401
		{"/v1/limits/nope", a.key},            // 404
		{"/v1/limits/x/value?bogus=1", a.key}, // 400
		{"/v1/limits/x/limit", a.key},         // 405: no GET
		{"/v1/openapi.json", ""},
		{"/.well-known/jwks.json", ""},
		{"/healthz", ""},
	} {
		get := h.send(t, http.MethodGet, tc.path, tc.key, nil)
		head := h.send(t, http.MethodHead, tc.path, tc.key, nil)
		if head.status != get.status {
			t.Errorf("HEAD %s: %d; want GET's %d", tc.path, head.status, get.status)
		}
		for _, name := range []string{"Content-Type", "Allow", "WWW-Authenticate", "RateLimit-Policy"} {
			if head.header.Get(name) != get.header.Get(name) {
				t.Errorf("HEAD %s: %s %q; want GET's %q", tc.path, name, head.header.Get(name), get.header.Get(name))
			}
		}
		if cl := head.header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(get.body)) {
			t.Errorf("HEAD %s: Content-Length %s; want the length of GET's body, %d", tc.path, cl, len(get.body))
		}
	}
}

// TestResetAsTheContractSays: {} resets the limit's global (keyless) state; a key's reset is
// idempotent, also for an inline-config limit with no state at all (204, never a 404 that would
// depend on unrelated keys).
func TestResetAsTheContractSays(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", bucket10PerMinute)
		for range 3 {
			requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/x/limit", a.key, map[string]any{}), http.StatusOK)
		}
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/x/limit", a.key, map[string]any{"key": "alice"}), http.StatusOK)
		if r := h.send(t, http.MethodPost, "/v1/limits/x/reset", a.key, map[string]any{}); r.status != http.StatusNoContent {
			t.Fatalf("reset {}: %s", r)
		}
		if v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/x/value", a.key, nil), http.StatusOK); number(t, v, "value") != 10 {
			t.Fatalf("global value after reset {} = %v, want full", v)
		}
		if v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/x/value?key=alice", a.key, nil), http.StatusOK); number(t, v, "value") > 9.5 {
			t.Fatalf("alice after reset {} = %v, want untouched (about 9, refilling slowly)", v)
		}
		// An inline-config limit: no stored definition, and at first no state for any key.
		for range 2 {
			if r := h.send(t, http.MethodPost, "/v1/limits/inline/reset", a.key, map[string]any{"key": "bob"}); r.status != http.StatusNoContent {
				t.Fatalf("reset of a key of a limit with no state: %s", r)
			}
		}
		inline := map[string]any{"key": "carol", "config": bucket10PerMinute}
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/inline/limit", a.key, inline), http.StatusOK)
		for range 2 { // with state for another key, and again once carol's is gone
			if r := h.send(t, http.MethodPost, "/v1/limits/inline/reset", a.key, map[string]any{"key": "carol"}); r.status != http.StatusNoContent {
				t.Fatalf("reset of an inline-config key: %s", r)
			}
		}
		// Explicit values that reset nothing are still mistakes.
		requireProblem(t, h.send(t, http.MethodPost, "/v1/limits/x/reset", a.key, `{"key":null}`), http.StatusBadRequest, api.CodeInvalidRequest)
		requireProblem(t, h.send(t, http.MethodPost, "/v1/limits/x/reset", a.key, `{"allKeys":false}`), http.StatusBadRequest, api.CodeInvalidRequest)
	})
}

// TestAVisitorsAddressKeyIsTheDocumentedHash: a decision on an address alone answers the key the
// README says how to compute (ip: and the first 16 bytes of SHA-256("address " + prefix), the
// /64 of an IPv6 address), and an operator who computes it reaches that visitor: a reset frees
// it, a deny override on it refuses that address and no other. (The documents said the address
// itself was the key, so a reset or an override given the address reached nobody.)
func TestAVisitorsAddressKeyIsTheDocumentedHash(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "ipl", map[string]any{"kind": "fixed window", "rate": 1, "period": 86_400_000})
		keyOf := func(prefix string) string {
			sum := sha256.Sum256([]byte("address " + prefix))
			return "ip:" + hex.EncodeToString(sum[:16])
		}
		decide := func(ip string) map[string]any {
			t.Helper()
			return requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/ipl/limit", a.key, map[string]any{"ip": ip}), http.StatusOK)
		}
		for ip, prefix := range map[string]string{"203.0.113.7": "203.0.113.7/32", "2001:db8:1:2::1": "2001:db8:1:2::/64"} {
			if d := decide(ip); d["ok"] != true || d["key"] != keyOf(prefix) {
				t.Fatalf("%s: %v, want admitted under %s", ip, d, keyOf(prefix))
			}
			if d := decide(ip); d["ok"] != false {
				t.Fatalf("%s again: %v, want refused", ip, d)
			}
			if r := h.send(t, http.MethodPost, "/v1/limits/ipl/reset", a.key, map[string]any{"key": keyOf(prefix)}); r.status != http.StatusNoContent {
				t.Fatalf("reset of %s's key: %v", ip, r)
			}
			if d := decide(ip); d["ok"] != true {
				t.Fatalf("%s after a reset of its computed key: %v, want admitted", ip, d)
			}
		}
		requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/ipl/overrides", a.key, map[string]any{"match": keyOf("203.0.113.8/32"), "action": "deny"}), http.StatusOK)
		if d := decide("203.0.113.8"); d["ok"] != false || d["override"] != keyOf("203.0.113.8/32") {
			t.Fatalf("203.0.113.8 under a deny override of its computed key: %v", d)
		}
		if d := decide("203.0.113.9"); d["ok"] != true {
			t.Fatalf("another address under that override: %v", d)
		}
	})
}

// TestBackendMayNameTheVisitorsAddress: a tenant's backend deciding for its visitors gives their
// address as "ip": alone it is the key; with an unauthorized session it is the address of the
// IP fallback (instead of the backend's own, which every visitor would share).
func TestBackendMayNameTheVisitorsAddress(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "daily", map[string]any{"kind": "fixed window", "rate": 1, "period": 86_400_000, "ipFallback": true})
		decide := func(body map[string]any) map[string]any {
			t.Helper()
			return requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/daily/limit", a.key, body), http.StatusOK)
		}
		// The address alone is the key.
		if d := decide(map[string]any{"ip": "203.0.113.7"}); d["ok"] != true {
			t.Fatalf("first from 203.0.113.7: %v", d)
		}
		if d := decide(map[string]any{"ip": "203.0.113.7"}); d["ok"] != false {
			t.Fatalf("second from 203.0.113.7: %v", d)
		}
		if d := decide(map[string]any{"ip": "203.0.113.8"}); d["ok"] != true {
			t.Fatalf("another address shares the first one's budget: %v", d)
		}
		// IPv6: one subscriber's /64 is one key.
		decide(map[string]any{"ip": "2001:db8:1:2::1"})
		if d := decide(map[string]any{"ip": "2001:db8:1:2::ffff"}); d["ok"] != false {
			t.Fatalf("same /64: %v", d)
		}
		// Unauthorized sessions fall back to the visitor's /24, not to the backend's address.
		if d := decide(map[string]any{"session": "AAAAAAAAAAAAAAAAAAAAAA", "ip": "198.51.100.1"}); d["ok"] != true {
			t.Fatalf("first session from 198.51.100.0/24: %v", d)
		}
		if d := decide(map[string]any{"session": "BBBBBBBBBBBBBBBBBBBBBB", "ip": "198.51.100.2"}); d["ok"] != false {
			t.Fatalf("a second session from the same /24: %v", d)
		}
		if d := decide(map[string]any{"session": "CCCCCCCCCCCCCCCCCCCCCC"}); d["ok"] != true {
			t.Fatalf("without ip the backend's own address is used, not the last visitor's: %v", d)
		}
		// Bad input names the member.
		for body, field := range map[string]string{
			`{"ip":"nope"}`:                    "ip",
			`{"ip":"fe80::1%eth0"}`:            "ip",
			`{"key":"alice","ip":"192.0.2.1"}`: "ip",
		} {
			if p := requireProblem(t, h.send(t, http.MethodPost, "/v1/limits/daily/limit", a.key, body), http.StatusBadRequest, api.CodeInvalidRequest); p["field"] != field {
				t.Errorf("%s: %v", body, p)
			}
		}
		batch := `{"limits":[{"name":"daily","ip":"300.1.1.1"}]}`
		if p := requireProblem(t, h.send(t, http.MethodPost, "/v1/limit", a.key, batch), http.StatusBadRequest, api.CodeInvalidRequest); p["field"] != "limits[0].ip" {
			t.Errorf("batch: %v", p)
		}
	})
}
