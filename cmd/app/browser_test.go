package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// v1 calls the JSON API as a tenant's backend would.
func v1(t *testing.T, base, secret, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

func TestDashboardEndToEndInChromium(t *testing.T) {
	chromium := chromiumPath(t, "The dashboard's end-to-end flow")
	srv := startTestServer(t, nil, true)
	base, setupURL := srv.base, srv.setupURL
	ctx := newBrowser(t, chromium)
	ctx, cancelTimeout := context.WithTimeout(ctx, 75*time.Second)
	defer cancelTimeout()
	watch := watchPage(t, ctx)

	dr := driver{t, ctx}
	fail, step, read := dr.fail, dr.step, dr.read
	const (
		email    = "first-operator@example.com"
		password = "a long enough password"
	)

	// First start: the printed link sets up the first operator (and logs them in).
	dr.setUpFirstOperator(setupURL, email, password)
	// Log out and in again through the login form.
	step("log out after setup",
		chromedp.Click("#logout"),
		chromedp.WaitVisible(`form[action="/login"] #password`),
	)
	step("log in",
		chromedp.SendKeys("#email", email),
		chromedp.SendKeys("#password", password),
		chromedp.Submit("#password"),
		chromedp.WaitVisible("#new-tenant"),
	)
	dr.createTenant("acme")

	// A limit with an invalid rate shows the API's validation message inline; fixed, it saves.
	step("invalid limit",
		chromedp.Click("#new-limit"),
		chromedp.WaitVisible("#limit-form"),
		chromedp.SetValue("#name", "api"),
		chromedp.SetValue("#rate", "-3"),
		chromedp.SetValue("#period", "86400000"), // 10 a day: values stay put during the test
		chromedp.Click("#save-limit"),
		chromedp.WaitVisible("#rate-error"),
	)
	rateErr := read("rate error", chromedp.Text("#rate-error"))
	if !strings.Contains(rateErr, "must be a number > 0") {
		t.Fatalf("inline rate error = %q", rateErr)
	}
	step("fix limit",
		chromedp.SetValue("#rate", "10"),
		chromedp.Click("#save-limit"),
		chromedp.WaitVisible("#limit-name"),
	)
	limitURL := strings.SplitN(read("limit URL", chromedp.Location()), "?", 2)[0]

	// An API key, shown once, with a working copy button (app.js, loaded under the CSP).
	step("create key",
		chromedp.Click(`nav.tabs a[href$="/keys"]`),
		chromedp.WaitVisible("#new-key-form"),
		chromedp.SendKeys("#label", "e2e"),
		chromedp.Click("#create-key"),
		chromedp.WaitVisible("#new-secret"),
	)
	secret := read("secret", chromedp.Value("#new-secret"))
	if !strings.HasPrefix(secret, "sk_live_") {
		t.Fatalf("secret = %q", secret)
	}
	// The clipboard write is asynchronous: wait (bounded) for the button to report it.
	step("copy", chromedp.Click(`button[data-copy="new-secret"]`))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](
		`document.querySelector('button[data-copy="new-secret"]').textContent !== "Copy"`,
		chromedp.WithPollingTimeout(5*time.Second))); err != nil {
		t.Fatalf("the copy button did nothing (is app.js loaded?): %v", err)
	}
	step("key not shown again", chromedp.Reload(), chromedp.WaitVisible("#keys"))
	keysAgain := read("keys page", chromedp.OuterHTML("html"))
	if strings.Contains(keysAgain, secret) {
		t.Fatal("the secret is shown a second time")
	}
	// The reload asked for the page again; it created no second key (the list the browser shows).
	if n := read("key rows", chromedp.Evaluate[string](`String(document.querySelectorAll('#keys tbody tr[data-key-id]').length)`)); n != "1" {
		t.Fatalf("after a reload the key list shows %s keys, want 1", n)
	}

	// Open the limit page, then consume through /v1: htmx refreshes the value in place.
	step("open limit page", chromedp.Navigate(limitURL), chromedp.WaitVisible("#recent-keys"))
	for range 3 {
		if code, out := v1(t, base, secret, "/v1/limits/api/limit", `{"key":"alice"}`); code != 200 || out["ok"] != true {
			t.Fatalf("/v1 limit: %d %v", code, out)
		}
	}
	if code, out := v1(t, base, secret, "/v1/limits/api/limit", `{"key":"alice","count":8}`); code != 200 || out["ok"] != false {
		t.Fatalf("/v1 limit count 8: %d %v (want a refusal)", code, out)
	}
	step("live value", chromedp.WaitVisible(`#key-rows tr[data-key="alice"]`)) // no reload: htmx polled it
	live := read("live value", chromedp.Text(`#key-rows tr[data-key="alice"] .value`))
	if live != "7" {
		t.Fatalf("live value of alice = %q, want 7", live)
	}
	step("look up key",
		chromedp.SetValue("#lookup-key", "alice"),
		chromedp.Submit("#lookup-key"),
		chromedp.WaitVisible("#lookup-value"),
	)
	looked := read("looked-up value", chromedp.Text("#lookup-value"))
	if looked != "7" {
		t.Fatalf("looked-up value = %q, want 7", looked)
	}
	step("chart", chromedp.WaitVisible("figure.chart svg"))
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		fail("screenshot", err)
	}
	dir := os.Getenv("SLUICE_SCREENSHOT_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	shot := filepath.Join(dir, "sluice-limit-page.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the limit page: %s", shot)

	// Reset the key: full again.
	step("reset key", chromedp.Click("#lookup-reset"), chromedp.WaitVisible("#flash"))
	afterReset := read("value after reset", chromedp.Text("#lookup-value"))
	if afterReset != "10" {
		t.Fatalf("value after reset = %q, want 10", afterReset)
	}

	// Revoke the key: /v1 refuses it at once.
	step("revoke key",
		chromedp.Click(`nav.tabs a[href$="/keys"]`),
		chromedp.WaitVisible("button.revoke"),
		chromedp.Click(`#keys input[name="confirm"]`),
		chromedp.Click("button.revoke"),
		chromedp.WaitVisible("#keys .tag.danger"),
	)
	if code, _ := v1(t, base, secret, "/v1/limits/api/limit", `{"key":"alice"}`); code != http.StatusUnauthorized {
		t.Fatalf("/v1 with a revoked key: %d, want 401", code)
	}

	// Log out: the dashboard refuses us, and a copy of the old cookie is dead too.
	cookies, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		fail("cookies", err)
	}
	var session string
	for _, c := range cookies.Cookies {
		if c.Name == "sluice_session" {
			session = c.Value
			if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict {
				t.Fatalf("session cookie attributes: %+v", c)
			}
		}
	}
	if session == "" {
		t.Fatal("no sluice_session cookie in the browser")
	}
	step("log out",
		chromedp.Click("#logout"),
		chromedp.WaitVisible(`form[action="/login"]`),
		chromedp.Navigate(limitURL),
		chromedp.WaitVisible(`form[action="/login"]`),
	)
	after := read("location after logout", chromedp.Location())
	if !strings.Contains(after, "/login") {
		t.Fatalf("after logout the limit page went to %q", after)
	}
	req, _ := http.NewRequest(http.MethodGet, limitURL, nil)
	req.AddCookie(&http.Cookie{Name: "sluice_session", Value: session})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/login") {
		t.Fatalf("old cookie after logout: %d %q", res.StatusCode, res.Header.Get("Location"))
	}
	// Every page the browser loaded on the way carried the security headers, and the CSP
	// blocked nothing while they worked (htmx refreshes, the copy button, the chart).
	watch.wantSecureResponses(t, base, "/setup", "/login", "/tenants", "/tenants/")
}
