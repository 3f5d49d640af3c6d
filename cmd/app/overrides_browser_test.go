package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestOverrideFromTheDashboardInChromium adds an override on a limit's page in a real browser
// (first with a mistake, shown inline with what was typed kept), then shows that a decision
// through /v1 uses it, edits it into a deny, and deletes it.
func TestOverrideFromTheDashboardInChromium(t *testing.T) {
	chromium := chromiumPath(t, "Adding an override from the dashboard")
	const (
		email    = "override-operator@example.com"
		password = "a long enough password"
	)
	srv := startTestServer(t, map[string]string{"SLUICE_ADMIN_EMAIL": email, "SLUICE_ADMIN_PASSWORD": password}, false)
	base := srv.base
	ctx := newBrowser(t, chromium)
	ctx, cancelTimeout := context.WithTimeout(ctx, 75*time.Second)
	defer cancelTimeout()
	watch := watchPage(t, ctx)

	dr := driver{t, ctx}
	step, read := dr.step, dr.read

	logIn(dr, base, email, password)
	step("create tenant",
		chromedp.SendKeys("#name", "acme"),
		chromedp.Submit("#name"),
		chromedp.WaitVisible("#new-limit"),
	)
	step("create limit",
		chromedp.Click("#new-limit"),
		chromedp.WaitVisible("#limit-form"),
		chromedp.SetValue("#name", "api"),
		chromedp.SetValue("#rate", "2"),
		chromedp.SetValue("#period", "86400000"),
		chromedp.Click("#save-limit"),
		chromedp.WaitVisible("#limit-name"),
	)
	limitURL := strings.SplitN(read("limit URL", chromedp.Location()), "?", 2)[0]
	step("create key",
		chromedp.Click(`nav.tabs a[href$="/keys"]`),
		chromedp.WaitVisible("#new-key-form"),
		chromedp.SendKeys("#label", "overrides"),
		chromedp.Click("#create-key"),
		chromedp.WaitVisible("#new-secret"),
	)
	secret := read("secret", chromedp.Value("#new-secret"))

	// A match with a "*" inside is refused inline; the typed values stay.
	step("open the override form",
		chromedp.Navigate(limitURL),
		chromedp.WaitVisible("#no-overrides"),
		chromedp.Click("#add-override"),
		chromedp.WaitVisible("#override-form"),
		chromedp.SetValue("#match", "org:*:acme"),
		chromedp.SetValue("#capacity", "5"),
		chromedp.Click("#save-override"),
		chromedp.WaitVisible("#match-error"),
	)
	if msg := read("match error", chromedp.Text("#match-error")); !strings.Contains(msg, `one "*" at the end`) {
		t.Fatalf("inline match error = %q", msg)
	}
	if v := read("kept capacity", chromedp.Value("#capacity")); v != "5" {
		t.Fatalf("the capacity typed was not kept: %q", v)
	}
	step("fix the override",
		chromedp.SetValue("#match", "org:acme:*"),
		chromedp.Click("#save-override"),
		chromedp.WaitVisible(`#override-rows tr[data-match="org:acme:*"]`),
	)
	if effect := read("effect", chromedp.Text(`#override-rows tr[data-match="org:acme:*"] .effect`)); effect != "capacity 5" {
		t.Fatalf("listed effect = %q", effect)
	}
	// A decision through /v1 now uses it: capacity 5 instead of the limit's 2.
	for i := range 6 {
		code, out := v1(t, base, secret, "/v1/limits/api/limit", `{"key":"org:acme:7"}`)
		if code != 200 || out["override"] != "org:acme:*" || (out["ok"] == true) != (i < 5) {
			t.Fatalf("decision %d: %d %v", i, code, out)
		}
	}
	if _, out := v1(t, base, secret, "/v1/limits/api/limit", `{"key":"user:1"}`); out["override"] != nil {
		t.Fatalf("a key outside the prefix: %v", out)
	}

	step("edit into a deny",
		chromedp.Click(`#override-rows tr[data-match="org:acme:*"] .edit-override`),
		chromedp.WaitVisible("#override-form"),
		chromedp.Clear("#capacity"),
		chromedp.SetValue("#action", "deny"),
		chromedp.Click("#save-override"),
		chromedp.WaitVisible(`#override-rows tr[data-match="org:acme:*"]`),
	)
	if effect := read("effect", chromedp.Text(`#override-rows tr[data-match="org:acme:*"] .effect`)); effect != "deny" {
		t.Fatalf("listed effect after the edit = %q", effect)
	}
	if _, out := v1(t, base, secret, "/v1/limits/api/limit", `{"key":"org:acme:8"}`); out["ok"] != false || out["override"] != "org:acme:*" {
		t.Fatalf("decision under deny: %v", out)
	}
	step("delete",
		chromedp.Click(`#override-rows tr[data-match="org:acme:*"] .delete-override`),
		chromedp.WaitVisible("#no-overrides"),
	)
	if _, out := v1(t, base, secret, "/v1/limits/api/limit", `{"key":"org:acme:8"}`); out["ok"] != true || out["override"] != nil {
		t.Fatalf("decision after the delete: %v", out)
	}
	watch.wantSecureResponses(t, base, "/login", "/tenants/")
}
