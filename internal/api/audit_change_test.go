package api_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/webhooks"
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

// TestDefinitionChangesCommitWithTheirAuditEntryAndEvent: a definition change, its audit entry
// and the definition.changed row of the webhooks' outbox are one transaction. While the outbox
// cannot be written (its table renamed away), a replacement and a deletion fail whole: the
// definition is as it was and neither the entry nor the event exists; once the outbox is back,
// the deletion commits with both. On both dialects.
func TestDefinitionChangesCommitWithTheirAuditEntryAndEvent(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		a := h.newTenant(t, "acme")
		if _, _, err := h.app.Webhooks.CreateEndpoint(ctx, a.id, "https://hooks.example.com/sluice", []string{webhooks.EventDefinitionChanged}); err != nil {
			t.Fatal(err)
		}
		// actions is the tenant's audit log of definition changes, oldest first.
		actions := func() []string {
			t.Helper()
			entries, err := h.tenants.AuditLog(ctx, a.id, 100)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, e := range slices.Backward(entries) {
				if strings.HasPrefix(e.Action, "limit.") {
					out = append(out, e.Action+" "+e.Target)
				}
			}
			return out
		}
		events := func() int64 {
			t.Helper()
			var n int64
			if err := h.db.Gorm.Raw(`SELECT COUNT(*) FROM webhook_deliveries WHERE tenant_id = ? AND event = ?`, a.id, webhooks.EventDefinitionChanged).Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			return n
		}
		rename := func(from, to string) {
			t.Helper()
			if err := h.db.Gorm.Exec("ALTER TABLE " + from + " RENAME TO " + to).Error; err != nil {
				t.Fatal(err)
			}
		}

		requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/api", a.key, map[string]any{"kind": "token bucket", "rate": 10, "period": 60000}), http.StatusOK)
		if got := actions(); !slices.Equal(got, []string{"limit.create api"}) || events() != 1 {
			t.Fatalf("after the creation: audit %q, %d events; want the creation's entry and event", got, events())
		}

		rename("webhook_deliveries", "webhook_deliveries_away")
		requireProblem(t, h.send(t, http.MethodPut, "/v1/limits/api", a.key, map[string]any{"kind": "token bucket", "rate": 20, "period": 60000}), http.StatusInternalServerError, "internal")
		requireProblem(t, h.send(t, http.MethodDelete, "/v1/limits/api", a.key, nil), http.StatusInternalServerError, "internal")
		rename("webhook_deliveries_away", "webhook_deliveries")

		def := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/api", a.key, nil), http.StatusOK)
		if def["rate"] != float64(10) {
			t.Fatalf("the definition after a replacement whose event could not be queued: %v, want rate 10", def)
		}
		if got := actions(); !slices.Equal(got, []string{"limit.create api"}) || events() != 1 {
			t.Fatalf("after the failed changes: audit %q, %d events; want only the creation's", got, events())
		}

		if r := h.send(t, http.MethodDelete, "/v1/limits/api", a.key, nil); r.status != http.StatusNoContent {
			t.Fatalf("DELETE with the outbox back: %v", r)
		}
		requireProblem(t, h.send(t, http.MethodGet, "/v1/limits/api", a.key, nil), http.StatusNotFound, "limit_not_found")
		if got := actions(); !slices.Equal(got, []string{"limit.create api", "limit.delete api"}) || events() != 2 {
			t.Fatalf("after the deletion: audit %q, %d events; want the deletion's entry and event too", got, events())
		}
	})
}

// TestResetsAndOverrideChangesCommitWithTheirAuditEntry: a reset (of a key, of every key) and an
// override's creation, replacement and deletion write their audit entry in their own
// transaction, as definition changes do. While the entry cannot be written (the audit log's
// table renamed away) each fails whole and changes nothing; once the log is back, each commits
// with its entry. (They used to commit first and audit after: a lost entry left a change the
// log did not show.) On both dialects.
func TestResetsAndOverrideChangesCommitWithTheirAuditEntry(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		a := h.newTenant(t, "acme")
		requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/api", a.key, map[string]any{"kind": "token bucket", "rate": 10, "period": 86_400_000}), http.StatusOK)
		requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/api/overrides", a.key, map[string]any{"match": "gold", "rate": 1000}), http.StatusOK)
		for _, key := range []string{"alice", "bob"} {
			requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/api/limit", a.key, map[string]any{"key": key, "count": 4}), http.StatusOK)
		}
		left := func(key string) float64 {
			t.Helper()
			return number(t, requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/api/value?key="+key, a.key, nil), http.StatusOK), "value")
		}
		overrides := func() string {
			t.Helper()
			var out []string
			for _, o := range requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/api/overrides", a.key, nil), http.StatusOK)["overrides"].([]any) {
				o := o.(map[string]any)
				out = append(out, o["match"].(string)+"="+strconv.FormatFloat(o["rate"].(float64), 'g', -1, 64))
			}
			return strings.Join(out, " ")
		}
		changes := []struct {
			method, path string
			body         any
			status       int
		}{
			{http.MethodPost, "/v1/limits/api/reset", map[string]any{"key": "alice"}, http.StatusNoContent},
			{http.MethodPost, "/v1/limits/api/reset", map[string]any{"allKeys": true}, http.StatusNoContent},
			{http.MethodPut, "/v1/limits/api/overrides", map[string]any{"match": "vip", "rate": 500}, http.StatusOK},
			{http.MethodPut, "/v1/limits/api/overrides", map[string]any{"match": "gold", "rate": 2000}, http.StatusOK},
			{http.MethodDelete, "/v1/limits/api/overrides?match=gold", nil, http.StatusNoContent},
		}
		entries := func() []string {
			t.Helper()
			log, err := h.tenants.AuditLog(ctx, a.id, 100)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, e := range slices.Backward(log) {
				out = append(out, e.Action+" "+e.Target)
			}
			return out
		}
		logged := len(entries())

		if err := h.db.Gorm.Exec("ALTER TABLE audit_log RENAME TO audit_log_away").Error; err != nil {
			t.Fatal(err)
		}
		for _, ch := range changes {
			requireProblem(t, h.send(t, ch.method, ch.path, a.key, ch.body), http.StatusInternalServerError, "internal")
		}
		if err := h.db.Gorm.Exec("ALTER TABLE audit_log_away RENAME TO audit_log").Error; err != nil {
			t.Fatal(err)
		}
		// 10 a day refill about 0.0001 a second: the keys are at 6 plus what the test's seconds refilled.
		if l, b, o := left("alice"), left("bob"), overrides(); l > 6.1 || b > 6.1 || o != "gold=1000" {
			t.Fatalf("after the changes that could not be audited: alice %v, bob %v left, overrides %q; want 6, 6, gold=1000", l, b, o)
		}

		for _, ch := range changes {
			if r := h.send(t, ch.method, ch.path, a.key, ch.body); r.status != ch.status {
				t.Fatalf("%s %s with the log back: %v", ch.method, ch.path, r)
			}
		}
		if l, b, o := left("alice"), left("bob"), overrides(); l != 10 || b != 10 || o != "vip=500" {
			t.Fatalf("after the changes: alice %v, bob %v left, overrides %q; want 10, 10, vip=500", l, b, o)
		}
		want := []string{`limit.reset api key "alice"`, "limit.reset api (all keys)", `override.create api override "vip"`,
			`override.update api override "gold"`, `override.delete api override "gold"`}
		if got := entries()[logged:]; !slices.Equal(got, want) {
			t.Fatalf("audit entries, oldest first:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}
