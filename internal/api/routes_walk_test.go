package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/webhooks"
)

// publicRoutes are the only /v1 routes that answer without an API key. A new public route must
// be listed here on purpose, or TestEveryNonPublicRouteRequiresAKey fails.
var publicRoutes = map[string]bool{
	"GET /v1/openapi.json": true,
	// the captcha widget fetches challenges with a publishable key in the query, from browsers
	"GET /v1/captcha/challenge":     true,
	"OPTIONS /v1/captcha/challenge": true, // CORS preflight
}

// apiRoutes are the /v1 routes registered on the engine, in registration order.
func apiRoutes(t testing.TB, r *gin.Engine) []gin.RouteInfo {
	t.Helper()
	var out []gin.RouteInfo
	for _, ri := range r.Routes() {
		if api.IsAPIPath(ri.Path) {
			out = append(out, ri)
		}
	}
	if len(out) < 11 {
		t.Fatalf("only %d /v1 routes registered: %v", len(out), out)
	}
	return out
}

// concrete substitutes every path parameter (":p" or "*p") of a gin route with value, or with
// ids[p] for the parameters ids names.
func concrete(route, value string, ids map[string]string) string {
	parts := strings.Split(route, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, ":") || strings.HasPrefix(p, "*") {
			v, ok := ids[p[1:]]
			if !ok {
				v = value
			}
			parts[i] = url.PathEscape(v)
		}
	}
	return strings.Join(parts, "/")
}

// validRequest is a well-formed request for a route that names limit name (and the objects of
// ids: a webhook endpoint's "id", a delivery's "deliveryId"), so that the only reason for a
// refusal is whose they are. Routes this table does not know get "{}".
func validRequest(ri gin.RouteInfo, name string, ids map[string]string) (path string, body any) {
	path = concrete(ri.Path, name, ids)
	switch ri.Method + " " + ri.Path {
	case "PUT /v1/limits/:name":
		return path, bucket10PerMinute
	case "POST /v1/limits/:name/limit", "POST /v1/limits/:name/check":
		return path, map[string]any{"key": "alice"}
	case "POST /v1/limits/:name/refund":
		return path, map[string]any{"key": "alice", "count": 1}
	case "POST /v1/limits/:name/reset":
		return path, map[string]any{"allKeys": true}
	case "GET /v1/limits/:name/value":
		return path + "?key=alice", nil
	case "PUT /v1/limits/:name/overrides":
		return path, map[string]any{"match": "alice", "action": "deny"}
	case "DELETE /v1/limits/:name/overrides":
		return path + "?match=alice", nil
	case "POST /v1/limit", "POST /v1/check":
		return path, map[string]any{"limits": []any{map[string]any{"name": name, "key": "alice"}}}
	case "POST /v1/sessions/authorize":
		return path, map[string]any{"sessionId": "0123456789abcdef0123", "payload": "e30"}
	}
	if ri.Method == http.MethodGet || ri.Method == http.MethodDelete {
		return path, nil
	}
	return path, "{}"
}

