package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestSuspendAndResumeATenantInChromium: an operator suspends a tenant from its Manage page
// (reached from All tenants), which needs the tenant's name typed out; the tenant's API key is
// then refused with 403 tenant_suspended, and its admin, in a browser context of their own, reads
// the dashboard under the suspension banner but changes nothing (creating a key is a 403 page,
// and no key appears). The operator resumes it: the same key works again and the admin can
// change things again.
func TestSuspendAndResumeATenantInChromium(t *testing.T) {
	chromium := chromiumPath(t, "Suspending and resuming a tenant")
	const (
		email    = "suspend-operator@example.com"
		password = "a long enough password"
	)
	srv := startTestServer(t, map[string]string{"SLUICE_ADMIN_EMAIL": email, "SLUICE_ADMIN_PASSWORD": password}, false)
	root := newBrowser(t, chromium)
	ctx, cancel := context.WithTimeout(root, 90*time.Second)
	defer cancel()
	watch := watchPage(t, ctx)
	op := driver{t, ctx}

	logIn(op, srv.base, email, password)
	op.step("create tenant", chromedp.SendKeys("#name", "acme"), chromedp.Submit("#name"), chromedp.WaitVisible("#new-limit"))
	op.step("create limit",
		chromedp.Click("#new-limit"),
		chromedp.WaitVisible("#limit-form"),
		chromedp.SetValue("#name", "api"),
		chromedp.SetValue("#rate", "10"),
		chromedp.SetValue("#period", "86400000"),
		chromedp.Click("#save-limit"),
		chromedp.WaitVisible("#limit-name"),
	)
	op.step("create key",
		chromedp.Click(`nav.tabs a[href$="/keys"]`),
		chromedp.WaitVisible("#new-key-form"),
		chromedp.SendKeys("#label", "backend"),
		chromedp.Click("#create-key"),
		chromedp.WaitVisible("#new-secret"),
	)
	secret := op.read("secret", chromedp.Value("#new-secret"))
	decide := func() (int, map[string]any) {
		t.Helper()
		return v1(t, srv.base, secret, "/v1/limits/api/limit", `{"key":"alice"}`)
	}
	if code, out := decide(); code != http.StatusOK || out["ok"] != true {
		t.Fatalf("/v1 before the suspension: %d %v", code, out)
	}

	// The tenant's admin: invited by the operator, in a browser context of its own.
	link := invite(op, srv.base, "admin@acme.example", "admin")
	admin := acceptInvite(t, root, link, "admin password 1")
	keysPage := srv.base + "/tenants/1/keys"
	keyRows := func(d driver) string {
		t.Helper()
		return d.read("key rows", chromedp.Evaluate[string](`String(document.querySelectorAll('#keys tbody tr[data-key-id]').length)`))
	}

	op.step("open the tenant's Manage page from All tenants",
		chromedp.Click(`a.toplink[href="/tenants"]`),
		chromedp.WaitVisible(`#tenants tr[data-tenant="acme"]`),
		chromedp.Click(`#tenants tr[data-tenant="acme"] a[href$="/manage"]`),
		chromedp.WaitVisible("#suspend-tenant"),
	)
	op.step("suspend with a wrong name",
		chromedp.SendKeys("#suspend-tenant #confirm", "acm"),
		chromedp.Submit("#suspend-tenant #confirm"),
		chromedp.WaitVisible("#state-error"),
	)
	if code, _ := decide(); code != http.StatusOK {
		t.Fatalf("/v1 after an unconfirmed suspension: %d, want 200", code)
	}
	op.step("suspend", // the form shown again starts empty
		chromedp.SendKeys("#suspend-tenant #confirm", "acme"),
		chromedp.Submit("#suspend-tenant #confirm"),
		chromedp.WaitVisible("#resume-tenant"),
		chromedp.WaitVisible("#suspended"),
	)
	if code, out := decide(); code != http.StatusForbidden || out["code"] != "tenant_suspended" {
		t.Fatalf("/v1 of the suspended tenant: %d %v, want 403 tenant_suspended", code, out)
	}

	admin.step("the admin reads the keys page under the banner",
		chromedp.Navigate(keysPage),
		chromedp.WaitVisible("#suspended-banner"),
		chromedp.WaitVisible("#keys"),
	)
	// Read-only: no form to create or revoke a key (a post of one is 403, the dashboard's tests
	// check every route).
	if n := admin.read("key forms", chromedp.Evaluate[string](`String(document.querySelectorAll("#new-key-form, #keys form").length)`)); n != "0" {
		t.Fatalf("the admin of a suspended tenant is offered %s key forms, want none", n)
	}
	if n := keyRows(admin); n != "1" {
		t.Fatalf("the suspended tenant's key list shows %s keys, want the operator's 1", n)
	}
	admin.step("the members page", chromedp.Navigate(srv.base+"/tenants/1/members"), chromedp.WaitVisible(`tr[data-member="admin@acme.example"]`))
	if n := admin.read("invite forms", chromedp.Evaluate[string](`String(document.querySelectorAll("#invite-form").length)`)); n != "0" {
		t.Fatal("the admin of a suspended tenant is offered the invite form")
	}

	op.step("resume",
		chromedp.Click("#resume-tenant button"),
		chromedp.WaitVisible("#suspend-tenant"),
	)
	if n := op.read("suspended tags", chromedp.Evaluate[string](`String(document.querySelectorAll("#suspended").length)`)); n != "0" {
		t.Fatal("the resumed tenant's Manage page still says it is suspended")
	}
	if code, out := decide(); code != http.StatusOK || out["ok"] != true {
		t.Fatalf("/v1 after resuming: %d %v, want 200 ok", code, out)
	}
	admin.step("the admin creates a key again",
		chromedp.Navigate(keysPage),
		chromedp.WaitVisible("#new-key-form"),
		chromedp.SendKeys("#label", "after resuming"),
		chromedp.Click("#create-key"),
		chromedp.WaitVisible("#new-secret"),
	)
	if n := admin.read("banners", chromedp.Evaluate[string](`String(document.querySelectorAll("#suspended-banner").length)`)); n != "0" {
		t.Fatal("the resumed tenant's pages still carry the suspension banner")
	}
	if n := keyRows(admin); n != "2" {
		t.Fatalf("after resuming the key list shows %s keys, want 2", n)
	}
	watch.wantSecureResponses(t, srv.base, "/login", "/tenants", "/tenants/1/manage")
}
