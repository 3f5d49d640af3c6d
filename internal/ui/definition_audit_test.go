package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/testkit"
	"github.com/sluice-dev/sluice/internal/webhooks"
)

// TestDashboardDefinitionChangesCommitWithTheirAuditEntryAndEvent: a limit created, edited or
// deleted from the dashboard is one transaction with its audit entry and the definition.changed
// row of the webhooks' outbox. While the outbox cannot be written (its table renamed away), each
// of them fails whole (the definition as it was, no entry, no event); once it is back, each
// commits with both. On both dialects.
func TestDashboardDefinitionChangesCommitWithTheirAuditEntryAndEvent(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL))
		e.operator()
		tn := e.tenant("acme")
		ctx := context.Background()
		if _, _, err := e.app.Webhooks.CreateEndpoint(ctx, tn.ID, "https://hooks.example.com/sluice", []string{webhooks.EventDefinitionChanged}); err != nil {
			t.Fatal(err)
		}
		c := e.login(opEmail, opPassword)
		// changes is the tenant's audit log of definition changes, oldest first, with the
		// number of definition.changed events in the outbox.
		changes := func() ([]string, int64) {
			t.Helper()
			entries, err := e.svc.AuditLog(ctx, tn.ID, 100)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, a := range slices.Backward(entries) {
				if strings.HasPrefix(a.Action, "limit.") {
					out = append(out, a.Action+" "+a.Target+": "+a.Detail)
				}
			}
			var n int64
			if err := e.db.Gorm.Raw(`SELECT COUNT(*) FROM webhook_deliveries WHERE tenant_id = ? AND event = ?`, tn.ID, webhooks.EventDefinitionChanged).Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			return out, n
		}
		want := func(step string, entries ...string) {
			t.Helper()
			got, n := changes()
			if !slices.Equal(got, entries) || n != int64(len(entries)) {
				t.Fatalf("%s: audit %q with %d events, want %q with as many events", step, got, n, entries)
			}
		}
		outbox := func(from, to string) {
			t.Helper()
			if err := e.db.Gorm.Exec("ALTER TABLE " + from + " RENAME TO " + to).Error; err != nil {
				t.Fatal(err)
			}
		}
		rate := func() float64 {
			t.Helper()
			d, err := e.engine.GetDefinition(ctx, tn.ID, "api")
			if err != nil {
				t.Fatal(err)
			}
			return d.Definition.Rate
		}
		created := "limit.create api: token bucket rate=10 period=60000"

		outbox("webhook_deliveries", "webhook_deliveries_away")
		wantStatus(t, c.post(tpath(tn, "/limits"), limitForm("api", "10")), http.StatusInternalServerError)
		outbox("webhook_deliveries_away", "webhook_deliveries")
		if _, err := e.engine.GetDefinition(ctx, tn.ID, "api"); err == nil {
			t.Fatal("a creation whose event could not be queued stored the limit")
		}
		want("after the failed creation")

		wantStatus(t, c.post(tpath(tn, "/limits"), limitForm("api", "10")), http.StatusSeeOther)
		want("after the creation", created)

		outbox("webhook_deliveries", "webhook_deliveries_away")
		wantStatus(t, c.post(tpath(tn, "/limits/api"), limitForm("api", "20")), http.StatusInternalServerError)
		wantStatus(t, c.post(tpath(tn, "/limits/api/delete"), url.Values{"confirm": {"yes"}}), http.StatusInternalServerError)
		outbox("webhook_deliveries_away", "webhook_deliveries")
		if r := rate(); r != 10 {
			t.Fatalf("after a failed edit and deletion the limit's rate is %v, want 10", r)
		}
		want("after the failed edit and deletion", created)

		wantStatus(t, c.post(tpath(tn, "/limits/api"), limitForm("api", "20")), http.StatusSeeOther)
		wantStatus(t, c.post(tpath(tn, "/limits/api/delete"), url.Values{"confirm": {"yes"}}), http.StatusSeeOther)
		want("after the edit and deletion", created,
			"limit.update api: token bucket rate=10 period=60000 → token bucket rate=20 period=60000",
			"limit.delete api: token bucket rate=20 period=60000 (from the dashboard)")
	})
}
