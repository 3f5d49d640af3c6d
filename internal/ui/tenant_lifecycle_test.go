package ui_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/tenants"
)

// TestOperatorRenamesSuspendsAndResumesATenant: renaming shows its problems inline; a suspension
// needs the tenant's name typed out, refuses the tenant's API keys at once and makes its
// members' dashboard read-only (operators still act); resuming undoes both; all of it audited.
func TestOperatorRenamesSuspendsAndResumesATenant(t *testing.T) {
	e := newEnv(t)
	e.operator()
	ctx := context.Background()
	acme, other := e.tenant("acme"), e.tenant("other")
	if _, err := e.svc.CreateUser(ctx, "member@acme.example", "member-password-1", false, &acme.ID, "test", ""); err != nil {
		t.Fatal(err)
	}
	_, secret, err := e.svc.CreateKey(ctx, acme.ID, tenants.KindSecret, "backend", "test")
	if err != nil {
		t.Fatal(err)
	}
	op := e.login(opEmail, opPassword)
	member := e.login("member@acme.example", "member-password-1")
	manage := "/tenants/" + strconv.FormatInt(acme.ID, 10) + "/manage"

	wantStatus(t, member.get(manage), http.StatusNotFound) // operators only
	page := op.get(manage)
	wantStatus(t, page, http.StatusOK)
	if v := page.doc(t).Find("#rename-tenant #name").AttrOr("value", ""); v != "acme" {
		t.Fatalf("rename form starts with %q", v)
	}
	for name, want := range map[string]string{"other": "exists", "no spaces": "letters"} {
		r := op.post(manage+"/rename", url.Values{"name": {name}})
		wantStatus(t, r, http.StatusUnprocessableEntity)
		d := r.doc(t)
		if !strings.Contains(text(d, "#name-error"), want) || d.Find("#rename-tenant #name").AttrOr("value", "") != name {
			t.Errorf("rename to %q: error %q, kept %q", name, text(d, "#name-error"), d.Find("#rename-tenant #name").AttrOr("value", ""))
		}
	}
	wantStatus(t, op.post(manage+"/rename", url.Values{"name": {"acme-corp"}}), http.StatusSeeOther)
	if tn, _ := e.svc.Tenant(ctx, acme.ID); tn.Name != "acme-corp" {
		t.Fatalf("name after rename: %q", tn.Name)
	}

	wrong := op.post(manage+"/state", url.Values{"suspend": {"true"}, "confirm": {"acme"}})
	wantStatus(t, wrong, http.StatusUnprocessableEntity)
	if text(wrong.doc(t), "#state-error") == "" {
		t.Fatal("a suspension without the typed name gave no inline error")
	}
	if _, err := e.svc.Authenticate(ctx, secret, tenants.KindSecret); err != nil {
		t.Fatalf("the key stopped working without a confirmed suspension: %v", err)
	}
	wantStatus(t, op.post(manage+"/state", url.Values{"suspend": {"true"}, "confirm": {"acme-corp"}}), http.StatusSeeOther)
	if _, err := e.svc.Authenticate(ctx, secret, tenants.KindSecret); !errors.Is(err, tenants.ErrTenantSuspended) {
		t.Fatalf("the suspended tenant's key: %v, want ErrTenantSuspended", err)
	}
	keys := member.get(tpath(acme, "/keys"))
	wantStatus(t, keys, http.StatusOK)
	if keys.doc(t).Find("#suspended-banner").Length() != 1 {
		t.Fatal("the member's pages do not say the tenant is suspended")
	}
	wantStatus(t, member.post(tpath(acme, "/keys"), url.Values{"label": {"x"}, "kind": {"secret"}}), http.StatusForbidden)
	wantStatus(t, op.post(tpath(acme, "/keys"), url.Values{"label": {"ops"}, "kind": {"secret"}}), http.StatusSeeOther)
	// The members page shows its forms to whoever may use them: an operator, not the tenant's
	// members (it hid them from operators too, who may change a suspended tenant's members).
	if op.get(tpath(acme, "/members")).doc(t).Find("#invite-form").Length() != 1 {
		t.Error("the members page of a suspended tenant hides the invite form from an operator")
	}
	if member.get(tpath(acme, "/members")).doc(t).Find("#invite-form").Length() != 0 {
		t.Error("the members page of a suspended tenant shows its member the invite form")
	}
	if _, err := e.svc.Tenant(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(op.get("/tenants").body, "suspended") {
		t.Fatal("the tenant list does not mark the suspended tenant")
	}

	wantStatus(t, op.post(manage+"/state", url.Values{"suspend": {"false"}}), http.StatusSeeOther)
	if _, err := e.svc.Authenticate(ctx, secret, tenants.KindSecret); err != nil {
		t.Fatalf("the key after resuming: %v", err)
	}
	wantStatus(t, member.post(tpath(acme, "/keys"), url.Values{"label": {"x"}, "kind": {"secret"}}), http.StatusSeeOther)
	wantStatus(t, op.get("/tenants/99999/manage"), http.StatusNotFound)
	// Suspending or resuming a tenant that does not exist is the not-found page, confirmed or not.
	for _, form := range []url.Values{{"suspend": {"true"}, "confirm": {"ghost"}}, {"suspend": {"true"}}, {"suspend": {"false"}}} {
		missing := op.post("/tenants/99999/manage/state", form)
		wantStatus(t, missing, http.StatusNotFound)
		if d := missing.doc(t); text(d, ".error-page h1") != "Not found" || d.Find("#suspend-tenant, #resume-tenant").Length() != 0 {
			t.Fatalf("state change %v of a missing tenant: not the not-found page:\n%s", form, missing.body)
		}
	}

	audit := op.get("/audit").body
	for _, action := range []string{"tenant.rename", "tenant.suspend", "tenant.resume"} {
		if !strings.Contains(audit, action) {
			t.Errorf("the security log lacks %s", action)
		}
	}
}
