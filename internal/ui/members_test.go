package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// A tenant's admin inviting an email with an account elsewhere (another tenant's member, an
// operator) gets what an address without one gets (the invitation is made; its acceptance
// fails), never a sign that the account exists; inviting a member of their own tenant, or an
// operator inviting anyone taken, says so precisely. On both dialects.
func TestInviteFormRevealsNoAccountOfAnotherTenant(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL))
		e.operator()
		ctx := context.Background()
		acme, other := e.tenant("acme"), e.tenant("other")
		for _, u := range []struct {
			email  string
			tenant int64
		}{{"admin@acme.example", acme.ID}, {"member@acme.example", acme.ID}, {"member@other.example", other.ID}} {
			if _, err := e.svc.CreateUser(ctx, u.email, "a-password-12", false, &u.tenant, "test", ""); err != nil {
				t.Fatal(err)
			}
		}
		invite := func(c *client, email, want string) {
			t.Helper()
			res := c.post(tpath(acme, "/members/invite"), url.Values{"email": {email}, "role": {"viewer"}})
			wantStatus(t, res, http.StatusUnprocessableEntity)
			if got := text(res.doc(t), "#email-error"); got != want {
				t.Fatalf("inviting %s: %q, want %q", email, got, want)
			}
		}
		const precise = "A user with this email exists."
		admin := e.login("admin@acme.example", "a-password-12")
		// An address with an account elsewhere is invited as one without: the same answer.
		for _, email := range []string{"member@other.example", "Op@Example.com", "nobody@example.com"} {
			wantStatus(t, admin.post(tpath(acme, "/members/invite"), url.Values{"email": {email}, "role": {"viewer"}}), http.StatusSeeOther)
		}
		invite(admin, "member@acme.example", precise)
		op := e.login(opEmail, opPassword)
		invite(op, "member@other.example", precise)
	})
}

