package api_test

import (
	"context"
	"net/http"
	"testing"
)

// TestDefinitionUpdateIsAuditedWithBeforeAndAfter: replacing a definition records the old one
// and the new one; creating one records only the new one. On both dialects.
func TestDefinitionUpdateIsAuditedWithBeforeAndAfter(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/api", a.key, map[string]any{"kind": "token bucket", "rate": 10, "period": 60000}), http.StatusOK)
		requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/api", a.key, map[string]any{"kind": "token bucket", "rate": 20, "period": 60000}), http.StatusOK)
		entries, err := h.tenants.AuditLog(context.Background(), a.id, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) < 2 || entries[0].Action != "limit.update" || entries[0].Detail != "token bucket rate=10 period=60000 → token bucket rate=20 period=60000" {
			t.Fatalf("the update's audit entry: %+v", entries)
		}
		if entries[1].Action != "limit.create" || entries[1].Detail != "token bucket rate=10 period=60000" {
			t.Fatalf("the creation's audit entry: %+v", entries[1])
		}
	})
}
