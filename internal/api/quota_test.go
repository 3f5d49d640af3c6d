package api_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/api"
)

// A daily quota over HTTP: its definition round-trips without a period, refusals say to retry
// at the next local midnight, and /value and the RateLimit headers point at the same instant.
func TestQuotaOverHTTP(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		def := requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/daily", a.key,
			map[string]any{"kind": "quota", "rate": 2, "calendar": "day", "timeZone": "Asia/Kolkata"}), http.StatusOK)
		if def["kind"] != "quota" || def["calendar"] != "day" || def["timeZone"] != "Asia/Kolkata" || def["period"] != nil {
			t.Fatalf("stored quota: %v", def)
		}
		for range 2 {
			requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/daily/limit", a.key, map[string]any{"key": "u"}), http.StatusOK)
		}
		before := time.Now().UnixMilli()
		r := h.send(t, http.MethodPost, "/v1/limits/daily/limit", a.key, map[string]any{"key": "u"})
		refused := requireJSON(t, r, http.StatusOK)
		v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/daily/value?key=u", a.key, nil), http.StatusOK)
		after := time.Now().UnixMilli()
		start, reset := int64(number(t, v, "windowStart")), int64(number(t, v, "resetAt"))
		loc, _ := time.LoadLocation("Asia/Kolkata")
		y, m, d := time.UnixMilli(before).In(loc).Date()
		if want := time.Date(y, m, d, 0, 0, 0, 0, loc).UnixMilli(); start != want || reset != want+86_400_000 {
			t.Fatalf("window [%d, %d), want today in Kolkata [%d, %d)", start, reset, want, want+86_400_000)
		}
		ra := int64(number(t, refused, "retryAfter"))
		if refused["ok"] != false || ra < reset-after-1000 || ra > reset-before+1000 {
			t.Fatalf("refusal %v: retryAfter %d, want the time to %d", refused, ra, reset)
		}
		if got, want := r.header.Get("RateLimit-Policy"), `"daily";q=2;w=86400`; got != want {
			t.Fatalf("RateLimit-Policy %q, want %q", got, want)
		}
		if got, want := r.header.Get("RateLimit"), fmt.Sprintf(`"daily";r=0;t=%d`, int64(math.Ceil(float64(ra)/1000))); got != want {
			t.Fatalf("RateLimit %q, want %q", got, want)
		}
		thrown := h.send(t, http.MethodPost, "/v1/limits/daily/limit", a.key, map[string]any{"key": "u", "throws": true})
		requireProblem(t, thrown, http.StatusTooManyRequests, api.CodeRateLimited)
		if s, _ := strconv.ParseInt(thrown.header.Get("Retry-After"), 10, 64); s < (reset-after)/1000 || s > (reset-before)/1000+2 {
			t.Fatalf("Retry-After %q, want the seconds to local midnight", thrown.header.Get("Retry-After"))
		}
		monthly := requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/billing", a.key,
			map[string]any{"kind": "quota", "rate": 1000, "calendar": "month", "timeZone": "America/Santiago", "anchorDay": 31}), http.StatusOK)
		if number(t, monthly, "anchorDay") != 31 {
			t.Fatalf("monthly quota: %v", monthly)
		}
		entries, err := h.tenants.AuditLog(context.Background(), a.id, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) == 0 || entries[0].Action != "limit.create" || entries[0].Target != "billing" ||
			entries[0].Detail != "quota rate=1000 calendar=month timeZone=America/Santiago anchorDay=31" {
			t.Fatalf("audit of the quota: %+v", entries)
		}
	})
}