// normalized is a response body with what legitimately differs between two requests removed:
// the request ID, timestamps, and the limit name asked about.
func normalized(t testing.TB, r response, name, placeholder string) string {
	t.Helper()
	if len(r.body) == 0 {
		return ""
	}
	var v any
	if err := json.Unmarshal([]byte(strings.ReplaceAll(string(r.body), name, placeholder)), &v); err != nil {
		return strings.ReplaceAll(string(r.body), name, placeholder)
	}
	if m, ok := v.(map[string]any); ok {
		for _, f := range []string{"requestId", "createdAt", "updatedAt"} {
			delete(m, f)
		}
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func TestTenantCannotReadChangeConsumeResetOrDetectAnotherTenantsLimits(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "alpha")
		b := h.newTenant(t, "bravo")
		const bName = "bravo-secret"
		h.define(t, b.key, bName, frozenWindow)
		h.define(t, b.key, "bravo-untouched", frozenWindow)
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/"+bName+"/limit", b.key, map[string]any{"key": "alice", "count": 3}), http.StatusOK)

		snapshot := func() []string {
			t.Helper()
			out := []string{string(requireJSONBody(t, h.send(t, http.MethodGet, "/v1/limits", b.key, nil)))}
			for _, n := range []string{bName, "bravo-untouched"} {
				for _, q := range []string{"", "?key=alice"} {
					out = append(out, string(requireJSONBody(t, h.send(t, http.MethodGet, "/v1/limits/"+n+"/value"+q, b.key, nil))))
				}
			}
			return out
		}
		// B's webhook endpoint, with a delivery queued: A must not reach either by its id.
		bHook, _, err := h.app.Webhooks.CreateEndpoint(context.Background(), b.id, "https://hooks.example.com/bravo", webhooks.Events)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.app.Webhooks.SendTest(context.Background(), b.id, bHook.ID); err != nil {
			t.Fatal(err)
		}
		bDeliveries, err := h.app.Webhooks.Deliveries(context.Background(), b.id, bHook.ID, 1)
		if err != nil || len(bDeliveries) != 1 {
			t.Fatalf("B's deliveries: %v, %v", bDeliveries, err)
		}
		// Not due for a day: the app's dispatcher runs, and attempting it meanwhile would change
		// the state compared below (a resend by A would make it due now).
		if err := h.db.Gorm.Exec("UPDATE webhook_deliveries SET next_attempt_at = next_attempt_at + 86400000 WHERE id = ?", bDeliveries[0].ID).Error; err != nil {
			t.Fatal(err)
		}
		bIDs := map[string]string{"id": strconv.FormatInt(bHook.ID, 10), "deliveryId": bDeliveries[0].ID}
		ghostIDs := map[string]string{"id": strconv.FormatInt(bHook.ID+1000, 10), "deliveryId": "msg_never-sent"}
		webhookState := func() []string {
			return []string{
				string(requireJSONBody(t, h.send(t, http.MethodGet, "/v1/webhooks", b.key, nil))),
				string(requireJSONBody(t, h.send(t, http.MethodGet, "/v1/webhooks/"+bIDs["id"]+"/deliveries", b.key, nil))),
			}
		}
		before := append(snapshot(), webhookState()...)
		if !strings.Contains(before[2], `"value":7,`) {
			t.Fatalf("B's value of alice before the walk = %s, want 7", before[2])
		}

		routes := apiRoutes(t, h.router)
		// A's PUT of a definition under B's name creates A's own; run it last so that every other
		// route still meets a name A does not have.
		createsDefinition := func(r gin.RouteInfo) bool { return r.Method == http.MethodPut && r.Path == "/v1/limits/:name" }
		slices.SortStableFunc(routes, func(x, y gin.RouteInfo) int {
			return boolInt(createsDefinition(x)) - boolInt(createsDefinition(y))
		})
		for i, ri := range routes {
			if publicRoutes[ri.Method+" "+ri.Path] {
				continue
			}
			ghost := "ghost-" + strconv.Itoa(i) + "-never-defined"
			path, body := validRequest(ri, bName, bIDs)
			gotB := h.send(t, ri.Method, path, a.key, body)
			path, body = validRequest(ri, ghost, ghostIDs)
			gotGhost := h.send(t, ri.Method, path, a.key, body)

			route := ri.Method + " " + ri.Path
			if gotB.status != gotGhost.status || normalized(t, gotB, bName, "NAME") != normalized(t, gotGhost, ghost, "NAME") {
				t.Errorf("%s: B's name is distinguishable from a name that does not exist:\n  B's:  %s\n  none: %s", route, gotB, gotGhost)
			}
			if strings.Contains(string(gotB.body), "bravo-untouched") {
				t.Errorf("%s: response reveals another of B's limits: %s", route, gotB)
			}
			switch {
			case route == "GET /v1/limits":
				list := requireJSON(t, gotB, http.StatusOK)
				if n := len(list["limits"].([]any)); n != 0 {
					t.Errorf("A lists %d limits, all of them B's: %s", n, gotB)
				}
			case route == "GET /v1/webhooks":
				if list := requireJSON(t, gotB, http.StatusOK); len(list["webhooks"].([]any)) != 0 {
					t.Errorf("A lists webhooks it did not create: %s", gotB)
				}
			case strings.HasPrefix(ri.Path, "/v1/webhooks/:id"):
				requireProblem(t, gotB, http.StatusNotFound, "not_found")
			case route == "PUT /v1/limits/:name":
				// A may own a limit of the same name; it is A's, and B's is untouched (checked below).
				if def := requireJSON(t, gotB, http.StatusOK); def["kind"] != "token bucket" {
					t.Errorf("A's PUT = %v", def)
				}
			case strings.Contains(ri.Path, ":name"), route == "POST /v1/limit", route == "POST /v1/check":
				requireProblem(t, gotB, http.StatusNotFound, api.CodeLimitNotFound)
			default:
				// A route this test does not know yet: at least it must not succeed on B's name.
				if gotB.status < 300 {
					t.Errorf("%s with B's name answered %s", route, gotB)
				}
			}
		}

		if after := append(snapshot(), webhookState()...); !reflect.DeepEqual(before, after) {
			t.Fatalf("B's state changed while A walked every route:\nbefore %q\nafter  %q", before, after)
		}
		// and A's same-named limit is A's alone
		mine := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/"+bName, a.key, nil), http.StatusOK)
		theirs := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/"+bName, b.key, nil), http.StatusOK)
		if mine["kind"] != "token bucket" || theirs["kind"] != "fixed window" {
			t.Fatalf("A's %v, B's %v", mine, theirs)
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func requireJSONBody(t testing.TB, r response) []byte {
	t.Helper()
	requireJSON(t, r, http.StatusOK)
	return r.body
}

func TestEveryNonPublicRouteRequiresAKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteURL(t))
	a := h.newTenant(t, "acme")
	h.define(t, a.key, "x", bucket10PerMinute)
	seen := map[string]bool{}
	for _, ri := range apiRoutes(t, h.router) {
		route := ri.Method + " " + ri.Path
		seen[route] = true
		path, body := validRequest(ri, "x", nil)
		r := h.send(t, ri.Method, path, "", body)
		if publicRoutes[route] {
			// public: an API key makes no difference (the route may check credentials of its own,
			// such as the publishable key of the captcha challenge)
			withKey := h.send(t, ri.Method, path, a.key, body)
			if withKey.status != r.status || (r.status == http.StatusUnauthorized && withKey.status == http.StatusUnauthorized &&
				problemOf(t, r)["detail"] != problemOf(t, withKey)["detail"]) {
				t.Errorf("%s is listed as public but needs the API key: without %s, with %s", route, r, withKey)
			}
			continue
		}
		requireProblem(t, r, http.StatusUnauthorized, api.CodeUnauthorized)
		// the same request with the key is accepted or refused for another reason: the 401 above
		// came from the missing key, not from the request
		if r := h.send(t, ri.Method, path, a.key, body); r.status == http.StatusUnauthorized {
			t.Errorf("%s with a valid key: %s", route, r)
		}
	}
	for route := range publicRoutes {
		if !seen[route] {
			t.Errorf("public route %s is not registered; remove it from publicRoutes", route)
		}
	}
}
