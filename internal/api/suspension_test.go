package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestASuspendedTenantsKeysAreRefusedUntilItIsResumed: every route answers a suspended tenant's
// key 403 tenant_suspended at once (its cached key included), another tenant is unaffected, the
// data is kept, and resuming lets the same key in again.
func TestASuspendedTenantsKeysAreRefusedUntilItIsResumed(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		a, b := h.newTenant(t, "acme"), h.newTenant(t, "bravo")
		h.define(t, a.key, "api", bucket10PerMinute)
		h.define(t, b.key, "api", bucket10PerMinute)
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/api/limit", a.key, map[string]any{"key": "k"}), http.StatusOK) // cached now

		if err := h.tenants.SetSuspended(ctx, a.id, true, "test"); err != nil {
			t.Fatal(err)
		}
		for _, r := range []response{
			h.send(t, http.MethodPost, "/v1/limits/api/limit", a.key, map[string]any{"key": "k"}),
			h.send(t, http.MethodGet, "/v1/limits", a.key, nil),
			h.send(t, http.MethodPut, "/v1/limits/other", a.key, bucket10PerMinute),
		} {
			requireProblem(t, r, http.StatusForbidden, api.CodeTenantSuspended)
		}
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/api/limit", b.key, map[string]any{"key": "k"}), http.StatusOK)

		if err := h.tenants.SetSuspended(ctx, a.id, false, "test"); err != nil {
			t.Fatal(err)
		}
		value := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/api/value?key=k", a.key, nil), http.StatusOK)
		if v := value["value"].(float64); v < 9 || v >= 10 {
			t.Fatalf("after resuming, the key's value is %v: the state kept while suspended should be about 9", value["value"])
		}
	})
}

// TestSuspensionReachesEveryInstance: on PostgreSQL a suspension made through one instance is
// heard by another at once: NOTIFY drops its key cache (whose TTL here is far longer than the
// test may wait, so only the notification can explain the refusal).
func TestSuspensionReachesEveryInstance(t *testing.T) {
	t.Parallel()
	url := testkit.URL(t, "postgres")
	one := startApp(t, url, app.Options{})
	two := startApp(t, url, app.Options{AuthCacheTTL: time.Hour})
	a := one.newTenant(t, "acme")
	one.define(t, a.key, "api", bucket10PerMinute)
	select {
	case <-two.tenants.Listening():
	case <-time.After(30 * time.Second):
		t.Fatal("waited 30 s for the second instance to LISTEN")
	}
	requireJSON(t, two.send(t, http.MethodGet, "/v1/limits", a.key, nil), http.StatusOK) // cached on two
	if err := one.tenants.SetSuspended(context.Background(), a.id, true, "test"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := two.send(t, http.MethodGet, "/v1/limits", a.key, nil)
		if r.status == http.StatusForbidden {
			requireProblem(t, r, http.StatusForbidden, api.CodeTenantSuspended)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for the second instance to refuse the suspended tenant's key: %v", r)
		}
	}
}

// TestASuspendedTenantsPublishableKeyOnASecretRouteIsRefusedAsSuspended: every key of a
// suspended tenant is 403 tenant_suspended, a publishable one on a secret route too (not 401).
func TestASuspendedTenantsPublishableKeyOnASecretRouteIsRefusedAsSuspended(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		_, pk, err := h.tenants.CreateKey(context.Background(), a.id, tenants.KindPublishable, "widget", "test")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.tenants.SetSuspended(context.Background(), a.id, true, "test"); err != nil {
			t.Fatal(err)
		}
		requireProblem(t, h.send(t, http.MethodGet, "/v1/limits", pk, nil), http.StatusForbidden, api.CodeTenantSuspended)
	})
}