// TestAdminInvitesChangesRoleAndRemovesAMember walks the members page on both dialects: the
// invite form shows every field error at once and keeps the input; the link is shown once;
// accepting it checks both password fields at once and logs the new member in; a role change is
// audited with before and after; a removed member's open session stops on its next request.
func TestAdminInvitesChangesRoleAndRemovesAMember(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL))
		e.operator()
		ctx := context.Background()
		acme := e.tenant("acme")
		if _, err := e.svc.CreateUser(ctx, "admin@acme.example", "admin-password-1", false, &acme.ID, "test", ""); err != nil {
			t.Fatal(err)
		}
		admin := e.login("admin@acme.example", "admin-password-1")
		members := tpath(acme, "/members")

		bad := admin.post(members+"/invite", url.Values{"email": {"not an email"}, "role": {"owner"}})
		wantStatus(t, bad, http.StatusUnprocessableEntity)
		d := bad.doc(t)
		if text(d, "#email-error") == "" || text(d, "#role-error") == "" || d.Find("#invite-form #email").AttrOr("value", "") != "not an email" {
			t.Fatalf("invite errors: email %q, role %q, kept %q", text(d, "#email-error"), text(d, "#role-error"), d.Find("#invite-form #email").AttrOr("value", ""))
		}
		created := admin.post(members+"/invite", url.Values{"email": {"new@acme.example"}, "role": {"viewer"}})
		wantStatus(t, created, http.StatusSeeOther)
		shown := admin.get(created.Header.Get("Location"))
		link := shown.doc(t).Find("#new-link-url").AttrOr("value", "")
		if !strings.Contains(link, "/invite?token=") || !strings.Contains(shown.body, "new@acme.example") {
			t.Fatalf("the invite link is not shown: %q", link)
		}
		if again := admin.get(created.Header.Get("Location")); strings.Contains(again.body, link) {
			t.Fatal("the invite link is shown a second time")
		}
		lu, _ := url.Parse(link)
		token := lu.Query().Get("token")

		guest := e.client()
		wantStatus(t, guest.get("/invite?token="+token), http.StatusOK)
		mismatch := guest.post("/invite", url.Values{"token": {token}, "password": {"short"}, "confirm": {"other"}})
		wantStatus(t, mismatch, http.StatusUnprocessableEntity)
		if d := mismatch.doc(t); text(d, "#password-error") == "" || text(d, "#confirm-error") == "" {
			t.Fatalf("accept errors: %q / %q", text(d, "#password-error"), text(d, "#confirm-error"))
		}
		joined := guest.post("/invite", url.Values{"token": {token}, "password": {"new-password-1"}, "confirm": {"new-password-1"}})
		wantStatus(t, joined, http.StatusSeeOther)
		wantStatus(t, guest.get(tpath(acme, "/limits")), http.StatusOK)
		wantStatus(t, guest.post(tpath(acme, "/keys"), url.Values{"label": {"x"}, "kind": {"secret"}}), http.StatusForbidden)
		wantStatus(t, e.client().post("/invite", url.Values{"token": {token}, "password": {"new-password-1"}, "confirm": {"new-password-1"}}), http.StatusNotFound)

		newbie, err := e.svc.UserByEmail(ctx, "new@acme.example")
		if err != nil || newbie.Role != tenants.RoleViewer {
			t.Fatalf("the invited user: %+v, %v", newbie, err)
		}
		id := strconv.FormatInt(newbie.ID, 10)
		wantStatus(t, admin.post(members+"/"+id+"/role", url.Values{"role": {"admin"}}), http.StatusSeeOther)
		wantStatus(t, guest.post(tpath(acme, "/keys"), url.Values{"label": {"x"}, "kind": {"secret"}}), http.StatusSeeOther)
		if a, ok := e.lastAudit(acme, "user.role"); !ok || a.Detail != "new@acme.example: viewer of acme → admin of acme" {
			t.Fatalf("role change audited as %+v", a)
		}

		unconfirmed := admin.post(members+"/"+id+"/remove", url.Values{})
		wantStatus(t, unconfirmed, http.StatusUnprocessableEntity)
		if text(unconfirmed.doc(t), "#form-error") == "" {
			t.Fatal("a removal without confirmation gave no inline error")
		}
		wantStatus(t, admin.post(members+"/"+id+"/remove", url.Values{"confirm": {"yes"}}), http.StatusSeeOther)
		gone := guest.get(tpath(acme, "/limits"))
		if gone.StatusCode != http.StatusSeeOther || !strings.HasPrefix(gone.Header.Get("Location"), "/login") {
			t.Fatalf("the removed member's session: status %d, location %q", gone.StatusCode, gone.Header.Get("Location"))
		}
	})
}

