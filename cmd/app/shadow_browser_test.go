package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboardSwitchesAShadowLimitToEnforce drives the dashboard in Chromium: it creates a limit
// in shadow mode with a penalty (an invalid penalty first, shown inline), watches a would-be
// refusal appear on the limit's page, switches the limit to enforce through the confirmation
// page, and checks through /v1 that the limit now refuses the key its shadow decisions used up.
func TestDashboardSwitchesAShadowLimitToEnforce(t *testing.T) {
	srv, dr := operatorOnTenant(t, "Switching a shadow limit to enforce from the dashboard", "operator@example.com", 90*time.Second)
	base := srv.base
	step, read := dr.step, dr.read
	step("a bad penalty is refused inline",
		chromedp.Click("#new-limit"),
		chromedp.WaitVisible("#limit-form"),
		chromedp.SetValue("#name", "beta"),
		chromedp.SetValue("#rate", "1"),
		chromedp.SetValue("#period", "86400000"), // one a day: nothing refills during the test
		chromedp.SetValue("#mode", "shadow"),
		chromedp.SetValue("#penalty", "-5"),
		chromedp.Click("#save-limit"),
		chromedp.WaitVisible("#penalty-error"),
	)
	if msg := read("penalty error", chromedp.Text("#penalty-error")); !strings.Contains(msg, "penalty") && !strings.Contains(msg, "milliseconds") {
		t.Fatalf("penalty error = %q", msg)
	}
	if mode := read("mode kept", chromedp.Value("#mode")); mode != "shadow" {
		t.Fatalf("the form lost the mode the user chose: %q", mode)
	}
	step("save the shadow limit",
		chromedp.SetValue("#penalty", "60000"),
		chromedp.Click("#save-limit"),
		chromedp.WaitVisible("#switch-enforce"),
	)
	limitURL := strings.SplitN(read("limit URL", chromedp.Location()), "?", 2)[0]
	if mode := read("mode tag", chromedp.Text("#limit-mode")); mode != "shadow" {
		t.Fatalf("mode tag = %q", mode)
	}
	if cfg := read("config", chromedp.Text("#config")); !strings.Contains(cfg, "shadow") || !strings.Contains(cfg, "1 min") {
		t.Fatalf("config does not show the mode and the penalty: %q", cfg)
	}

	step("create an API key",
		chromedp.Click(`nav.tabs a[href$="/keys"]`),
		chromedp.WaitVisible("#new-key-form"),
		chromedp.SendKeys("#label", "shadow"),
		chromedp.Click("#create-key"),
		chromedp.WaitVisible("#new-secret"),
	)
	secret := read("secret", chromedp.Value("#new-secret"))
	// One admission, then a would-be refusal: admitted (200, ok) with what enforcement would say.
	for i, wantShadowOK := range []bool{true, false} {
		code, d := v1(t, base, secret, "/v1/limits/beta/limit", `{"key":"alice","throws":true}`)
		sh, _ := d["shadow"].(map[string]any)
		if code != http.StatusOK || d["ok"] != true || sh == nil || sh["ok"] != wantShadowOK {
			t.Fatalf("shadow decision %d: %d %v", i, code, d)
		}
	}

	step("the limit page shows the would-be refusal",
		chromedp.Navigate(limitURL),
		chromedp.WaitVisible("#shadow-note"),
		chromedp.WaitVisible("figure.chart .total-shadow-refused"),
	)
	if n := read("would-be refusals", chromedp.Text("#shadow-refused")); n != "1" {
		t.Fatalf("would-be refusals shown: %q, want 1", n)
	}
	step("switch to enforce: the confirmation first",
		chromedp.Click("#switch-enforce"),
		chromedp.WaitVisible("#confirm-enforce"),
	)
	if impact := read("impact", chromedp.Text("#enforce-impact")); !strings.Contains(impact, "1 requests") {
		t.Fatalf("the confirmation does not say what enforcing would have refused: %q", impact)
	}
	if mode := storedMode(t, base, secret, "beta"); mode != "shadow" {
		t.Fatalf("the limit changed before the confirmation: %q", mode)
	}
	step("confirm",
		chromedp.Click("#confirm-enforce"),
		chromedp.WaitVisible("#flash"),
		chromedp.WaitVisible("#limit-mode"),
	)
	if mode := read("mode tag after", chromedp.Text("#limit-mode")); mode != "enforce" {
		t.Fatalf("mode after the switch = %q", mode)
	}
	if html := read("page after", chromedp.OuterHTML("html")); strings.Contains(html, `id="switch-enforce"`) || strings.Contains(html, `id="shadow-note"`) {
		t.Fatal("an enforced limit still offers the switch or the shadow note")
	}
	// The state was kept: alice's token is used up, and her penalty still runs.
	code, p := v1(t, base, secret, "/v1/limits/beta/limit", `{"key":"alice","throws":true}`)
	if code != http.StatusTooManyRequests || p["code"] != "rate_limited" {
		t.Fatalf("after the switch: %d %v, want 429", code, p)
	}
	if mode := storedMode(t, base, secret, "beta"); mode != "enforce" {
		t.Fatalf("GET /v1/limits/beta says mode %q after the switch", mode)
	}
	step("the switch is audited",
		chromedp.Click(`nav.tabs a[href$="/audit"]`),
		chromedp.WaitVisible("#audit"),
	)
	if audit := read("audit", chromedp.Text("body")); !strings.Contains(audit, "switched from shadow to enforce") {
		t.Fatalf("audit log lacks the switch:\n%.1500s", audit)
	}
}

// storedMode reads a limit's mode through GET /v1/limits/{name}.
func storedMode(t *testing.T, base, secret, name string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/limits/"+name, nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var def struct {
		Mode string `json:"mode"`
	}
	if err := json.NewDecoder(res.Body).Decode(&def); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/limits/%s: %d %v", name, res.StatusCode, err)
	}
	return def.Mode
}
