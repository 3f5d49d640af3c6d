package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestAnalyticsPageShowsTheTopRefusedKey drives the dashboard in Chromium: refusals made through
// /v1 show on the analytics page with the most refused key first, and a key refused while the
// page is open appears without a reload (the panel's poll).
func TestAnalyticsPageShowsTheTopRefusedKey(t *testing.T) {
	srv, dr := operatorOnTenant(t, "The analytics page's top refused keys", "operator@example.com", 120*time.Second)
	base := srv.base
	step, read := dr.step, dr.read
	step("create a limit of one a day",
		chromedp.Click("#new-limit"),
		chromedp.WaitVisible("#limit-form"),
		chromedp.SetValue("#name", "api"),
		chromedp.SetValue("#rate", "1"),
		chromedp.SetValue("#period", "86400000"),
		chromedp.Click("#save-limit"),
		chromedp.WaitVisible("#limit-name"),
	)
	step("create an API key",
		chromedp.Click(`nav.tabs a[href$="/keys"]`),
		chromedp.WaitVisible("#new-key-form"),
		chromedp.SendKeys("#label", "analytics"),
		chromedp.Click("#create-key"),
		chromedp.WaitVisible("#new-secret"),
	)
	secret := read("secret", chromedp.Value("#new-secret"))
	refuse := func(key string, n int) {
		t.Helper()
		for i := range n + 1 { // the first is admitted (one a day), the rest refused
			code, d := v1(t, base, secret, "/v1/limits/api/limit", `{"key":"`+key+`"}`)
			if code != http.StatusOK || (d["ok"] == true) != (i == 0) {
				t.Fatalf("decision %d for %s: %d %v", i, key, code, d)
			}
		}
	}
	refuse("alice", 3)
	refuse("bob", 1)

	step("open the analytics page",
		chromedp.Click(`nav.tabs a[href$="/analytics"]`),
		chromedp.WaitVisible(`#top-refused tbody tr[data-key="alice"]`),
	)
	if first := read("top refused key", chromedp.Text(`#top-refused tbody tr:first-child td.key`)); first != "alice" {
		t.Fatalf("the top refused key is %q, want alice", first)
	}
	if rows := read("top refused rows", chromedp.Text(`#top-refused tbody`)); !strings.Contains(rows, "bob") {
		t.Fatalf("bob's refusal is missing: %q", rows)
	}
	refuse("carol", 5)
	step("a key refused while the page is open appears on the next poll, first",
		chromedp.WaitVisible(`#top-refused tbody tr[data-key="carol"]`),
	)
	if first := read("top refused key after the poll", chromedp.Text(`#top-refused tbody tr:first-child td.key`)); first != "carol" {
		t.Fatalf("after the poll the top refused key is %q, want carol", first)
	}
}
