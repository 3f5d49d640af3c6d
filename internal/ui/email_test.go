package ui_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// withSMTP configures the application to email links through the SMTP server at addr, in plain
// text (the test receiver offers no STARTTLS).
func withSMTP(addr string) option {
	return func(c *config.Config, _ *app.Options) {
		c.SMTPAddr, c.SMTPFrom, c.SMTPTLS = addr, "sluice@example.com", "plain"
	}
}

var mailedLink = regexp.MustCompile(`https?://\S+/(invite|reset)\?token=[0-9a-f]{64}`)

// linkIn returns the one link a received message holds.
func linkIn(t *testing.T, m testkit.SMTPMessage) string {
	t.Helper()
	links := mailedLink.FindAllString(m.Data, -1)
	if len(links) != 1 {
		t.Fatalf("the message holds %d links, want 1:\n%s", len(links), m.Data)
	}
	return links[0]
}

// shownLink follows the redirect after an invite or a reset link and returns the page and the
// link it shows once.
func shownLink(t *testing.T, c *client, made response) (response, string) {
	t.Helper()
	wantStatus(t, made, http.StatusSeeOther)
	page := c.get(made.Header.Get("Location"))
	link := page.doc(t).Find("#new-link-url").AttrOr("value", "")
	if link == "" {
		t.Fatalf("no link shown after %s:\n%s", made.Request.URL.Path, page.body)
	}
	return page, link
}

func tokenOf(t *testing.T, link string) string {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil || len(u.Query().Get("token")) != 64 {
		t.Fatalf("not a one-time link: %q", link)
	}
	return u.Query().Get("token")
}

// TestInviteAndResetLinksAreEmailedWhenSMTPIsConfigured: with SMTP configured, an invite made on
// a tenant's members page and an operator's reset link each reach their user in one message
// (tenant named, expiry given) whose link, followed, works; the page still shows the link once
// and says it was emailed; the sending is audited without the link.
func TestInviteAndResetLinksAreEmailedWhenSMTPIsConfigured(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		srv := testkit.StartSMTP(t, "")
		e := newEnv(t, onDatabase(dbURL), withSMTP(srv.Addr))
		e.operator()
		ctx := context.Background()
		acme := e.tenant("acme")
		if _, err := e.svc.CreateUser(ctx, "admin@acme.example", "admin-password-1", false, &acme.ID, "test", ""); err != nil {
			t.Fatal(err)
		}
		admin := e.login("admin@acme.example", "admin-password-1")

		page, shown := shownLink(t, admin, admin.post(tpath(acme, "/members/invite"), url.Values{"email": {"New@Acme.example"}, "role": {"viewer"}}))
		if text(page.doc(t), "#link-emailed") == "" || page.doc(t).Find("#link-email-error").Length() != 0 {
			t.Fatalf("the page does not say the link was emailed:\n%s", page.body)
		}
		if note := text(page.doc(t), "#invite-note"); !strings.Contains(note, "is emailed") || strings.Contains(note, "no email") {
			t.Fatalf("the invite form says %q with SMTP set", note)
		}
		wantEmailsCounted(t, e, 1, 0)
		msgs := srv.Messages()
		if len(msgs) != 1 || len(msgs[0].To) != 1 || msgs[0].To[0] != "new@acme.example" || msgs[0].From != "sluice@example.com" {
			t.Fatalf("received %+v, want one message to new@acme.example", msgs)
		}
		mailed := linkIn(t, msgs[0])
		if mailed != shown || !strings.Contains(msgs[0].Data, "acme") || !strings.Contains(msgs[0].Data, "expires") {
			t.Fatalf("the message's link %q, shown %q; message:\n%s", mailed, shown, msgs[0].Data)
		}
		if a, ok := e.lastAudit(acme, "user.invite_emailed"); !ok || a.Detail != "emailed to new@acme.example" || strings.Contains(a.Detail+a.Target, tokenOf(t, mailed)) {
			t.Fatalf("the email audited as %+v, %v", a, ok)
		}
		guest := e.client()
		wantStatus(t, guest.get("/invite?token="+tokenOf(t, mailed)), http.StatusOK)
		wantStatus(t, guest.post("/invite", url.Values{"token": {tokenOf(t, mailed)}, "password": {"new-password-1"}, "confirm": {"new-password-1"}}), http.StatusSeeOther)
		wantStatus(t, guest.get(tpath(acme, "/limits")), http.StatusOK)

		newbie, err := e.svc.UserByEmail(ctx, "new@acme.example")
		if err != nil {
			t.Fatal(err)
		}
		opc := e.login(opEmail, opPassword)
		page, shown = shownLink(t, opc, opc.post("/users/"+strconv.FormatInt(newbie.ID, 10)+"/reset-link", nil))
		if text(page.doc(t), "#link-emailed") == "" {
			t.Fatalf("the users page does not say the reset link was emailed:\n%s", page.body)
		}
		msgs = srv.Messages()
		if len(msgs) != 2 || msgs[1].To[0] != "new@acme.example" || linkIn(t, msgs[1]) != shown || !strings.Contains(msgs[1].Data, "/reset?token=") {
			t.Fatalf("the reset message: %+v", msgs)
		}
		reset := tokenOf(t, linkIn(t, msgs[1]))
		wantStatus(t, e.client().post("/reset", url.Values{"token": {reset}, "password": {"new-password-2"}, "confirm": {"new-password-2"}}), http.StatusSeeOther)
		e.login("new@acme.example", "new-password-2")
		if a, ok := e.lastAudit(acme, "user.reset_emailed"); !ok || a.Detail != "emailed to new@acme.example" {
			t.Fatalf("the reset email audited as %+v, %v", a, ok)
		}
	})
}