// TestOperatorUsersPageResetLinksDisablingAndTheLastOperator: an operator's reset link works
// once and ends the user's sessions; disabling ends them too; the last operator cannot remove,
// disable or demote themself (inline, 422); one's own password change needs the current
// password and reports both problems at once; a tenant delete needs the typed name and an
// unknown tenant is the 404 page.
func TestOperatorUsersPageResetLinksDisablingAndTheLastOperator(t *testing.T) {
	e := newEnv(t)
	op := e.operator()
	ctx := context.Background()
	acme := e.tenant("acme")
	m, err := e.svc.CreateUser(ctx, "m@acme.example", "member-password-1", false, &acme.ID, "test", "")
	if err != nil {
		t.Fatal(err)
	}
	opc := e.login(opEmail, opPassword)
	member := e.login("m@acme.example", "member-password-1")
	mid, opid := strconv.FormatInt(m.ID, 10), strconv.FormatInt(op.ID, 10)

	made := opc.post("/users/"+mid+"/reset-link", nil)
	wantStatus(t, made, http.StatusSeeOther)
	link := opc.get(made.Header.Get("Location")).doc(t).Find("#new-link-url").AttrOr("value", "")
	lu, _ := url.Parse(link)
	token := lu.Query().Get("token")
	if token == "" {
		t.Fatalf("no reset link shown: %q", link)
	}
	guest := e.client()
	wantStatus(t, guest.post("/reset", url.Values{"token": {token}, "password": {"member-password-2"}, "confirm": {"member-password-2"}}), http.StatusSeeOther)
	if r := member.get(tpath(acme, "/limits")); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("the member's old session after a reset: %d", r.StatusCode)
	}
	wantStatus(t, guest.get(tpath(acme, "/limits")), http.StatusOK)
	wantStatus(t, e.client().get("/reset?token="+token), http.StatusNotFound)

	wantStatus(t, opc.post("/users/"+mid+"/disable", url.Values{"disable": {"true"}}), http.StatusSeeOther)
	if r := guest.get(tpath(acme, "/limits")); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("a disabled member's session: %d", r.StatusCode)
	}
	if r := e.client().post("/login", url.Values{"email": {"m@acme.example"}, "password": {"member-password-2"}}); r.StatusCode == http.StatusSeeOther {
		t.Fatal("a disabled member logged in")
	}

	for _, try := range []struct {
		path, what string
		form       url.Values
	}{
		{"/users/" + opid + "/remove", "remove", url.Values{"confirm": {"yes"}}},
		{"/users/" + opid + "/disable", "disable", url.Values{"disable": {"true"}}},
		{"/users/" + opid + "/role", "demote", url.Values{"role": {"admin"}, "tenant": {strconv.FormatInt(acme.ID, 10)}}},
	} {
		r := opc.post(try.path, try.form)
		wantStatus(t, r, http.StatusUnprocessableEntity)
		if !strings.Contains(text(r.doc(t), "#form-error"), "last operator") {
			t.Errorf("%s the last operator: %q", try.what, text(r.doc(t), "#form-error"))
		}
	}
	if u, _ := e.svc.User(ctx, op.ID); !u.IsOperator || u.DisabledAt != nil {
		t.Fatalf("the last operator changed: %+v", u)
	}

	both := opc.post("/users/invite", url.Values{"email": {"nope"}, "role": {"viewer"}, "tenant": {""}})
	wantStatus(t, both, http.StatusUnprocessableEntity)
	if d := both.doc(t); text(d, "#email-error") == "" || text(d, "#role-error") == "" || d.Find("#invite-form #email").AttrOr("value", "") != "nope" {
		t.Fatalf("operator invite errors: %q / %q", text(d, "#email-error"), text(d, "#role-error"))
	}
	noTenant := opc.post("/users/"+mid+"/role", url.Values{"role": {"viewer"}, "tenant": {""}})
	wantStatus(t, noTenant, http.StatusUnprocessableEntity)
	if !strings.Contains(text(noTenant.doc(t), "#form-error"), "existing tenant") {
		t.Fatalf("a role without its tenant: %q", text(noTenant.doc(t), "#form-error"))
	}
	invited := opc.post("/users/invite", url.Values{"email": {"op2@example.com"}, "role": {"operator"}})
	wantStatus(t, invited, http.StatusSeeOther)
	opLink := opc.get(invited.Header.Get("Location")).doc(t).Find("#new-link-url").AttrOr("value", "")
	ol, _ := url.Parse(opLink)
	op2 := e.client()
	wantStatus(t, op2.post("/invite", url.Values{"token": {ol.Query().Get("token")}, "password": {"op2-password-1"}, "confirm": {"op2-password-1"}}), http.StatusSeeOther)
	wantStatus(t, op2.get("/users"), http.StatusOK)
	if u, _ := e.svc.UserByEmail(ctx, "op2@example.com"); !u.IsOperator {
		t.Fatalf("the invited operator: %+v", u)
	} else {
		// An operator who makes themself a tenant's admin lands on that tenant's members page,
		// not on the users page they may no longer see.
		demoted := op2.post("/users/"+strconv.FormatInt(u.ID, 10)+"/role", url.Values{"role": {"admin"}, "tenant": {strconv.FormatInt(acme.ID, 10)}})
		wantStatus(t, demoted, http.StatusSeeOther)
		if loc := demoted.Header.Get("Location"); loc != tpath(acme, "/members?msg=role-changed") {
			t.Fatalf("an operator's demotion of themself goes to %q", loc)
		}
		wantStatus(t, op2.get(demoted.Header.Get("Location")), http.StatusOK)
		wantStatus(t, opc.post("/users/"+strconv.FormatInt(u.ID, 10)+"/role", url.Values{"role": {"operator"}}), http.StatusSeeOther)
	}

	pw := opc.post("/account/password", url.Values{"current": {"wrong"}, "password": {"short"}, "confirm": {"different"}})
	wantStatus(t, pw, http.StatusUnprocessableEntity)
	if d := pw.doc(t); text(d, "#password-error") == "" || text(d, "#confirm-error") == "" {
		t.Fatalf("password errors: %q %q", text(d, "#password-error"), text(d, "#confirm-error"))
	}
	pw = opc.post("/account/password", url.Values{"current": {"wrong"}, "password": {"short"}, "confirm": {"short"}})
	wantStatus(t, pw, http.StatusUnprocessableEntity)
	if d := pw.doc(t); text(d, "#current-error") == "" || text(d, "#password-error") == "" {
		t.Fatalf("password errors: %q %q", text(d, "#current-error"), text(d, "#password-error"))
	}
	// A mistyped confirmation changes nothing, even with the right current password.
	wantStatus(t, opc.post("/account/password", url.Values{"current": {opPassword}, "password": {"operator-password-9"}, "confirm": {"operator-password-8"}}), http.StatusUnprocessableEntity)
	other := e.login(opEmail, opPassword) // still the old password
	wantStatus(t, opc.post("/account/password", url.Values{"current": {opPassword}, "password": {"operator-password-2"}, "confirm": {"operator-password-2"}}), http.StatusSeeOther)
	wantStatus(t, opc.get("/account"), http.StatusOK)
	if r := other.get("/tenants"); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("the operator's other session after a password change: %d", r.StatusCode)
	}

	manage := tpath(acme, "/manage/delete")
	wrong := opc.post(manage, url.Values{"confirm": {"acm"}})
	wantStatus(t, wrong, http.StatusUnprocessableEntity)
	if text(wrong.doc(t), "#delete-error") == "" {
		t.Fatal("a delete without the typed name gave no inline error")
	}
	wantStatus(t, opc.post(manage, url.Values{"confirm": {"acme"}}), http.StatusSeeOther)
	if _, err := e.svc.Tenant(ctx, acme.ID); err == nil {
		t.Fatal("the tenant survived its deletion")
	}
	wantStatus(t, opc.post(manage, url.Values{"confirm": {"acme"}}), http.StatusNotFound)
	wantStatus(t, opc.post("/tenants/99999/manage/delete", url.Values{"confirm": {"x"}}), http.StatusNotFound)
	if !strings.Contains(opc.get("/audit").body, "tenant.delete") {
		t.Fatal("the security log lacks tenant.delete")
	}
}