// org > team over HTTP: a decision lists its parents' results, spends them all or nothing, and
// a batch or bulk item carries its own attributes.
func TestNestedBudgetsOverHTTP(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "org", map[string]any{"kind": "quota", "rate": 3, "calendar": "month", "timeZone": "UTC"})
		team := requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/team", a.key, map[string]any{"kind": "fixed window", "rate": 10,
			"period": 315360000000, "start": 0, "parents": []map[string]any{{"name": "org", "key": "org:{org}"}}}), http.StatusOK)
		if ps, _ := team["parents"].([]any); len(ps) != 1 {
			t.Fatalf("stored parents: %v", team)
		}
		if entries, err := h.tenants.AuditLog(context.Background(), a.id, 1); err != nil || len(entries) != 1 ||
			entries[0].Detail != `fixed window rate=10 period=315360000000 parents=org("org:{org}")` {
			t.Fatalf("audit of the team: %+v, %v", entries, err)
		}
		r := h.send(t, http.MethodPost, "/v1/limits/team/limit", a.key, map[string]any{"key": "t1", "attributes": map[string]string{"org": "acme"}})
		got := requireJSON(t, r, http.StatusOK)
		ps, _ := got["parents"].([]any)
		if len(ps) != 1 {
			t.Fatalf("decision: %v", got)
		}
		p := ps[0].(map[string]any)
		if p["name"] != "org" || p["key"] != "org:acme" || p["ok"] != true || p["remaining"] != 2.0 || p["retryAfter"] != nil {
			t.Fatalf("parent result: %v", p)
		}
		if hdr := r.header.Get("RateLimit"); !strings.Contains(hdr, `"team";r=9`) || !strings.Contains(hdr, `"org";r=2`) {
			t.Fatalf("RateLimit %q: want the team and its org", hdr)
		}
		// Two teams of one org in a batch: 2 + 1 > the org's 2 left (not its 3), so nothing is spent.
		batch := requireJSON(t, h.send(t, http.MethodPost, "/v1/limit", a.key, map[string]any{"limits": []map[string]any{
			{"name": "team", "key": "t2", "count": 2, "attributes": map[string]string{"org": "acme"}},
			{"name": "team", "key": "t3", "count": 1, "attributes": map[string]string{"org": "acme"}},
		}}), http.StatusOK)
		if batch["ok"] != false {
			t.Fatalf("batch over the org's budget: %v", batch)
		}
		if v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/org/value?key=org:acme", a.key, nil), http.StatusOK); number(t, v, "value") != 2 {
			t.Fatalf("org after a refused batch: %v", v)
		}
		// Bulk items are independent; the second finds the org spent by the first.
		bulk := requireJSON(t, h.send(t, http.MethodPost, "/v1/decisions", a.key, map[string]any{"decisions": []map[string]any{
			{"name": "team", "key": "t2", "count": 2, "attributes": map[string]string{"org": "acme"}},
			{"name": "team", "key": "t3", "count": 1, "attributes": map[string]string{"org": "acme"}},
			{"name": "team", "key": "t4", "count": 1},
		}}), http.StatusOK)
		res := bulk["results"].([]any)
		first, second, third := res[0].(map[string]any), res[1].(map[string]any), res[2].(map[string]any)
		if first["ok"] != true || second["ok"] != false || third["error"].(map[string]any)["field"] != "decisions[2].attributes.org" {
			t.Fatalf("bulk: %v", bulk)
		}
		check := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/team/check", a.key, map[string]any{"key": "t9", "attributes": map[string]string{"org": "beta"}}), http.StatusOK)
		if check["ok"] != true || len(check["parents"].([]any)) != 1 {
			t.Fatalf("check: %v", check)
		}

		// A refusal thrown as 429 names the limit that refused: the org, whose budget is spent,
		// not the team, which has room; and the team once it is the one without room.
		thrown := requireProblem(t, h.send(t, http.MethodPost, "/v1/limits/team/limit", a.key,
			map[string]any{"key": "t5", "attributes": map[string]string{"org": "acme"}, "throws": true}), http.StatusTooManyRequests, api.CodeRateLimited)
		if thrown["name"] != "org" || !strings.Contains(thrown["detail"].(string), `"org"`) {
			t.Fatalf("the team's decision refused by its spent org, thrown: %v; want it named org", thrown)
		}
		for i, org := range []string{"o1", "o2", "o3", "o4"} { // 3+3+3+1: the team key's 10, no org spent
			n := []float64{3, 3, 3, 1}[i]
			requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/team/limit", a.key, map[string]any{"key": "t7", "count": n, "attributes": map[string]string{"org": org}}), http.StatusOK)
		}
		thrown = requireProblem(t, h.send(t, http.MethodPost, "/v1/limits/team/limit", a.key,
			map[string]any{"key": "t7", "attributes": map[string]string{"org": "o5"}, "throws": true}), http.StatusTooManyRequests, api.CodeRateLimited)
		if thrown["name"] != "team" {
			t.Fatalf("the team's spent key under an org with room, thrown: %v; want it named team", thrown)
		}
	})
}

