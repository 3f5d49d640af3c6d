package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestNewSessionRevokesTheBrowsersOldOne: a browser that starts a session while it holds a live
// one (a login as another user, or as the same one; an invitation or a password reset link
// accepted while logged in) gets a new cookie, and the session of the old cookie ends on the
// server: a saved copy of it is refused at once, not answered until its 12 h expiry. Each
// replacement is audited as the old session's logout.
func TestNewSessionRevokesTheBrowsersOldOne(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL))
		op := e.operator()
		ctx := context.Background()
		acme := e.tenant("acme")
		const otherPassword = "member-password-1"
		if _, err := e.svc.CreateUser(ctx, "admin@acme.example", otherPassword, false, &acme.ID, "test", ""); err != nil {
			t.Fatal(err)
		}
		// replacedBy counts the logout entries of replaced sessions per actor, in log.
		replacedBy := func(log []tenants.AuditEntry, err error) map[string]int {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			n := map[string]int{}
			for _, a := range log {
				if a.Action == "logout" && strings.Contains(a.Detail, "replaced") {
					n[a.Actor]++
				}
			}
			return n
		}

		// replaced checks that the browser's cookie changed from old to a live one and that old
		// is refused now.
		replaced := func(step string, c *client, old string) {
			t.Helper()
			if now := c.cookie(); now == "" || now == old {
				t.Fatalf("%s: the browser's session cookie did not change", step)
			}
			wantStatus(t, c.get("/account"), http.StatusOK)
			if r := e.getWithCookie("/account", old); r.StatusCode == http.StatusOK {
				t.Fatalf("%s: a saved copy of the old cookie still answers /account 200", step)
			}
			refused(t, e.getWithCookie("/account", old))
		}

		c := e.login(opEmail, opPassword)
		old := c.cookie()
		wantStatus(t, c.post("/login", url.Values{"email": {"admin@acme.example"}, "password": {otherPassword}}), http.StatusSeeOther)
		replaced("login as another user", c, old)

		old = c.cookie()
		wantStatus(t, c.post("/login", url.Values{"email": {"admin@acme.example"}, "password": {otherPassword}}), http.StatusSeeOther)
		replaced("login as the same user again", c, old)

		old = c.cookie()
		_, token, err := e.svc.CreateInvite(ctx, &acme.ID, "new@acme.example", tenants.RoleViewer, 0, "test")
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, c.post("/invite", url.Values{"token": {token}, "password": {"new-password-1"}, "confirm": {"new-password-1"}}), http.StatusSeeOther)
		replaced("invitation accepted", c, old)

		old = c.cookie()
		link, err := e.svc.CreateResetLink(ctx, op.ID, time.Hour, "test")
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, c.post("/reset", url.Values{"token": {link}, "password": {"operator-password-2"}, "confirm": {"operator-password-2"}}), http.StatusSeeOther)
		replaced("reset link used", c, old)

		// A failed login changes nothing: the browser keeps its live session.
		old = c.cookie()
		wantStatus(t, c.post("/login", url.Values{"email": {"admin@acme.example"}, "password": {"wrong-password-1"}}), http.StatusUnauthorized)
		if c.cookie() != old {
			t.Fatal("a failed login changed the session cookie")
		}
		wantStatus(t, e.getWithCookie("/account", old), http.StatusOK)

		// Each replaced session is audited as its user's logout: the operator's in the security
		// log, the members' in acme's.
		if got := replacedBy(e.svc.ServerAuditLog(ctx, 0))["user:"+opEmail]; got != 1 {
			t.Fatalf("%d logouts of the operator's replaced session in the security log, want 1", got)
		}
		got := replacedBy(e.svc.AuditLog(ctx, acme.ID, 0))
		if got["user:admin@acme.example"] != 2 || got["user:new@acme.example"] != 1 {
			t.Fatalf("logouts of replaced sessions in acme's log: %v, want admin@ 2 (their own login, the invitation) and new@ 1 (the reset link)", got)
		}
	})
}
