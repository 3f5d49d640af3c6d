package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/tenants"
)

// TestPasswordRuleSaysItsUnits: the password rule counts characters for its minimum and bytes
// for its maximum, and every form that refuses a password says exactly that: a password of 400
// "€" (400 characters, 1,200 bytes) was refused as not "10 to 1024 characters". The bounds
// themselves: 10 "€" (30 bytes) is long enough, 9 is not; 341 "€" (1,023 bytes) fits.
func TestPasswordRuleSaysItsUnits(t *testing.T) {
	e := newEnv(t)
	e.operator()
	c := e.login(opEmail, opPassword)
	const rule = "Password must be at least 10 characters and at most 1024 bytes (a character outside ASCII takes 2 to 4)."
	current := opPassword
	change := func(password, confirm string) response {
		t.Helper()
		return c.post("/account/password", url.Values{"current": {current}, "password": {password}, "confirm": {confirm}})
	}
	refusedWithRule := func(why string, r response) {
		t.Helper()
		wantStatus(t, r, http.StatusUnprocessableEntity)
		if got := text(r.doc(t), "#password-error"); got != rule {
			t.Fatalf("%s: the form says %q, want %q", why, got, rule)
		}
	}

	euros := func(n int) string { return strings.Repeat("€", n) }
	refusedWithRule("400 × € (1,200 bytes)", change(euros(400), euros(400)))
	refusedWithRule("400 × € beside a differing confirmation", change(euros(400), "something-else-1"))
	refusedWithRule("9 × € (9 characters, 27 bytes)", change(euros(9), euros(9)))

	for _, pw := range []string{euros(10), euros(341)} {
		wantStatus(t, change(pw, pw), http.StatusSeeOther)
		current = pw
		wantStatus(t, e.client().post("/login", url.Values{"email": {opEmail}, "password": {pw}}), http.StatusSeeOther)
	}

	// An invitation's form says the same rule.
	acme := e.tenant("acme")
	_, token, err := e.svc.CreateInvite(context.Background(), &acme.ID, "new@acme.example", tenants.RoleViewer, 0, "test")
	if err != nil {
		t.Fatal(err)
	}
	refusedWithRule("an invitation's form", e.client().post("/invite", url.Values{"token": {token}, "password": {euros(400)}, "confirm": {euros(400)}}))
}