func TestQuotaAndParentInputProblemsNameTheField(t *testing.T) {
	q := func(extra string) string {
		return `{"kind":"quota","rate":5,"calendar":"month","timeZone":"Europe/Berlin"` + extra + `}`
	}
	manyAttrs := map[string]string{}
	for i := range 17 {
		manyAttrs[fmt.Sprintf("a%d", i)] = "x"
	}
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code, field        string
	}{
		{"unknown zone", "PUT", "/v1/limits/q", `{"kind":"quota","rate":5,"calendar":"day","timeZone":"Europe/Atlantis"}`, 400, api.CodeInvalidConfig, "timeZone"},
		{"the machine's zone", "PUT", "/v1/limits/q", `{"kind":"quota","rate":5,"calendar":"day","timeZone":"localtime"}`, 400, api.CodeInvalidConfig, "timeZone"},
		{"the machine's posixrules", "PUT", "/v1/limits/q", `{"kind":"quota","rate":5,"calendar":"day","timeZone":"posixrules"}`, 400, api.CodeInvalidConfig, "timeZone"},
		{"a zone as a path", "PUT", "/v1/limits/q", `{"kind":"quota","rate":5,"calendar":"day","timeZone":"./Europe/Berlin"}`, 400, api.CodeInvalidConfig, "timeZone"},
		{"a zone through ..", "PUT", "/v1/limits/q", `{"kind":"quota","rate":5,"calendar":"day","timeZone":"Europe/../Europe/Berlin"}`, 400, api.CodeInvalidConfig, "timeZone"},
		{"a zone with leap seconds", "PUT", "/v1/limits/q", `{"kind":"quota","rate":5,"calendar":"day","timeZone":"right/UTC"}`, 400, api.CodeInvalidConfig, "timeZone"},
		{"a posix/ zone", "PUT", "/v1/limits/q", `{"kind":"quota","rate":5,"calendar":"day","timeZone":"posix/Europe/Berlin"}`, 400, api.CodeInvalidConfig, "timeZone"},
		{"zone of the wrong type", "PUT", "/v1/limits/q", `{"kind":"quota","rate":5,"calendar":"day","timeZone":1}`, 400, api.CodeInvalidRequest, "timeZone"},
		{"missing zone", "PUT", "/v1/limits/q", `{"kind":"quota","rate":5,"calendar":"day"}`, 400, api.CodeInvalidConfig, "timeZone"},
		{"missing calendar", "PUT", "/v1/limits/q", `{"kind":"quota","rate":5,"timeZone":"UTC"}`, 400, api.CodeInvalidConfig, "calendar"},
		{"unknown calendar", "PUT", "/v1/limits/q", `{"kind":"quota","rate":5,"calendar":"year","timeZone":"UTC"}`, 400, api.CodeInvalidConfig, "calendar"},
		{"period on a quota", "PUT", "/v1/limits/q", q(`,"period":1000`), 400, api.CodeInvalidConfig, "period"},
		{"anchorDay 0", "PUT", "/v1/limits/q", q(`,"anchorDay":0`), 400, api.CodeInvalidConfig, "anchorDay"},
		{"anchorDay 32", "PUT", "/v1/limits/q", q(`,"anchorDay":32`), 400, api.CodeInvalidConfig, "anchorDay"},
		{"anchorDay of a daily quota", "PUT", "/v1/limits/q", `{"kind":"quota","rate":5,"calendar":"day","timeZone":"UTC","anchorDay":3}`, 400, api.CodeInvalidConfig, "anchorDay"},
		{"capacity on a quota", "PUT", "/v1/limits/q", q(`,"capacity":9`), 400, api.CodeInvalidConfig, "capacity"},
		{"calendar on a token bucket", "PUT", "/v1/limits/q", `{"kind":"token bucket","rate":5,"period":1000,"calendar":"day"}`, 400, api.CodeInvalidConfig, "calendar"},
		{"zone on a fixed window", "PUT", "/v1/limits/q", `{"kind":"fixed window","rate":5,"period":1000,"timeZone":"UTC"}`, 400, api.CodeInvalidConfig, "timeZone"},
		{"reserve on a quota", "POST", "/v1/limits/quota/limit", `{"key":"k","reserve":true}`, 400, api.CodeInvalidRequest, "reserve"},
		{"bad quota inline", "POST", "/v1/limits/adhoc/limit", `{"config":{"kind":"quota","rate":5,"calendar":"day","timeZone":"Nowhere/Else"}}`, 400, api.CodeInvalidConfig, "config.timeZone"},
		{"parents not a list", "PUT", "/v1/limits/c", `{"kind":"token bucket","rate":5,"period":1000,"parents":"org"}`, 400, api.CodeInvalidRequest, "parents"},
		{"parent without a name", "PUT", "/v1/limits/c", `{"kind":"token bucket","rate":5,"period":1000,"parents":[{"key":"k"}]}`, 400, api.CodeInvalidConfig, "parents[0].name"},
		{"parent with an unknown member", "PUT", "/v1/limits/c", `{"kind":"token bucket","rate":5,"period":1000,"parents":[{"name":"p","key":"k","weight":2}]}`, 400, api.CodeInvalidRequest, "parents[0].weight"},
		{"parent key template unclosed", "PUT", "/v1/limits/c", `{"kind":"token bucket","rate":5,"period":1000,"parents":[{"name":"p","key":"org:{org"}]}`, 400, api.CodeInvalidConfig, "parents[0].key"},
		{"parent key template reserved", "PUT", "/v1/limits/c", `{"kind":"token bucket","rate":5,"period":1000,"parents":[{"name":"p","key":"session:{org}"}]}`, 400, api.CodeInvalidConfig, "parents[0].key"},
		{"parent key empty", "PUT", "/v1/limits/c", `{"kind":"token bucket","rate":5,"period":1000,"parents":[{"name":"p","key":""}]}`, 400, api.CodeInvalidConfig, "parents[0].key"},
		{"nine parents", "PUT", "/v1/limits/c", map[string]any{"kind": "token bucket", "rate": 5, "period": 1000, "parents": nineParents()}, 400, api.CodeInvalidConfig, "parents"},
		{"a limit its own parent", "PUT", "/v1/limits/c", `{"kind":"token bucket","rate":5,"period":1000,"parents":[{"name":"c","key":"k"}]}`, 400, api.CodeInvalidConfig, "parents"},
		{"a cycle", "PUT", "/v1/limits/org", `{"kind":"token bucket","rate":5,"period":1000,"parents":[{"name":"child","key":"k"}]}`, 400, api.CodeInvalidConfig, "parents"},
		{"a fifth generation", "PUT", "/v1/limits/g4", `{"kind":"token bucket","rate":5,"period":1000,"parents":[{"name":"g5","key":"k"}]}`, 400, api.CodeInvalidConfig, "parents"},
		{"inline config with parents", "POST", "/v1/limits/adhoc/limit", `{"config":{"kind":"token bucket","rate":5,"period":1000,"parents":[{"name":"org","key":"k"}]}}`, 400, api.CodeInvalidConfig, "config.parents"},
		{"missing attribute", "POST", "/v1/limits/child/limit", `{"key":"k","attributes":{"team":"x"}}`, 400, api.CodeInvalidRequest, "attributes.org"},
		{"no attributes", "POST", "/v1/limits/child/check", `{"key":"k"}`, 400, api.CodeInvalidRequest, "attributes.org"},
		{"missing attribute in a batch", "POST", "/v1/limit", `{"limits":[{"name":"child","key":"k"}]}`, 400, api.CodeInvalidRequest, "limits[0].attributes.org"},
		{"empty attribute", "POST", "/v1/limits/child/limit", `{"key":"k","attributes":{"org":""}}`, 400, api.CodeInvalidRequest, "attributes.org"},
		{"attribute of the wrong type", "POST", "/v1/limits/child/limit", `{"key":"k","attributes":{"org":7}}`, 400, api.CodeInvalidRequest, "attributes.org"},
		{"attributes not an object", "POST", "/v1/limits/child/limit", `{"key":"k","attributes":["org"]}`, 400, api.CodeInvalidRequest, "attributes"},
		{"bad attribute name in a batch", "POST", "/v1/check", `{"limits":[{"name":"child","key":"k","attributes":{"o-rg":"x"}}]}`, 400, api.CodeInvalidRequest, "limits[0].attributes"},
		{"too many attributes", "POST", "/v1/limits/child/limit", map[string]any{"key": "k", "attributes": manyAttrs}, 400, api.CodeInvalidRequest, "attributes"},
		{"overlong filled key", "POST", "/v1/limits/child/limit", map[string]any{"key": "k", "attributes": map[string]string{"org": strings.Repeat("x", 256)}}, 400, api.CodeInvalidRequest, "attributes"},
		{"filled key reserved", "POST", "/v1/limits/open/limit", `{"key":"k","attributes":{"org":"session:0123456789abcdef0123456789abcdef"}}`, 400, api.CodeInvalidRequest, "attributes"},
		{"filled key reserved in a check", "POST", "/v1/limits/open/check", `{"key":"k","attributes":{"org":"ip:0123456789abcdef"}}`, 400, api.CodeInvalidRequest, "attributes"},
		{"parent missing at decision time", "POST", "/v1/limits/orphan/limit", `{"key":"k"}`, 404, api.CodeLimitNotFound, ""},
	}
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "quota", map[string]any{"kind": "quota", "rate": 5, "calendar": "week", "timeZone": "UTC"})
		h.define(t, a.key, "org", bucket10PerMinute)
		h.define(t, a.key, "child", map[string]any{"kind": "token bucket", "rate": 5, "period": 1000, "parents": []map[string]any{{"name": "org", "key": "org:{org}"}}})
		h.define(t, a.key, "open", map[string]any{"kind": "token bucket", "rate": 5, "period": 1000, "parents": []map[string]any{{"name": "org", "key": "{org}"}}})
		h.define(t, a.key, "orphan", map[string]any{"kind": "token bucket", "rate": 5, "period": 1000, "parents": []map[string]any{{"name": "gone", "key": "all"}}})
		for i := 4; i >= 1; i-- {
			def := map[string]any{"kind": "token bucket", "rate": 5, "period": 1000}
			if i < 4 {
				def["parents"] = []map[string]any{{"name": fmt.Sprintf("g%d", i+1), "key": "k"}}
			}
			h.define(t, a.key, fmt.Sprintf("g%d", i), def)
		}
		h.define(t, a.key, "g0", map[string]any{"kind": "token bucket", "rate": 5, "period": 1000, "parents": []map[string]any{{"name": "g1", "key": "k"}}})
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				p := requireProblem(t, h.send(t, tc.method, tc.path, a.key, tc.body), tc.status, tc.code)
				if got, _ := p["field"].(string); got != tc.field {
					t.Fatalf("field = %q, want %q: %v", got, tc.field, p)
				}
				if tc.status == 404 && !strings.Contains(p["detail"].(string), `"gone"`) {
					t.Fatalf("the problem does not name the missing parent: %v", p)
				}
			})
		}
		// Nothing refused was stored or spent.
		if v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/org/value?key=org:x", a.key, nil), http.StatusOK); number(t, v, "value") != 10 {
			t.Fatalf("org spent by refused requests: %v", v)
		}
		if d := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/org", a.key, nil), http.StatusOK); d["parents"] != nil {
			t.Fatalf("a refused cycle was stored: %v", d)
		}
	})
}

