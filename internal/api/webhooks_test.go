package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
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
