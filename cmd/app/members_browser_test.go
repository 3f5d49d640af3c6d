package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestInviteAcceptChangeRoleRemoveInChromium: an operator invites a viewer from the members
// page and copies the link shown once; the invitee, in a browser context of their own (separate
// cookies), accepts it with a password and is logged in, read-only; the operator makes them an
// admin, then removes them; the removed member's next page load lands on the login form.
func TestInviteAcceptChangeRoleRemoveInChromium(t *testing.T) {
	chromium := chromiumPath(t, "The members flow")
	srv := startTestServer(t, nil, true)
	root := newBrowser(t, chromium)
	ctx, cancel := context.WithTimeout(root, 90*time.Second)
	defer cancel()
	watchPage(t, ctx)
	op := driver{t, ctx}
	const password = "a long enough password"
	op.setUpFirstOperator(srv.setupURL, "op@example.com", password)
	op.createTenant("acme")
	link := invite(op, srv.base, "new@acme.example", "viewer")

	// The invitee: a browser context of its own in the same browser, so no shared cookies.
	guest := acceptInvite(t, root, link, "invitee password 1")
	guest.step("the invitee's dashboard links its members page", chromedp.WaitVisible(`a[href="/tenants/1/members"]`))
	guest.step("the viewer reads the members page", chromedp.Navigate(srv.base+"/tenants/1/members"), chromedp.WaitVisible(`tr[data-member="new@acme.example"]`))
	if n := guest.read("invite forms", chromedp.Evaluate[string](`String(document.querySelectorAll("#invite-form").length)`)); n != "0" {
		guest.fail("a viewer sees the invite form", nil)
	}

	row := `tr[data-member="new@acme.example"]`
	op.step("make them an admin",
		chromedp.Navigate(srv.base+"/tenants/1/members"),
		chromedp.WaitVisible(row),
		chromedp.SetValue(row+" select[name=role]", "admin"),
		chromedp.Submit(row+" select[name=role]"),
		chromedp.WaitVisible(".flash"),
	)
	if got := op.read("role after change", chromedp.Value(row+" select[name=role]")); got != "admin" {
		t.Fatalf("role after change = %q", got)
	}
	guest.step("the admin now sees the invite form", chromedp.Navigate(srv.base+"/tenants/1/members"), chromedp.WaitVisible("#invite-form"))

	op.step("remove them",
		chromedp.Click(row+" .remove-form input[type=checkbox]"),
		chromedp.Click(row+" .remove"),
		// The role change's flash is still on the page until the removal's answer replaces it.
		chromedp.WaitNotPresent(row),
		chromedp.WaitVisible(".flash"),
	)
	if n := op.read("rows of the removed member", chromedp.Evaluate[string](`String(document.querySelectorAll('`+row+`').length)`)); n != "0" {
		op.fail("the removed member is still listed", nil)
	}
	guest.step("the removed member's next page is the login form",
		chromedp.Navigate(srv.base+"/tenants/1/limits"),
		chromedp.WaitVisible(`form[action="/login"]`),
	)
	if where := guest.read("location", chromedp.Location()); !strings.Contains(where, "/login") {
		guest.fail("landed on "+where, nil)
	}
}
