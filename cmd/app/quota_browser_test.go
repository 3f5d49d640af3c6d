package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestQuotaAndParentsFromTheDashboardInChromium defines a monthly quota and a limit under it
// through the dashboard's form, with the form's inline errors for a bad zone and a bad parent
// line, and reads the quota's current window on its page, in the quota's zone.
func TestQuotaAndParentsFromTheDashboardInChromium(t *testing.T) {
	chromium := chromiumPath(t, "The dashboard's quota and parents form")
	srv := startTestServer(t, nil, true)
	ctx := newBrowser(t, chromium)
	ctx, cancel := context.WithTimeout(ctx, 75*time.Second)
	defer cancel()
	watchPage(t, ctx)
	dr := driver{t, ctx}
	fail, step, read := dr.fail, dr.step, dr.read
	const password = "a long enough password"
	step("setup",
		chromedp.Navigate(srv.setupURL),
		chromedp.WaitVisible("#confirm"),
		chromedp.SendKeys("#email", "op@example.com"),
		chromedp.SendKeys("#password", password),
		chromedp.SendKeys("#confirm", password),
		chromedp.Submit("#confirm"),
		chromedp.WaitVisible("#new-tenant"),
	)
	step("create tenant", chromedp.SendKeys("#name", "acme"), chromedp.Submit("#name"), chromedp.WaitVisible("#new-limit"))

	// A monthly quota billed on the 31st in a zone that does not exist: the zone is refused inline.
	step("quota with a bad zone",
		chromedp.Click("#new-limit"),
		chromedp.WaitVisible("#limit-form"),
		chromedp.SetValue("#name", "org-monthly"),
		chromedp.SetValue("#kind", "quota"),
		chromedp.SetValue("#rate", "1000"),
		chromedp.SetValue("#calendar", "month"),
		chromedp.SetValue("#timeZone", "Europe/Atlantis"),
		chromedp.SetValue("#anchorDay", "31"),
		chromedp.Click("#save-limit"),
		chromedp.WaitVisible("#timeZone-error"),
	)
	if msg := read("zone error", chromedp.Text("#timeZone-error")); !strings.Contains(msg, "unknown time zone") {
		t.Fatalf("inline zone error = %q", msg)
	}
	const zone = "Australia/Sydney"
	step("fix the zone",
		chromedp.SetValue("#timeZone", zone),
		chromedp.Click("#save-limit"),
		chromedp.WaitVisible("#quota-window"),
	)
	// The window the page shows is this month's (from the 31st, clamped) in Sydney's time.
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	start, reset := monthFrom31(time.Now().In(loc))
	attr := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.AttributeValue(sel, "datetime"))
		if err != nil || !v.Exists {
			fail("datetime of "+sel, err)
		}
		return v.Value
	}
	gotStart, gotReset := attr("#window-start"), attr("#window-reset")
	if gotStart != start.Format(time.RFC3339) || gotReset != reset.Format(time.RFC3339) {
		t.Fatalf("window on the page [%s, %s), want [%s, %s)", gotStart, gotReset, start.Format(time.RFC3339), reset.Format(time.RFC3339))
	}
	if shown := read("window text", chromedp.Text("#window-reset")); !strings.Contains(shown, reset.Format("Mon 2 Jan 2006 15:04")) {
		t.Fatalf("reset shown as %q, want Sydney's %s", shown, reset.Format("Mon 2 Jan 2006 15:04 MST"))
	}

	// A limit under the quota: a malformed parents line is refused inline, then it saves.
	step("limit with a bad parent line",
		chromedp.Click(`nav.tabs a[href$="/limits"]`),
		chromedp.WaitVisible("#new-limit"),
		chromedp.Click("#new-limit"),
		chromedp.WaitVisible("#limit-form"),
		chromedp.SetValue("#name", "team"),
		chromedp.SetValue("#rate", "100"),
		chromedp.SetValue("#period", "3600000"),
		chromedp.SetValue("#parents", "org-monthly org:{org"),
		chromedp.Click("#save-limit"),
		chromedp.WaitVisible("#parents-error"),
	)
	if msg := read("parents error", chromedp.Text("#parents-error")); !strings.Contains(msg, "line 1, the key template") {
		t.Fatalf("inline parents error = %q", msg)
	}
	step("fix the parent",
		chromedp.SetValue("#parents", "org-monthly org:{org}"),
		chromedp.Click("#save-limit"),
		chromedp.WaitVisible("#limit-name"),
	)
	if cfg := read("config", chromedp.Text("#config")); !strings.Contains(cfg, "org-monthly under key org:{org}") {
		t.Fatalf("the team's page does not show its parent: %q", cfg)
	}
}

// monthFrom31 is the monthly window billed on the 31st that contains now, computed by asking
// each month for its last day (an independent statement of "clamped to the month's last day").
func monthFrom31(now time.Time) (time.Time, time.Time) {
	anchor := func(y int, m time.Month) time.Time {
		last := time.Date(y, m+1, 0, 12, 0, 0, 0, time.UTC).Day()
		return time.Date(y, m, min(31, last), 0, 0, 0, 0, now.Location())
	}
	y, m, _ := now.Date()
	this := anchor(y, m)
	if now.Before(this) {
		return anchor(y, m-1), this
	}
	return this, anchor(y, m+1)
}
