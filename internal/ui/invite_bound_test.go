package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
)

// TestATenantsInvitesAreBounded: a tenant's admins may invite 50 people at once, then one about
// every 29 minutes (each
// invite is emailed when SMTP is set); past that the members page answers 429 with Retry-After,
// says why and keeps the form, and no invite is made. An operator's invite to the tenant is not
// counted, and another tenant has its own allowance.
func TestATenantsInvitesAreBounded(t *testing.T) {
	frozen := time.Now()
	e := newEnv(t, func(_ *config.Config, o *app.Options) { o.EngineNow = func() time.Time { return frozen } })
	e.operator()
	ctx := context.Background()
	acme, other := e.tenant("acme"), e.tenant("other")
	for _, id := range []int64{acme.ID, other.ID} {
		email := "admin" + strconv.FormatInt(id, 10) + "@example.com"
		if _, err := e.svc.CreateUser(ctx, email, "admin-password-1", false, &id, "test", ""); err != nil {
			t.Fatal(err)
		}
	}
	admin := e.login("admin"+strconv.FormatInt(acme.ID, 10)+"@example.com", "admin-password-1")
	invite := func(c *client, path, email string) response {
		return c.post(path+"/invite", url.Values{"email": {email}, "role": {"viewer"}})
	}
	members := tpath(acme, "/members")
	const perDay = 50
	for i := range perDay {
		wantStatus(t, invite(admin, members, "m"+strconv.Itoa(i)+"@example.com"), http.StatusSeeOther)
	}
	refused := invite(admin, members, "one-too-many@example.com")
	wantStatus(t, refused, http.StatusTooManyRequests)
	if wait, err := strconv.Atoi(refused.Header.Get("Retry-After")); err != nil || wait < 1 || wait > 24*3600/perDay {
		t.Errorf("Retry-After %q, want 1 to %d seconds", refused.Header.Get("Retry-After"), 24*3600/perDay)
	}
	d := refused.doc(t)
	if msg := text(d, "#form-error"); !strings.Contains(msg, "invite 50 people at once, then one every 29 minutes") || d.Find("#invite-form #email").AttrOr("value", "") != "one-too-many@example.com" {
		t.Fatalf("the refusal says %q and keeps %q", msg, d.Find("#invite-form #email").AttrOr("value", ""))
	}
	invites, err := e.svc.ListInvites(ctx, &acme.ID)
	if err != nil || len(invites) != perDay {
		t.Fatalf("acme's invites: %d (%v), want %d", len(invites), err, perDay)
	}

	op := e.login(opEmail, opPassword)
	wantStatus(t, invite(op, members, "from-operator@example.com"), http.StatusSeeOther)
	otherAdmin := e.login("admin"+strconv.FormatInt(other.ID, 10)+"@example.com", "admin-password-1")
	wantStatus(t, invite(otherAdmin, tpath(other, "/members"), "elsewhere@example.com"), http.StatusSeeOther)
}
