package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboardShowsAndReleasesLeasesAndHolds drives the dashboard in Chromium: it creates a
// concurrency limit with the form, takes a lease and a hold through /v1, sees both counted on
// their limits' pages, releases each through its confirmation page, and checks through /v1 that
// the slot and the amount are free again and that the releases are audited.
func TestDashboardShowsAndReleasesLeasesAndHolds(t *testing.T) {
	srv, dr := operatorOnTenant(t, "Releasing holds and leases from the dashboard", "operator@example.com", 90*time.Second)
	base := srv.base
	step, read := dr.step, dr.read
	step("create a concurrency limit with the form",
		chromedp.Click("#new-limit"),
		chromedp.WaitVisible("#limit-form"),
		chromedp.SetValue("#name", "jobs"),
		chromedp.SetValue("#kind", "concurrency"),
		chromedp.SetValue("#rate", "1"),
		chromedp.SetValue("#leaseTtl", "3600000"),
		chromedp.Click("#save-limit"),
		chromedp.WaitVisible("#open-leases"),
	)
	jobsURL := strings.SplitN(read("limit URL", chromedp.Location()), "?", 2)[0]
	if cfg := read("config", chromedp.Text("#config")); !strings.Contains(cfg, "1 leases in flight") {
		t.Fatalf("config = %q", cfg)
	}
	step("create an API key",
		chromedp.Click(`nav.tabs a[href$="/keys"]`),
		chromedp.WaitVisible("#new-key-form"),
		chromedp.SendKeys("#label", "leases"),
		chromedp.Click("#create-key"),
		chromedp.WaitVisible("#new-secret"),
	)
	secret := read("secret", chromedp.Value("#new-secret"))
	code, lease := v1(t, base, secret, "/v1/limits/jobs/limit", `{"key":"worker"}`)
	if code != http.StatusOK || lease["ok"] != true || lease["leaseId"] == nil {
		t.Fatalf("lease: %d %v", code, lease)
	}
	if code, d := v1(t, base, secret, "/v1/limits/jobs/limit", `{"key":"worker"}`); code != http.StatusOK || d["ok"] != false {
		t.Fatalf("a second lease of one slot: %d %v", code, d)
	}
	step("the lease is on the limit's page",
		chromedp.Navigate(jobsURL),
		chromedp.WaitVisible("#lease-rows"),
	)
	if n := read("leases in flight", chromedp.Text("#leases-open")); n != "1" {
		t.Fatalf("leases in flight = %q", n)
	}
	step("release it through the confirmation",
		chromedp.Click("#lease-rows a.release"),
		chromedp.WaitVisible("#confirm-release"),
		chromedp.Click("#confirm-release"),
		chromedp.WaitVisible("#flash"),
		chromedp.WaitVisible("#open-leases"),
	)
	if n := read("leases after", chromedp.Text("#leases-open")); n != "0" {
		t.Fatalf("leases in flight after the release = %q", n)
	}
	if code, d := v1(t, base, secret, "/v1/limits/jobs/limit", `{"key":"worker"}`); code != http.StatusOK || d["ok"] != true {
		t.Fatalf("the slot is not free after the release: %d %v", code, d)
	}

	// A hold on a budget defined through /v1.
	req, _ := http.NewRequest(http.MethodPut, base+"/v1/limits/tokens", strings.NewReader(`{"kind":"fixed window","rate":10,"period":86400000,"start":0}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusOK && res.StatusCode != http.StatusCreated {
		t.Fatalf("put tokens: %v %v", res, err)
	}
	_ = res.Body.Close()
	if code, h := v1(t, base, secret, "/v1/holds", `{"limits":[{"name":"tokens","key":"k","count":7}],"ttl":3600000}`); code != http.StatusCreated {
		t.Fatalf("hold: %d %v", code, h)
	}
	step("the hold is on its limit's page",
		chromedp.Navigate(strings.TrimSuffix(jobsURL, "/jobs")+"/tokens"),
		chromedp.WaitVisible("#hold-rows"),
	)
	if got := read("holds", chromedp.Text("#open-holds")); !strings.Contains(got, "1 open, holding 7") {
		t.Fatalf("open holds = %q", got)
	}
	step("release the hold through the confirmation",
		chromedp.Click("#hold-rows a.release"),
		chromedp.WaitVisible("#confirm-release"),
		chromedp.Click("#confirm-release"),
		chromedp.WaitVisible("#flash"),
	)
	if code, d := v1(t, base, secret, "/v1/limits/tokens/limit", `{"key":"k","count":10}`); code != http.StatusOK || d["ok"] != true {
		t.Fatalf("the amount is not back after the release: %d %v", code, d)
	}
	step("the releases are audited",
		chromedp.Click(`nav.tabs a[href$="/audit"]`),
		chromedp.WaitVisible("#audit"),
	)
	if audit := read("audit", chromedp.Text("body")); !strings.Contains(audit, "lease.release") || !strings.Contains(audit, "hold.release") {
		t.Fatalf("audit log lacks the releases:\n%.1500s", audit)
	}
}