// TestAdminDisablesAndEnablesAMember: a tenant's admin disables a member from the members page
// (POST /tenants/:tid/members/:uid/disable): the member's open session ends at once, they cannot
// log in, the page marks them disabled and the change is audited; enabling them lets them log in
// again. A viewer may not disable anyone (403), and the admin cannot reach another tenant's
// member (404). On both dialects.
func TestAdminDisablesAndEnablesAMember(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL))
		e.operator()
		ctx := context.Background()
		acme, other := e.tenant("acme"), e.tenant("other")
		for _, u := range []struct {
			email string
			tn    int64
		}{{"admin@acme.example", acme.ID}, {"m@acme.example", acme.ID}, {"viewer@acme.example", acme.ID}, {"o@other.example", other.ID}} {
			if _, err := e.svc.CreateUser(ctx, u.email, "member-password-1", false, &u.tn, "test", ""); err != nil {
				t.Fatal(err)
			}
		}
		id := func(email string) string {
			t.Helper()
			u, err := e.svc.UserByEmail(ctx, email)
			if err != nil {
				t.Fatal(err)
			}
			return strconv.FormatInt(u.ID, 10)
		}
		v, _ := e.svc.UserByEmail(ctx, "viewer@acme.example")
		if err := e.svc.SetRole(ctx, &acme.ID, v.ID, tenants.RoleViewer, &acme.ID, "test"); err != nil {
			t.Fatal(err)
		}
		admin := e.login("admin@acme.example", "member-password-1")
		member := e.login("m@acme.example", "member-password-1")
		viewer := e.login("viewer@acme.example", "member-password-1")
		disable := tpath(acme, "/members/"+id("m@acme.example")+"/disable")

		wantStatus(t, viewer.post(disable, url.Values{"disable": {"true"}}), http.StatusForbidden)
		wantStatus(t, member.get(tpath(acme, "/limits")), http.StatusOK) // the viewer changed nothing
		wantStatus(t, admin.post(tpath(acme, "/members/"+id("o@other.example")+"/disable"), url.Values{"disable": {"true"}}), http.StatusNotFound)
		if u, _ := e.svc.UserByEmail(ctx, "o@other.example"); u.DisabledAt != nil {
			t.Fatal("an admin of acme disabled a member of another tenant")
		}

		res := admin.post(disable, url.Values{"disable": {"true"}})
		wantStatus(t, res, http.StatusSeeOther)
		if loc := res.Header.Get("Location"); loc != tpath(acme, "/members?msg=member-disabled") {
			t.Fatalf("after disabling: redirect to %q", loc)
		}
		if r := member.get(tpath(acme, "/limits")); r.StatusCode != http.StatusSeeOther || !strings.HasPrefix(r.Header.Get("Location"), "/login") {
			t.Fatalf("the disabled member's open session: status %d to %q, want the login form", r.StatusCode, r.Header.Get("Location"))
		}
		if r := e.client().post("/login", url.Values{"email": {"m@acme.example"}, "password": {"member-password-1"}}); r.StatusCode == http.StatusSeeOther {
			t.Fatal("a disabled member logged in")
		}
		row := admin.get(tpath(acme, "/members")).doc(t).Find(`tr[data-member="m@acme.example"]`)
		if row.Find(".tag.danger").Text() != "disabled" || row.Find(`input[name=disable]`).AttrOr("value", "") != "false" {
			t.Fatalf("the members page after disabling: %q", strings.Join(strings.Fields(row.Text()), " "))
		}
		if a, ok := e.lastAudit(acme, "user.disable"); !ok || a.Actor != "user:admin@acme.example" || a.Detail != "m@acme.example" {
			t.Fatalf("the disabling is audited as %+v", a)
		}

		wantStatus(t, admin.post(disable, url.Values{"disable": {"false"}}), http.StatusSeeOther)
		wantStatus(t, e.login("m@acme.example", "member-password-1").get(tpath(acme, "/limits")), http.StatusOK)
		if _, ok := e.lastAudit(acme, "user.enable"); !ok {
			t.Fatal("enabling the member is not audited")
		}
	})
}

