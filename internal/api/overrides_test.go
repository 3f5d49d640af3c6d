package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/tenants"
)

func TestOverridesOverHTTP(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "api", frozenWindow) // 10 per window, never refilled during the test
		put := func(body map[string]any) map[string]any {
			t.Helper()
			return requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/api/overrides", a.key, body), http.StatusOK)
		}
		o := put(map[string]any{"match": "org:acme:*", "capacity": 3})
		if o["match"] != "org:acme:*" || number(t, o, "capacity") != 3 || o["expiresAt"] != nil || o["action"] != nil {
			t.Fatalf("created override = %v", o)
		}
		put(map[string]any{"match": "org:*", "capacity": 5})
		until := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
		denied := put(map[string]any{"match": "org:acme:bad", "action": "deny", "expiresAt": until.Format(time.RFC3339Nano)})
		if denied["action"] != "deny" || denied["expiresAt"] != until.Format(time.RFC3339Nano) {
			t.Fatalf("deny override = %v", denied)
		}
		// RFC 3339 allows a lower-case "t" and "z"; the answer writes them as it always does.
		lower := strings.ToLower(until.Format(time.RFC3339Nano))
		if again := put(map[string]any{"match": "org:acme:bad", "action": "deny", "expiresAt": lower}); again["expiresAt"] != until.Format(time.RFC3339Nano) {
			t.Fatalf("deny override with expiresAt %s = %v", lower, again)
		}
		put(map[string]any{"match": "vip", "action": "allow"})

		limit := func(key string) map[string]any {
			t.Helper()
			return requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/api/limit", a.key, map[string]any{"key": key}), http.StatusOK)
		}
		// Exact beats the longest prefix, which beats a shorter one; the response names it.
		for key, want := range map[string]struct {
			override string
			admits   int
		}{"org:acme:1": {"org:acme:*", 3}, "org:other": {"org:*", 5}, "user:1": {"", 10}} {
			admitted := 0
			for range 12 {
				d := limit(key)
				if got, _ := d["override"].(string); got != want.override {
					t.Fatalf("%s: override %v, want %q", key, d["override"], want.override)
				}
				if d["ok"] == true {
					admitted++
				}
			}
			if admitted != want.admits {
				t.Errorf("%s admitted %d, want %d", key, admitted, want.admits)
			}
		}
		d := limit("org:acme:bad")
		ra := number(t, d, "retryAfter")
		if d["ok"] != false || d["override"] != "org:acme:bad" || ra > float64(time.Hour.Milliseconds()) || ra < float64(time.Hour.Milliseconds()-60_000) {
			t.Fatalf("deny until expiry: %v", d)
		}
		thrown := h.send(t, http.MethodPost, "/v1/limits/api/limit", a.key, map[string]any{"key": "org:acme:bad", "throws": true})
		requireProblem(t, thrown, http.StatusTooManyRequests, api.CodeRateLimited)
		for range 12 {
			if d := limit("vip"); d["ok"] != true || d["override"] != "vip" || number(t, d, "remaining") != 10 {
				t.Fatalf("allow: %v", d)
			}
		}
		// /check, /v1/limit and /v1/decisions name it too.
		c := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/api/check", a.key, map[string]any{"key": "vip"}), http.StatusOK)
		if c["override"] != "vip" {
			t.Fatalf("check: %v", c)
		}
		b := requireJSON(t, h.send(t, http.MethodPost, "/v1/limit", a.key, map[string]any{"limits": []any{
			map[string]any{"name": "api", "key": "vip"}, map[string]any{"name": "api", "key": "org:acme:bad"}}}), http.StatusOK)
		results := b["results"].([]any)
		if b["ok"] != false || results[0].(map[string]any)["override"] != "vip" || results[1].(map[string]any)["override"] != "org:acme:bad" {
			t.Fatalf("batch: %v", b)
		}
		bulk := requireJSON(t, h.send(t, http.MethodPost, "/v1/decisions", a.key, map[string]any{"decisions": []any{
			map[string]any{"name": "api", "key": "org:zz"}, map[string]any{"name": "api", "key": "nobody"}}}), http.StatusOK)
		br := bulk["results"].([]any)
		if br[0].(map[string]any)["override"] != "org:*" || br[1].(map[string]any)["override"] != nil {
			t.Fatalf("bulk: %v", bulk)
		}

		// The value of a key reads under its override too.
		v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/api/value?key=org:acme:1", a.key, nil), http.StatusOK)
		if v["override"] != "org:acme:*" || number(t, v["config"].(map[string]any), "capacity") != 3 || number(t, v, "value") != 0 {
			t.Fatalf("value under an override: %v", v)
		}
		// Paged list, in match order.
		page := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/api/overrides?limit=3", a.key, nil), http.StatusOK)
		items := page["overrides"].([]any)
		if len(items) != 3 || items[0].(map[string]any)["match"] != "org:*" || page["next"] != "org:acme:bad" {
			t.Fatalf("first page: %v", page)
		}
		page = requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/api/overrides?limit=3&after="+url.QueryEscape(page["next"].(string)), a.key, nil), http.StatusOK)
		if items = page["overrides"].([]any); len(items) != 1 || items[0].(map[string]any)["match"] != "vip" || page["next"] != nil {
			t.Fatalf("last page: %v", page)
		}
		// An after that no page gives (PostgreSQL cannot even compare a NUL byte) is the caller's error.
		for _, after := range []string{"%00", "%FF", "a%2Ab%2A"} {
			p := requireProblem(t, h.send(t, http.MethodGet, "/v1/limits/api/overrides?after="+after, a.key, nil), http.StatusBadRequest, "invalid_request")
			if p["field"] != "after" {
				t.Fatalf("after=%s: %v, want field after", after, p)
			}
		}

		// Delete; the key is back to the definition at once.
		del := h.send(t, http.MethodDelete, "/v1/limits/api/overrides?match="+url.QueryEscape("org:acme:*"), a.key, nil)
		if del.status != http.StatusNoContent {
			t.Fatalf("delete: %s", del)
		}
		if d := limit("org:acme:2"); d["override"] != "org:*" {
			t.Fatalf("after the delete: %v", d)
		}
		requireProblem(t, h.send(t, http.MethodDelete, "/v1/limits/api/overrides?match="+url.QueryEscape("org:acme:*"), a.key, nil), http.StatusNotFound, api.CodeNotFound)

		// Audited, as definition changes are.
		entries, err := h.tenants.AuditLog(context.Background(), a.id, 50)
		if err != nil {
			t.Fatal(err)
		}
		var actions []string
		for _, e := range entries {
			if strings.HasPrefix(e.Action, "override.") {
				actions = append(actions, e.Action+" "+e.Target+" "+e.Detail)
			}
		}
		joined := strings.Join(actions, "\n")
		for _, want := range []string{`override.create api override "org:acme:*" capacity=3`, `override.create api override "vip" action=allow`, `override.delete api override "org:acme:*"`} {
			if !strings.Contains(joined, want) {
				t.Errorf("audit log lacks %q:\n%s", want, joined)
			}
		}
		// Replacing is an update, recorded with the override before and after.
		put(map[string]any{"match": "vip", "rate": 100})
		if entries, _ = h.tenants.AuditLog(context.Background(), a.id, 1); len(entries) != 1 || entries[0].Action != "override.update" ||
			entries[0].Detail != "action=allow → rate=100" {
			t.Fatalf("latest audit entry: %+v", entries)
		}

		// Deleting the limit deletes its overrides: its entry says what was deleted and counts them.
		overrides := len(requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/api/overrides", a.key, nil), http.StatusOK)["overrides"].([]any))
		if r := h.send(t, http.MethodDelete, "/v1/limits/api", a.key, nil); r.status != http.StatusNoContent || overrides < 2 {
			t.Fatalf("DELETE of a limit with %d overrides: %v", overrides, r)
		}
		want := fmt.Sprintf("fixed window rate=10 period=%d; its %d override(s) deleted with it", frozenWindow["period"], overrides)
		if entries, _ = h.tenants.AuditLog(context.Background(), a.id, 1); len(entries) != 1 || entries[0].Action != "limit.delete" || entries[0].Detail != want {
			t.Fatalf("the deletion's audit entry: %+v, want detail %q", entries, want)
		}
	})
}

