package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// The messages of a number field whose text is not a number as the API's JSON writes one.
const (
	mustBeANumber      = "must be a number written in decimal, such as 12, 0.5 or 2.5e3"
	mustBeAWholeNumber = "must be a whole number written in decimal digits without a leading zero, such as 12"
)

// notJSONNumbers are texts strconv reads as numbers (Go literals and the like) that are no JSON
// number, which the API refuses.
var notJSONNumbers = []string{"0x1p4", "1_0", "0x_1p4", "0x10", "+5", "Inf", "NaN", "1.", ".5", "01", "1e", "0b101", "0o17"}

// TestFormNumbersAreJSONNumbers: every number field of the dashboard reads what it is typed as
// the API reads a number in JSON, no more: the limit form saved a rate of "0x1p4" as 16 and
// "1_0" as 10, and the operator's plan form a decision rate of "1_0" as 10/s. A plan's rate
// written "0.0" is 0 (no limit); one that reads as 0 only because it is below the smallest
// double ("2e-324") is refused, naming what was typed.
func TestFormNumbersAreJSONNumbers(t *testing.T) {
	e := newEnv(t, func(c *config.Config, _ *app.Options) { c.WebhookAllowPrivate = true })
	e.operator()
	tn := e.tenant("acme")
	ctx := context.Background()
	c := e.login(opEmail, opPassword)

	// The limit form: a float field (rate) and a whole-number one (shards).
	for i, typed := range notJSONNumbers {
		name := "bad" + strconv.Itoa(i)
		res := c.post(tpath(tn, "/limits"), limitForm(name, typed))
		wantStatus(t, res, http.StatusUnprocessableEntity)
		if got := text(res.doc(t), "#rate-error"); got != mustBeANumber {
			t.Errorf("rate %q: error %q, want %q", typed, got, mustBeANumber)
		}
		if _, err := e.engine.GetDefinition(ctx, tn.ID, name); err == nil {
			t.Errorf("rate %q: the limit was created", typed)
		}
		form := limitForm(name, "10")
		form.Set("shards", typed)
		res = c.post(tpath(tn, "/limits"), form)
		wantStatus(t, res, http.StatusUnprocessableEntity)
		if got := text(res.doc(t), "#shards-error"); got != mustBeAWholeNumber {
			t.Errorf("shards %q: error %q, want %q", typed, got, mustBeAWholeNumber)
		}
	}
	for i, tc := range []struct {
		typed string
		want  float64
	}{{"16", 16}, {"1.6e1", 16}, {"1E+1", 10}, {"0.5", 0.5}, {"2.5e-3", 0.0025}} {
		name := "good" + strconv.Itoa(i)
		wantStatus(t, c.post(tpath(tn, "/limits"), limitForm(name, tc.typed)), http.StatusSeeOther)
		d, err := e.engine.GetDefinition(ctx, tn.ID, name)
		if err != nil {
			t.Fatal(err)
		}
		if d.Definition.Rate != tc.want {
			t.Errorf("rate %q saved as %v, want %v", tc.typed, d.Definition.Rate, tc.want)
		}
	}

	// An override's numbers, the captcha's difficulty and a webhook's threshold alike.
	wantStatus(t, c.post(tpath(tn, "/limits"), limitForm("api", "10")), http.StatusSeeOther)
	res := c.post(tpath(tn, "/limits/api/overrides"), url.Values{"match": {"k:*"}, "rate": {"0x1p4"}})
	wantStatus(t, res, http.StatusUnprocessableEntity)
	if got := text(res.doc(t), "#rate-error"); got != mustBeANumber {
		t.Errorf("override rate 0x1p4: error %q", got)
	}
	for _, typed := range []string{"80_000", "+80000", "0x13880"} {
		res := c.post(tpath(tn, "/captcha/settings"), url.Values{"origins": {"https://shop.example"}, "difficulty": {typed}})
		wantStatus(t, res, http.StatusUnprocessableEntity)
		if got := text(res.doc(t), "#difficulty-error"); !strings.HasPrefix(got, "Difficulty must be a whole number") {
			t.Errorf("difficulty %q: error %q", typed, got)
		}
	}
	for _, typed := range []string{"1_0", "+10", "0xa"} {
		res := c.post(tpath(tn, "/webhooks"), url.Values{"url": {"http://127.0.0.1:9/hook"}, "events": {"limit.refusals"}, "refusalThreshold": {typed}})
		wantStatus(t, res, http.StatusUnprocessableEntity)
		if got := text(res.doc(t), "#refusalThreshold-error"); got == "" {
			t.Errorf("threshold %q: no error on the field:\n%s", typed, res.body)
		}
	}

	// The operator's plan form.
	manage := tpath(tn, "/manage/plan")
	plan := func(field, typed string) response {
		t.Helper()
		form := url.Values{"decisionsPerSecond": {""}, "maxLimits": {""}, "maxKeys": {""}, "maxOverrides": {""}}
		form.Set(field, typed)
		return c.post(manage, form)
	}
	own := func() tenants.PlanSettings {
		t.Helper()
		p, err := e.svc.TenantPlan(ctx, tn.ID)
		if err != nil {
			t.Fatal(err)
		}
		return p.Own
	}
	wantStatus(t, plan("decisionsPerSecond", "7"), http.StatusSeeOther)
	for _, typed := range notJSONNumbers {
		res := plan("decisionsPerSecond", typed)
		wantStatus(t, res, http.StatusUnprocessableEntity)
		if got := text(res.doc(t), "#decisionsPerSecond-error"); !strings.Contains(got, "must be a number written in decimal") {
			t.Errorf("decisionsPerSecond %q: error %q", typed, got)
		}
		for _, field := range []string{"maxLimits", "maxKeys", "maxOverrides"} {
			res := plan(field, typed)
			wantStatus(t, res, http.StatusUnprocessableEntity)
			if got := text(res.doc(t), "#"+field+"-error"); !strings.Contains(got, "whole number written in decimal digits") {
				t.Errorf("%s %q: error %q", field, typed, got)
			}
		}
	}
	if p := own(); p.DecisionsPerSecond == nil || *p.DecisionsPerSecond != 7 || p.MaxLimits != nil {
		t.Fatalf("after the refused forms the plan is %+v, want 7/s kept", p)
	}

	// Below the smallest double: refused, naming what was typed and the rule.
	for _, typed := range []string{"2e-324", "1e-400", "1e-1000000000"} {
		res := plan("decisionsPerSecond", typed)
		wantStatus(t, res, http.StatusUnprocessableEntity)
		want := `Decisions per second "` + typed + `" is too close to 0 for the server to hold and would read as 0, no limit: write 0 for no limit, or a rate of at least 5e-324.`
		if got := text(res.doc(t), "#decisionsPerSecond-error"); got != want {
			t.Errorf("decisionsPerSecond %q: error %q, want %q", typed, got, want)
		}
	}
	// Zero written any way is 0, no limit.
	for _, typed := range []string{"0.0", "0", "-0", "0e5", "0.000"} {
		wantStatus(t, plan("decisionsPerSecond", "7"), http.StatusSeeOther)
		wantStatus(t, plan("decisionsPerSecond", typed), http.StatusSeeOther)
		if p := own(); p.DecisionsPerSecond == nil || *p.DecisionsPerSecond != 0 {
			t.Errorf("decisionsPerSecond %q saved as %+v, want 0", typed, p.DecisionsPerSecond)
		}
	}
}
