package api_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
	"github.com/sluice-dev/sluice/internal/webhooks"
)

// TestAuditedChangesReachTheTenantsWebhooks: a definition written through the API and a key
// created and revoked reach the tenant's webhook receiver as events, from the outbox rows
// written with their audit entries; another tenant's receiver hears nothing.
func TestAuditedChangesReachTheTenantsWebhooks(t *testing.T) {
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
				Type string             `json:"type"`
				Data tenants.AuditEvent `json:"data"`
			}
			b, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(b, &p)
			mu.Lock()
			got = append(got, p.Type+" "+p.Data.Action+" "+p.Data.Target)
			mu.Unlock()
		}))
		defer rcv.Close()
		acme, other := h.newTenant(t, "acme"), h.newTenant(t, "other")
		if _, _, err := a.Webhooks.CreateEndpoint(ctx, acme.id, rcv.URL+"/acme", webhooks.Events); err != nil {
			t.Fatal(err)
		}
		if r := h.send(t, http.MethodPut, "/v1/limits/api", acme.key, map[string]any{"kind": "token bucket", "rate": 5, "period": 1000}); r.status != http.StatusOK {
			t.Fatalf("PUT: %v", r)
		}
		if r := h.send(t, http.MethodPut, "/v1/limits/api", other.key, map[string]any{"kind": "token bucket", "rate": 5, "period": 1000}); r.status != http.StatusOK {
			t.Fatalf("PUT as the other tenant: %v", r)
		}
		k, _, err := a.Tenants.CreateKey(ctx, acme.id, tenants.KindSecret, "ci", "test")
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Tenants.RevokeKey(ctx, acme.id, k.ID, "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Webhooks.DeliverDue(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		want := []string{"definition.changed limit.create api", "key.created key.create " + k.ID, "key.revoked key.revoke " + k.ID}
		if len(got) != len(want) {
			t.Fatalf("receiver got %q, want %q", got, want)
		}
		for _, w := range want {
			found := false
			for _, g := range got {
				found = found || g == w
			}
			if !found {
				t.Fatalf("receiver got %q; missing %q", got, w)
			}
		}
	})
}

func TestWebhookRoutesManageEndpointsAndTheDeliveryLog(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		answer := h.send(t, http.MethodPost, "/v1/webhooks", a.key,
			map[string]any{"url": "https://hooks.example.com/sluice", "events": []string{"key.created", "definition.changed"}})
		if cc := answer.header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("the answer that shows the signing secret has Cache-Control %q, want no-store", cc)
		}
		created := requireJSON(t, answer, http.StatusCreated)
		secret, _ := created["secret"].(string)
		if !strings.HasPrefix(secret, "whsec_") || created["url"] != "https://hooks.example.com/sluice" {
			t.Fatalf("created %v", created)
		}
		id := strconv.FormatInt(int64(created["id"].(float64)), 10)
		for _, bad := range []struct {
			body  any
			field string
		}{
			{map[string]any{"url": "http://127.0.0.1:9/x", "events": []string{"key.created"}}, "url"}, // private, not allowed here
			{map[string]any{"url": "http://[fd00::1]/x", "events": []string{"key.created"}}, "url"},
			{map[string]any{"url": "gopher://example.com/", "events": []string{"key.created"}}, "url"},
			// A host name outside ASCII, which no delivery would reach (write its xn-- form).
			{map[string]any{"url": "https://ünï.example/h", "events": []string{"key.created"}}, "url"},
			// 1,019 characters as sent, within maxLength, but 6,019 once escaped as stored.
			{map[string]any{"url": "http://example.com/" + strings.Repeat("é", 1000), "events": []string{"key.created"}}, "url"},
			{map[string]any{"url": "https://example.com/", "events": []string{"key.exploded"}}, "events"},
			{map[string]any{"url": "https://example.com/"}, "events"},
			{map[string]any{"url": "https://example.com/", "events": []string{"key.created"}, "secret": "mine"}, "secret"},
		} {
			p := requireProblem(t, h.send(t, http.MethodPost, "/v1/webhooks", a.key, bad.body), http.StatusBadRequest, "invalid_request")
			if p["field"] != bad.field {
				t.Errorf("%v: problem %v, want field %s", bad.body, p, bad.field)
			}
		}
		list := requireJSON(t, h.send(t, http.MethodGet, "/v1/webhooks", a.key, nil), http.StatusOK)
		hooks := list["webhooks"].([]any)
		if len(hooks) != 1 || hooks[0].(map[string]any)["secret"] != nil {
			t.Fatalf("list %v: one endpoint, and never its secret", list)
		}
		if r := h.send(t, http.MethodPost, "/v1/webhooks/"+id+"/test", a.key, nil); r.status != http.StatusAccepted {
			t.Fatalf("test event: %v", r)
		}
		log := requireJSON(t, h.send(t, http.MethodGet, "/v1/webhooks/"+id+"/deliveries", a.key, nil), http.StatusOK)
		ds := log["deliveries"].([]any)
		if len(ds) != 1 || ds[0].(map[string]any)["event"] != "webhook.test" || ds[0].(map[string]any)["deliveredAt"] != nil {
			t.Fatalf("delivery log %v", log)
		}
		deliveryID := ds[0].(map[string]any)["id"].(string)
		if r := h.send(t, http.MethodPost, "/v1/webhooks/"+id+"/deliveries/"+deliveryID+"/resend", a.key, nil); r.status != http.StatusAccepted {
			t.Fatalf("resend: %v", r)
		}
		// Both manual sendings are audited: each makes Sluice call the endpoint on request.
		entries, err := h.tenants.AuditLog(context.Background(), a.id, 10)
		if err != nil {
			t.Fatal(err)
		}
		var manual []string
		for _, e := range entries {
			if e.Action == "webhook.test" || e.Action == "webhook.resend" {
				manual = append(manual, e.Action+" "+e.Target)
			}
		}
		if want := []string{"webhook.resend " + deliveryID, "webhook.test " + id}; !slices.Equal(manual, want) {
			t.Fatalf("audited manual sendings, newest first: %q, want %q", manual, want)
		}
		for _, q := range []string{"?limit=0", "?limit=501", "?limit=ten", "?limit=", "?limit=%2B5"} {
			requireProblem(t, h.send(t, http.MethodGet, "/v1/webhooks/"+id+"/deliveries"+q, a.key, nil), http.StatusBadRequest, "invalid_request")
		}
		requireProblem(t, h.send(t, http.MethodPost, "/v1/webhooks/"+id+"/deliveries/msg_nope/resend", a.key, nil), http.StatusNotFound, "not_found")
		// The endpoint's id as the API writes it, or nothing: "+1" and "01" are not endpoint 1.
		for _, path := range []string{"/v1/webhooks/abc", "/v1/webhooks/-1", "/v1/webhooks/99999999999999999999",
			"/v1/webhooks/+" + id, "/v1/webhooks/0" + id} {
			requireProblem(t, h.send(t, http.MethodDelete, path, a.key, nil), http.StatusNotFound, "not_found")
		}
		if r := h.send(t, http.MethodDelete, "/v1/webhooks/"+id, a.key, nil); r.status != http.StatusNoContent {
			t.Fatalf("delete: %v", r)
		}
		requireProblem(t, h.send(t, http.MethodGet, "/v1/webhooks/"+id+"/deliveries", a.key, nil), http.StatusNotFound, "not_found")
	})
}