// A quota stored by an earlier version, which asked the machine's zone files, may name a zone
// the binary's zone data lacks ("localtime"). Deciding it in UTC or any other zone would start its
// windows elsewhere than instances that still know the zone, and admit it twice: its decisions,
// checks and refunds are refused with the 400 that names timeZone until it is replaced.
func TestAQuotaStoredInAZoneTheBinaryLacksDecidesNothing(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "legacy", map[string]any{"kind": "quota", "rate": 5, "calendar": "day", "timeZone": "UTC"})
		h.define(t, a.key, "team", map[string]any{"kind": "token bucket", "rate": 5, "period": 1000,
			"parents": []map[string]any{{"name": "legacy", "key": "all"}}})
		if err := h.db.Gorm.Exec("UPDATE limit_definitions SET time_zone = 'localtime' WHERE tenant_id = ? AND name = 'legacy'", a.id).Error; err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ path, body, field string }{
			{"/v1/limits/legacy/limit", `{"key":"k"}`, "timeZone"},
			{"/v1/limits/legacy/check", `{"key":"k"}`, "timeZone"},
			{"/v1/limits/legacy/refund", `{"key":"k","count":1}`, "timeZone"},
			{"/v1/limit", `{"limits":[{"name":"legacy","key":"k"}]}`, "limits[0].timeZone"},
			{"/v1/limits/team/limit", `{"key":"k"}`, "timeZone"},
		} {
			p := requireProblem(t, h.send(t, http.MethodPost, tc.path, a.key, tc.body), http.StatusBadRequest, api.CodeInvalidConfig)
			if p["field"] != tc.field || !strings.Contains(p["detail"].(string), `"localtime"`) {
				t.Fatalf("POST %s: %v, want the problem of timeZone naming the zone", tc.path, p)
			}
		}
		if v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/team/value?key=k", a.key, nil), http.StatusOK); number(t, v, "value") != 5 {
			t.Fatalf("the refused family spent its child: %v", v)
		}
		// Its value is not read in UTC's window either: the window has no end.
		v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/legacy/value?key=k", a.key, nil), http.StatusOK)
		if reset := number(t, v, "resetAt"); reset < math.MaxInt64/2 {
			t.Fatalf("value of the legacy quota: %v, want a window without end", v)
		}
		// Replaced with a zone of the binary, it decides again.
		h.define(t, a.key, "legacy", map[string]any{"kind": "quota", "rate": 5, "calendar": "day", "timeZone": "Europe/Berlin"})
		if d := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/legacy/limit", a.key, map[string]any{"key": "k"}), http.StatusOK); d["ok"] != true {
			t.Fatalf("decision after the zone was replaced: %v", d)
		}
	})
}