func TestOverrideBadInputIsA400NamingTheFieldOrA404(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		other := h.newTenant(t, "other")
		h.define(t, a.key, "api", bucket10PerMinute)
		h.define(t, a.key, "sliding", map[string]any{"kind": "sliding window", "rate": 10, "period": 60000})
		path := "/v1/limits/api/overrides"
		for _, c := range []struct {
			body        any
			code, field string
		}{
			{map[string]any{"match": "a**", "rate": 1}, api.CodeInvalidRequest, "match"},
			{map[string]any{"match": "*a", "rate": 1}, api.CodeInvalidRequest, "match"},
			{map[string]any{"match": "a*b", "rate": 1}, api.CodeInvalidRequest, "match"},
			{map[string]any{"match": strings.Repeat("k", 257), "rate": 1}, api.CodeInvalidRequest, "match"},
			{map[string]any{"rate": 1}, api.CodeInvalidRequest, "match"},
			{map[string]any{"match": 5, "rate": 1}, api.CodeInvalidRequest, "match"},
			{map[string]any{"match": "k"}, api.CodeInvalidRequest, "action"},
			{map[string]any{"match": "k", "action": "block"}, api.CodeInvalidRequest, "action"},
			{map[string]any{"match": "k", "action": ""}, api.CodeInvalidRequest, "action"},
			{map[string]any{"match": "k", "action": "deny", "capacity": 3}, api.CodeInvalidRequest, "action"},
			{map[string]any{"match": "k", "action": "deny", "expiresAt": "tomorrow"}, api.CodeInvalidRequest, "expiresAt"},
			{map[string]any{"match": "k", "action": "deny", "expiresAt": "2001-01-01T00:00:00Z"}, api.CodeInvalidRequest, "expiresAt"},
			// Not RFC 3339, though Go's time.Parse takes them: a one-digit hour, a comma before
			// the fraction, an offset's hour past 23 or minute past 59.
			{map[string]any{"match": "k", "action": "deny", "expiresAt": "2030-01-01T00:00:00+00:60"}, api.CodeInvalidRequest, "expiresAt"},
			{map[string]any{"match": "k", "action": "deny", "expiresAt": "2030-01-01T00:00:00+24:00"}, api.CodeInvalidRequest, "expiresAt"},
			{map[string]any{"match": "k", "action": "deny", "expiresAt": "2030-01-01T00:00:00-24:59"}, api.CodeInvalidRequest, "expiresAt"},
			{map[string]any{"match": "k", "action": "deny", "expiresAt": "2030-01-01T5:00:00Z"}, api.CodeInvalidRequest, "expiresAt"},
			{map[string]any{"match": "k", "action": "deny", "expiresAt": "2030-01-01T05:00:00,5Z"}, api.CodeInvalidRequest, "expiresAt"},
			// The year 9999 where it was written, 10000 in UTC, as it would be answered.
			{map[string]any{"match": "k", "action": "deny", "expiresAt": "9999-12-31T23:59:59-01:00"}, api.CodeInvalidRequest, "expiresAt"},
			{map[string]any{"match": "k", "rate": 0}, api.CodeInvalidConfig, "rate"},
			{map[string]any{"match": "k", "capacity": -1}, api.CodeInvalidConfig, "capacity"},
			{map[string]any{"match": "k", "maxReserved": -1}, api.CodeInvalidConfig, "maxReserved"},
			{map[string]any{"match": "k", "rate": 1, "period": 5}, api.CodeInvalidRequest, "period"},
			{`{"match":"k","rate":1,"rate":2}`, api.CodeInvalidRequest, "rate"},
		} {
			p := requireProblem(t, h.send(t, http.MethodPut, path, a.key, c.body), http.StatusBadRequest, c.code)
			if p["field"] != c.field {
				t.Errorf("%v: field %v, want %s", c.body, p["field"], c.field)
			}
		}
		p := requireProblem(t, h.send(t, http.MethodPut, "/v1/limits/sliding/overrides", a.key, map[string]any{"match": "k", "capacity": 3}), http.StatusBadRequest, api.CodeInvalidConfig)
		if p["field"] != "capacity" {
			t.Errorf("capacity on a sliding window: %v", p)
		}
		// Limits that do not exist (or belong to another tenant) are 404 on every route.
		for _, key := range []string{a.key, other.key} {
			name := "nope"
			if key == other.key {
				name = "api"
			}
			requireProblem(t, h.send(t, http.MethodPut, "/v1/limits/"+name+"/overrides", key, map[string]any{"match": "k", "rate": 1}), http.StatusNotFound, api.CodeLimitNotFound)
			requireProblem(t, h.send(t, http.MethodGet, "/v1/limits/"+name+"/overrides", key, nil), http.StatusNotFound, api.CodeLimitNotFound)
			requireProblem(t, h.send(t, http.MethodDelete, "/v1/limits/"+name+"/overrides?match=k", key, nil), http.StatusNotFound, api.CodeLimitNotFound)
		}
		requireProblem(t, h.send(t, http.MethodPut, "/v1/limits/bad%20name/overrides", a.key, map[string]any{"match": "k", "rate": 1}), http.StatusNotFound, api.CodeLimitNotFound)
		for _, q := range []string{"", "?match=" + url.QueryEscape("a*b")} {
			p := requireProblem(t, h.send(t, http.MethodDelete, path+q, a.key, nil), http.StatusBadRequest, api.CodeInvalidRequest)
			if p["field"] != "match" {
				t.Errorf("delete %q: %v", q, p)
			}
		}
		for _, q := range []string{"?limit=0", "?limit=1001", "?limit=x", "?limit=", "?limit=%2B5"} {
			p := requireProblem(t, h.send(t, http.MethodGet, path+q, a.key, nil), http.StatusBadRequest, api.CodeInvalidRequest)
			if p["field"] != "limit" {
				t.Errorf("list %q: %v", q, p)
			}
		}
		requireProblem(t, h.send(t, http.MethodGet, path, "", nil), http.StatusUnauthorized, api.CodeUnauthorized)
		_, pk, err := h.tenants.CreateKey(context.Background(), a.id, tenants.KindPublishable, "widget", "test")
		if err != nil {
			t.Fatal(err)
		}
		requireProblem(t, h.send(t, http.MethodPut, path, pk, map[string]any{"match": "k", "action": "allow"}), http.StatusForbidden, api.CodeForbidden)
		requireProblem(t, h.send(t, http.MethodGet, path, pk, nil), http.StatusForbidden, api.CodeForbidden)
		requireProblem(t, h.send(t, http.MethodDelete, path+"?match=k", pk, nil), http.StatusForbidden, api.CodeForbidden)
		requireProblem(t, h.send(t, http.MethodPut, path, a.key, `{"match":"`+strings.Repeat("k", api.MaxBodyBytes)+`"}`), http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge)
		requireProblem(t, h.send(t, http.MethodPost, path, a.key, map[string]any{}), http.StatusMethodNotAllowed, api.CodeMethodNotAllowed)
		empty := h.send(t, http.MethodGet, path, a.key, nil)
		if requireJSON(t, empty, http.StatusOK); strings.TrimSpace(string(empty.body)) != `{"overrides":[],"next":null}` {
			t.Fatalf("empty list: %s", empty.body)
		}
	})
}