// TestManualWebhookSendingsAreBounded: an API key cannot grow an endpoint's outbox at will. Test
// events and resends are at most webhooks.MaxManualPerMinute per endpoint (then 429 rate_limited
// with Retry-After; another endpoint has its own), and none is queued while the endpoint has
// webhooks.MaxWaitingPerEndpoint deliveries waiting (409 conflict).
func TestManualWebhookSendingsAreBounded(t *testing.T) {
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		frozen := time.Now()
		h := startApp(t, url, app.Options{EngineNow: func() time.Time { return frozen }})
		a := h.newTenant(t, "acme")
		endpoint := func(path string) string {
			created := requireJSON(t, h.send(t, http.MethodPost, "/v1/webhooks", a.key,
				map[string]any{"url": "https://hooks.example.com" + path, "events": []string{"key.created"}}), http.StatusCreated)
			return strconv.FormatInt(int64(created["id"].(float64)), 10)
		}
		busy, full := endpoint("/busy"), endpoint("/full")
		for i := range webhooks.MaxManualPerMinute {
			if r := h.send(t, http.MethodPost, "/v1/webhooks/"+busy+"/test", a.key, nil); r.status != http.StatusAccepted {
				t.Fatalf("test event %d: %v", i+1, r)
			}
		}
		ds := requireJSON(t, h.send(t, http.MethodGet, "/v1/webhooks/"+busy+"/deliveries", a.key, nil), http.StatusOK)["deliveries"].([]any)
		resend := "/v1/webhooks/" + busy + "/deliveries/" + ds[0].(map[string]any)["id"].(string) + "/resend"
		for _, path := range []string{"/v1/webhooks/" + busy + "/test", resend} {
			r := h.send(t, http.MethodPost, path, a.key, nil)
			p := requireProblem(t, r, http.StatusTooManyRequests, "rate_limited")
			if wait, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || wait < 1 || wait > 60 {
				t.Errorf("%s: Retry-After %q, want 1 to 60 seconds", path, r.header.Get("Retry-After"))
			}
			if !strings.Contains(p["detail"].(string), strconv.Itoa(webhooks.MaxManualPerMinute)) {
				t.Errorf("%s: detail %q does not name the limit", path, p["detail"])
			}
		}
		// An endpoint that is not the key's tenant's is not found, whatever its limit.
		requireProblem(t, h.send(t, http.MethodPost, "/v1/webhooks/"+busy+"/test", h.newTenant(t, "other").key, nil), http.StatusNotFound, "not_found")

		fullID, _ := strconv.ParseInt(full, 10, 64)
		later := time.Now().Add(time.Hour).UnixMilli() // not due: the dispatcher leaves them waiting
		rows := []map[string]any{{"id": "delivered", "tenant_id": a.id, "endpoint_id": fullID, "event": "key.created", "payload": "{}",
			"created_at": later, "attempts": 1, "next_attempt_at": int64(math.MaxInt64), "delivered_at": later, "last_error": ""}}
		for i := range webhooks.MaxWaitingPerEndpoint {
			rows = append(rows, map[string]any{"id": "waiting-" + strconv.Itoa(i), "tenant_id": a.id, "endpoint_id": fullID, "event": "key.created",
				"payload": "{}", "created_at": later, "attempts": 0, "next_attempt_at": later, "last_error": ""})
		}
		if err := h.db.Gorm.Table("webhook_deliveries").CreateInBatches(rows, 200).Error; err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/v1/webhooks/" + full + "/test", "/v1/webhooks/" + full + "/deliveries/delivered/resend"} {
			p := requireProblem(t, h.send(t, http.MethodPost, path, a.key, nil), http.StatusConflict, "conflict")
			if !strings.Contains(p["detail"].(string), strconv.Itoa(webhooks.MaxWaitingPerEndpoint)) {
				t.Errorf("%s: detail %q does not name the bound", path, p["detail"])
			}
		}
	})
}
