package ui_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// A login whose session does not start is not audited as a login: the password changed, or
// the user was disabled, between the password check and the session (401, "login.failed" only),
// or the session's insert failed (500, nothing). A login that starts its session is audited as
// "login" exactly once, with the client address.
func TestOnlyALoginThatStartsASessionIsAuditedAsALogin(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL), behindProxy)
		op := e.operator()
		ctx := context.Background()
		var gap func() error // run by the next login between its password check and its session
		e.ui.SetAfterPasswordCheck(func() {
			if gap != nil {
				if err := gap(); err != nil {
					t.Error(err)
				}
				gap = nil
			}
		})
		entries := func(action string) []tenants.AuditEntry {
			t.Helper()
			log, err := e.svc.ServerAuditLog(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []tenants.AuditEntry
			for _, a := range log {
				if a.Action == action {
					got = append(got, a)
				}
			}
			return got
		}
		noLogin := func(why string) {
			t.Helper()
			if got := entries("login"); len(got) != 0 {
				t.Fatalf("%s: audited as a login: %+v", why, got)
			}
		}

		// The reproduction: the password changes in the gap.
		gap = func() error {
			return e.svc.ChangePassword(ctx, op.ID, opPassword, "operator-password-2", "", "192.0.2.1")
		}
		wantStatus(t, e.client().loginFrom("198.51.100.1", opEmail, opPassword), http.StatusUnauthorized)
		noLogin("a login refused because the password changed during it")
		if n := len(entries("login.failed")); n != 1 {
			t.Fatalf("%d login.failed entries after the refused login, want 1", n)
		}

		// The user is disabled in the gap (another operator exists: the last one cannot be).
		if _, err := e.svc.CreateUser(ctx, "op2@example.com", "operator-password-9", true, nil, "test", ""); err != nil {
			t.Fatal(err)
		}
		gap = func() error { return e.svc.SetDisabled(ctx, nil, op.ID, true, "test") }
		wantStatus(t, e.client().loginFrom("198.51.100.2", opEmail, "operator-password-2"), http.StatusUnauthorized)
		noLogin("a login refused because the user was disabled during it")
		if err := e.svc.SetDisabled(ctx, nil, op.ID, false, "test"); err != nil {
			t.Fatal(err)
		}

		// The session's insert fails (its table is gone for a moment): a 500 page, no "login".
		gap = func() error { return e.db.Gorm.Exec(`ALTER TABLE admin_sessions RENAME TO admin_sessions_away`).Error }
		wantStatus(t, e.client().loginFrom("198.51.100.3", opEmail, "operator-password-2"), http.StatusInternalServerError)
		noLogin("a login whose session could not be stored")
		if err := e.db.Gorm.Exec(`ALTER TABLE admin_sessions_away RENAME TO admin_sessions`).Error; err != nil {
			t.Fatal(err)
		}

		// A login that works is audited once, as before: actor, target, client address.
		c := e.client()
		wantStatus(t, c.loginFrom("203.0.113.7", opEmail, "operator-password-2"), http.StatusSeeOther)
		wantStatus(t, c.get("/tenants"), http.StatusOK)
		got := entries("login")
		if len(got) != 1 {
			t.Fatalf("%d login entries after one login, want 1: %+v", len(got), got)
		}
		if a := got[0]; a.Actor != opEmail || a.Target != "user:"+strconv.FormatInt(op.ID, 10) || a.Detail != "client 203.0.113.7" || a.TenantID != nil {
			t.Fatalf("login entry %+v", a)
		}
		if n := len(entries("login.failed")); n != 2 {
			t.Fatalf("%d login.failed entries, want 2 (the changed password, the disabled user)", n)
		}
	})
}

// A tenant member's login is audited once, in its tenant's log, and not in the server's.
func TestAMembersLoginIsAuditedOnceInItsTenantsLog(t *testing.T) {
	e := newEnv(t)
	tn := e.tenant("acme")
	ctx := context.Background()
	m, err := e.svc.CreateUser(ctx, "dev@acme.io", "member-password-1", false, &tn.ID, "test", "")
	if err != nil {
		t.Fatal(err)
	}
	e.login("dev@acme.io", "member-password-1")
	log, err := e.svc.AuditLog(ctx, tn.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var logins []tenants.AuditEntry
	for _, a := range log {
		if a.Action == "login" {
			logins = append(logins, a)
		}
	}
	if len(logins) != 1 || logins[0].Actor != "dev@acme.io" || logins[0].Target != "user:"+strconv.FormatInt(m.ID, 10) || logins[0].Detail != "client 127.0.0.1" {
		t.Fatalf("the tenant's login entries = %+v, want one for dev@acme.io from 127.0.0.1", logins)
	}
	server, err := e.svc.ServerAuditLog(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range server {
		if a.Action == "login" {
			t.Fatalf("a member's login is in the server log: %+v", a)
		}
	}
}
