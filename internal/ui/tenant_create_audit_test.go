package ui_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/sluice-dev/sluice/internal/tenants"
)

// TestATenantExistsOnlyWithItsCreationAudited: the dashboard creates a tenant and records
// tenant.create in the tenant's log and the security log in one transaction, as the CLI does.
// When the entry cannot be written, no tenant is created.
func TestATenantExistsOnlyWithItsCreationAudited(t *testing.T) {
	e := newEnv(t)
	e.operator()
	c := e.login(opEmail, opPassword)
	ctx := context.Background()

	if err := e.db.Gorm.Exec(`ALTER TABLE audit_log RENAME TO audit_log_away`).Error; err != nil {
		t.Fatal(err)
	}
	wantStatus(t, c.post("/tenants", url.Values{"name": {"initech"}}), http.StatusInternalServerError)
	if err := e.db.Gorm.Exec(`ALTER TABLE audit_log_away RENAME TO audit_log`).Error; err != nil {
		t.Fatal(err)
	}
	if tn, err := e.svc.TenantByName(ctx, "initech"); !errors.Is(err, tenants.ErrNotFound) {
		t.Fatalf("a tenant whose creation could not be audited exists: %+v, %v", tn, err)
	}

	wantStatus(t, c.post("/tenants", url.Values{"name": {"initech"}}), http.StatusSeeOther)
	tn, err := e.svc.TenantByName(ctx, "initech")
	if err != nil {
		t.Fatal(err)
	}
	target := "tenant:" + strconv.FormatInt(tn.ID, 10)
	own, err := e.svc.AuditLog(ctx, tn.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	server, err := e.svc.ServerAuditLog(ctx, 50)
	if err != nil {
		t.Fatal(err)
	}
	for _, log := range []struct {
		name    string
		entries []tenants.AuditEntry
	}{{"the tenant's", own}, {"the security", server}} {
		n := 0
		for _, a := range log.entries {
			if a.Action == "tenant.create" && a.Target == target {
				n++
				if a.Actor != "user:"+opEmail || a.Detail != "initech" {
					t.Fatalf("%s log's tenant.create: %+v", log.name, a)
				}
			}
		}
		if n != 1 {
			t.Fatalf("%s log has %d tenant.create entries for %s, want 1: %+v", log.name, n, target, log.entries)
		}
	}
}