// TestAFailedEmailKeepsTheInvite: a server that refuses the message (5xx) or a port where none
// listens gives an inline message naming the failure on the page that shows the link, and the
// shown link still accepts the invite.
func TestAFailedEmailKeepsTheInvite(t *testing.T) {
	// The port where none listens is taken and freed just before use, and the failure is known
	// by its address: on a busy machine another process may bind the port in between, and the
	// failure is then the greeting's, not the connection's, named all the same.
	closedPort := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		return addr
	}
	for name, c := range map[string]struct {
		addr func(t *testing.T) string
		want string // "" for the address itself
	}{
		"5xx":     {func(t *testing.T) string { return testkit.StartSMTP(t, "554 5.7.1 relay denied").Addr }, "relay denied"},
		"refused": {closedPort, ""},
	} {
		t.Run(name, func(t *testing.T) {
			addr := c.addr(t)
			if c.want == "" {
				c.want = addr
			}
			e := newEnv(t, withSMTP(addr))
			e.operator()
			acme := e.tenant("acme")
			opc := e.login(opEmail, opPassword)
			page, shown := shownLink(t, opc, opc.post(tpath(acme, "/members/invite"), url.Values{"email": {"new@acme.example"}, "role": {"admin"}}))
			msg := text(page.doc(t), "#link-email-error")
			if !strings.Contains(msg, "could not be emailed") || !strings.Contains(msg, c.want) || !strings.Contains(msg, "copy it from here") || page.doc(t).Find("#link-emailed").Length() != 0 {
				t.Fatalf("inline message %q, want the failure (%s):\n%s", msg, c.want, page.body)
			}
			if _, ok := e.lastAudit(acme, "user.invite_emailed"); ok {
				t.Fatal("a failed email was audited as sent")
			}
			wantEmailsCounted(t, e, 0, 1)
			guest := e.client()
			wantStatus(t, guest.post("/invite", url.Values{"token": {tokenOf(t, shown)}, "password": {"new-password-1"}, "confirm": {"new-password-1"}}), http.StatusSeeOther)
			wantStatus(t, guest.get(tpath(acme, "/limits")), http.StatusOK)
		})
	}
}

// TestNoEmailWithoutSMTP: SMTP is off by default; an invite then sends nothing and the page
// speaks of no email.
func TestNoEmailWithoutSMTP(t *testing.T) {
	srv := testkit.StartSMTP(t, "")
	e := newEnv(t)
	e.operator()
	acme := e.tenant("acme")
	opc := e.login(opEmail, opPassword)
	page, _ := shownLink(t, opc, opc.post(tpath(acme, "/members/invite"), url.Values{"email": {"new@acme.example"}, "role": {"viewer"}}))
	d := page.doc(t)
	if d.Find("#link-emailed").Length() != 0 || d.Find("#link-email-error").Length() != 0 || strings.Contains(page.body, srv.Addr) {
		t.Fatalf("the page speaks of an email with SMTP off:\n%s", page.body)
	}
	if note := text(d, "#invite-note"); !strings.Contains(note, "Sluice sends no email") {
		t.Fatalf("the invite form says %q with SMTP off", note)
	}
	if n := len(srv.Messages()); n != 0 {
		t.Fatalf("%d messages sent with SMTP off", n)
	}
	if _, ok := e.lastAudit(acme, "user.invite_emailed"); ok {
		t.Fatal("an email audited with SMTP off")
	}
}

// wantEmailsCounted checks what sluice_emails_total counted, sent and failed.
func wantEmailsCounted(t *testing.T, e *env, sent, failed int) {
	t.Helper()
	rec := httptest.NewRecorder()
	e.app.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for outcome, n := range map[string]int{"sent": sent, "failed": failed} {
		if want := fmt.Sprintf("sluice_emails_total{outcome=%q} %d\n", outcome, n); !strings.Contains(rec.Body.String(), want) {
			t.Errorf("the metrics lack %q", want)
		}
	}
}
