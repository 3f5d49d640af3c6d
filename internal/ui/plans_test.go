package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestOperatorSetsAPlanAndCountQuotasAreInlineInTheDashboard: only an operator sets a tenant's
// plan, every bad field at once and inline, what was typed kept; past the plan, creating a limit,
// an API key or an override is a 409 whose message names the quota, inline in its form; the
// tenant's plan page shows its use against the plan; the change is audited in both logs. On
// both dialects.
func TestOperatorSetsAPlanAndCountQuotasAreInlineInTheDashboard(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL))
		e.operator()
		ctx := context.Background()
		acme := e.tenant("acme")
		if _, err := e.svc.CreateUser(ctx, "member@acme.example", "member-password-1", false, &acme.ID, "test", ""); err != nil {
			t.Fatal(err)
		}
		op := e.login(opEmail, opPassword)
		member := e.login("member@acme.example", "member-password-1")
		manage := "/tenants/" + strconv.FormatInt(acme.ID, 10) + "/manage"

		wantStatus(t, member.post(manage+"/plan", url.Values{"maxLimits": {"1000000"}}), http.StatusNotFound) // operators only
		bad := op.post(manage+"/plan", url.Values{"decisionsPerSecond": {"fast"}, "maxLimits": {"-1"}, "maxKeys": {"1.5"}, "maxOverrides": {""}})
		wantStatus(t, bad, http.StatusUnprocessableEntity)
		d := bad.doc(t)
		for field, typed := range map[string]string{"decisionsPerSecond": "fast", "maxLimits": "-1", "maxKeys": "1.5"} {
			if text(d, "#"+field+"-error") == "" || d.Find("#plan-"+field).AttrOr("value", "") != typed {
				t.Errorf("%s: error %q, kept %q (want %q)", field, text(d, "#"+field+"-error"), d.Find("#plan-"+field).AttrOr("value", ""), typed)
			}
		}
		wantStatus(t, op.post(manage+"/plan", url.Values{"decisionsPerSecond": {"5"}, "maxLimits": {"1"}, "maxKeys": {"2"}, "maxOverrides": {"1"}}), http.StatusSeeOther)
		if v := op.get(manage).doc(t).Find("#plan-maxLimits").AttrOr("value", ""); v != "1" {
			t.Fatalf("the plan form after saving shows maxLimits %q", v)
		}

		wantStatus(t, member.post(tpath(acme, "/limits"), limitForm("first", "10")), http.StatusSeeOther)
		r := member.post(tpath(acme, "/limits"), limitForm("second", "10"))
		wantStatus(t, r, http.StatusConflict)
		if d := r.doc(t); !strings.Contains(text(d, "#form-error"), "at most 1 limit;") || d.Find("#name").AttrOr("value", "") != "second" {
			t.Fatalf("a limit past the plan: form error %q, name kept %q", text(d, "#form-error"), d.Find("#name").AttrOr("value", ""))
		}
		for _, label := range []string{"one", "two"} {
			wantStatus(t, member.post(tpath(acme, "/keys"), url.Values{"label": {label}, "kind": {"secret"}}), http.StatusSeeOther)
		}
		r = member.post(tpath(acme, "/keys"), url.Values{"label": {"three"}, "kind": {"publishable"}})
		wantStatus(t, r, http.StatusConflict)
		if d := r.doc(t); !strings.Contains(text(d, "#form-error"), "at most 2 API keys") || d.Find("#label").AttrOr("value", "") != "three" {
			t.Fatalf("a key past the plan: form error %q, label kept %q", text(d, "#form-error"), d.Find("#label").AttrOr("value", ""))
		}
		r = member.post(tpath(acme, "/captcha/keys"), url.Values{"label": {"site"}})
		wantStatus(t, r, http.StatusConflict)
		if !strings.Contains(text(r.doc(t), "#pk-label-error"), "at most 2 API keys") {
			t.Fatalf("a publishable key past the plan: %q", text(r.doc(t), "#pk-label-error"))
		}
		overrides := tpath(acme, "/limits/first/overrides")
		wantStatus(t, member.post(overrides, url.Values{"match": {"vip"}, "rate": {"20"}}), http.StatusSeeOther)
		r = member.post(overrides, url.Values{"match": {"other"}, "rate": {"20"}})
		wantStatus(t, r, http.StatusConflict)
		if !strings.Contains(text(r.doc(t), "#form-error"), "at most 1 override;") {
			t.Fatalf("an override past the plan: form error %q", text(r.doc(t), "#form-error"))
		}

		plan := member.get(tpath(acme, "/plan"))
		wantStatus(t, plan, http.StatusOK)
		pd := plan.doc(t)
		for quota, want := range map[string]string{"decisions": "5 available now 5 per second", "limits": "1 full 1", "keys": "2 full 2", "overrides": "1 full 1"} {
			if got := strings.Join(strings.Fields(text(pd, `#plan-usage tr[data-quota="`+quota+`"] td:nth-child(2)`)+" "+text(pd, `#plan-usage tr[data-quota="`+quota+`"] td:nth-child(3)`)), " "); got != want {
				t.Errorf("plan page, %s: %q, want %q", quota, got, want)
			}
		}
		if pd.Find("#plan-form").Length() != 0 {
			t.Error("the tenant's plan page offers the operator's form")
		}
		for _, page := range []string{tpath(acme, "/audit"), "/audit"} {
			if body := op.get(page).body; !strings.Contains(body, "plan.update") || !strings.Contains(body, "limits 1") {
				t.Errorf("%s lacks the plan change", page)
			}
		}
	})
}

// TestATinyPlanRateIsWrittenShort: a plan's decision rate is written as the Plan page writes it,
// in the operator's form and the audit log too: 5e-324, not 324 digits.
func TestATinyPlanRateIsWrittenShort(t *testing.T) {
	e := newEnv(t)
	e.operator()
	acme := e.tenant("acme")
	op := e.login(opEmail, opPassword)
	manage := "/tenants/" + strconv.FormatInt(acme.ID, 10) + "/manage"
	wantStatus(t, op.post(manage+"/plan", url.Values{"decisionsPerSecond": {"4.9e-324"}, "maxLimits": {""}, "maxKeys": {""}, "maxOverrides": {""}}), http.StatusSeeOther)
	if v := op.get(manage).doc(t).Find("#plan-decisionsPerSecond").AttrOr("value", ""); v != "5e-324" {
		t.Errorf("the plan form shows the rate as %.40q…; want 5e-324", v)
	}
	if body := op.get("/audit").body; !strings.Contains(body, "decisions 5e-324/s") {
		t.Error("the audit log does not write the plan's rate as 5e-324/s")
	}
	// Smaller still, it would read as 0, no limit: refused, the plan kept.
	for _, tiny := range []string{"1e-400", "1e-1000000000"} {
		under := op.post(manage+"/plan", url.Values{"decisionsPerSecond": {tiny}, "maxLimits": {""}, "maxKeys": {""}, "maxOverrides": {""}})
		wantStatus(t, under, http.StatusUnprocessableEntity)
		if msg := text(under.doc(t), "#decisionsPerSecond-error"); !strings.Contains(msg, "write 0 for no limit") {
			t.Errorf("a rate of %s, which reads as 0: error %q, want it refused", tiny, msg)
		}
	}
	if v := op.get(manage).doc(t).Find("#plan-decisionsPerSecond").AttrOr("value", ""); v != "5e-324" {
		t.Errorf("after the refused rate the plan form shows %q; want 5e-324 kept", v)
	}
}