func nineParents() []map[string]any {
	out := make([]map[string]any, 9)
	for i := range out {
		out[i] = map[string]any{"name": fmt.Sprintf("p%d", i), "key": "k"}
	}
	return out
}

// TestAShadowParentReportsItsWouldBeRefusalOverHTTP: a parent in shadow mode is named in the
// decision with its shadow outcome, and never refuses the family.
func TestAShadowParentReportsItsWouldBeRefusalOverHTTP(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "org", map[string]any{"kind": "fixed window", "rate": 1, "period": 3600000, "mode": "shadow"})
		h.define(t, a.key, "team", map[string]any{"kind": "fixed window", "rate": 10, "period": 3600000,
			"parents": []map[string]any{{"name": "org", "key": "org:{org}"}}})
		var last map[string]any
		for range 2 {
			last = requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/team/limit", a.key,
				map[string]any{"key": "t1", "attributes": map[string]string{"org": "acme"}}), http.StatusOK)
		}
		p := last["parents"].([]any)[0].(map[string]any)
		shadow, _ := p["shadow"].(map[string]any)
		if last["ok"] != true || p["ok"] != true || shadow == nil || shadow["ok"] != false || shadow["retryAfter"] == nil {
			t.Fatalf("second decision under a shadow parent of 1: %v", last)
		}
	})
}