// An admin about to be removed cannot keep a way back in: the invite they made on the Members
// page dies with their removal, so its link shows as dead and cannot be accepted.
func TestARemovedAdminsInviteDiesWithThem(t *testing.T) {
	e := newEnv(t)
	e.operator()
	ctx := context.Background()
	acme := e.tenant("acme")
	leaving, err := e.svc.CreateUser(ctx, "leaving@acme.example", "leaving-password-1", false, &acme.ID, "test", "")
	if err != nil {
		t.Fatal(err)
	}
	admin := e.login("leaving@acme.example", "leaving-password-1")
	members := tpath(acme, "/members")
	created := admin.post(members+"/invite", url.Values{"email": {"backdoor@acme.example"}, "role": {"admin"}})
	wantStatus(t, created, http.StatusSeeOther)
	lu, _ := url.Parse(admin.get(created.Header.Get("Location")).doc(t).Find("#new-link-url").AttrOr("value", ""))
	token := lu.Query().Get("token")

	op := e.login(opEmail, opPassword)
	wantStatus(t, op.post(members+"/"+strconv.FormatInt(leaving.ID, 10)+"/remove", url.Values{"confirm": {"yes"}}), http.StatusSeeOther)
	wantStatus(t, e.client().get("/invite?token="+token), http.StatusNotFound)
	wantStatus(t, e.client().post("/invite", url.Values{"token": {token}, "password": {"backdoor-password-1"}, "confirm": {"backdoor-password-1"}}), http.StatusNotFound)
	if _, err := e.svc.UserByEmail(ctx, "backdoor@acme.example"); err == nil {
		t.Fatal("the removed admin's invite created a user")
	}
}
