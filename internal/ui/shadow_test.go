package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// TestShadowLimitPageAndSwitchToEnforceWithoutJavaScript: the limit's page shows a shadow limit's
// mode and would-be refusals; the switch needs its confirmation (a POST without it changes
// nothing), keeps the state, and is audited; the form round-trips mode and penalty.
func TestShadowLimitPageAndSwitchToEnforceWithoutJavaScript(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	shadow := dailyBucket
	shadow.Mode, shadow.Penalty = limiter.Shadow, 90_000
	if _, _, err := e.engine.PutDefinition(context.Background(), tn.ID, "beta", shadow, nil); err != nil {
		t.Fatal(err)
	}
	e.consume(tn, "beta", "alice", 8)
	if d := e.consume(tn, "beta", "alice", 5); !d.OK || d.Shadow == nil || d.Shadow.OK {
		t.Fatalf("would-be refusal: %+v", d)
	}
	c := e.login(opEmail, opPassword)
	page := c.get(tpath(tn, "/limits/beta")).doc(t)
	if got := text(page, "#limit-mode"); got != "shadow" {
		t.Fatalf("mode tag = %q", got)
	}
	if got := text(page, "#shadow-refused"); got != "1" {
		t.Fatalf("would-be refusals = %q, want 1", got)
	}
	if got := text(page, "figure.chart .total-shadow-refused"); got != "1" {
		t.Fatalf("chart's shadow-refused total = %q", got)
	}
	if cfg := text(page, "#config"); !strings.Contains(cfg, "shadow") || !strings.Contains(cfg, "90000 ms") {
		t.Fatalf("config = %q", cfg)
	}

	if got := c.get(tpath(tn, "/limits")).doc(t).Find(`.tag.shadow`).Length(); got != 1 {
		t.Fatalf("the limits list shows %d shadow tags, want 1", got)
	}
	// The key's lookup: its penalty (started by the would-be refusal) and when it is full again.
	lookup := c.get(tpath(tn, "/limits/beta?key=alice")).doc(t)
	v, _ := e.engine.GetValue(context.Background(), tn.ID, "beta", "alice")
	if got := text(lookup, "#lookup-penalty"); !strings.Contains(got, time.UnixMilli(v.PenaltyUntil).UTC().Format("15:04:05")) {
		t.Fatalf("lookup penalty = %q, want the end %v", got, v.PenaltyUntil)
	}
	if got := text(lookup, "#lookup-full-at"); !strings.Contains(got, time.UnixMilli(v.FullAt).UTC().Format("2006-01-02 15:04:05")) {
		t.Fatalf("lookup full at = %q, want %v", got, v.FullAt)
	}
	edit := c.get(tpath(tn, "/limits/beta/edit")).doc(t)
	if v, _ := edit.Find(`#mode option[selected]`).Attr("value"); v != "shadow" {
		t.Fatalf("the edit form's mode = %q", v)
	}
	if v, _ := edit.Find(`#penalty`).Attr("value"); v != "1m30s" { // 90,000 ms, written compactly
		t.Fatalf("the edit form's penalty = %q", v)
	}

	confirm := c.get(tpath(tn, "/limits/beta/enforce"))
	wantStatus(t, confirm, http.StatusOK)
	if v, _ := confirm.doc(t).Find(`form[action$="/enforce"] input[name="confirm"]`).Attr("value"); v != "yes" {
		t.Fatal("no confirmation form")
	}
	wantStatus(t, c.post(tpath(tn, "/limits/beta/enforce"), nil), http.StatusSeeOther)
	mode := func() limiter.Mode {
		d, err := e.engine.GetDefinition(context.Background(), tn.ID, "beta")
		if err != nil {
			t.Fatal(err)
		}
		return d.Definition.Mode
	}
	if mode() != limiter.Shadow {
		t.Fatal("the switch ran without its confirmation")
	}
	before, _ := e.engine.GetValue(context.Background(), tn.ID, "beta", "alice")
	wantStatus(t, c.post(tpath(tn, "/limits/beta/enforce"), url.Values{"confirm": {"yes"}}), http.StatusSeeOther)
	if mode() != limiter.Enforce {
		t.Fatal("the confirmed switch did not enforce the limit")
	}
	after, _ := e.engine.GetValue(context.Background(), tn.ID, "beta", "alice")
	if after.Value < before.Value-1e-6 || after.Value > before.Value+0.01 || after.PenaltyUntil != before.PenaltyUntil {
		t.Fatalf("the switch changed the state: %+v -> %+v", before, after)
	}
	if d := e.consume(tn, "beta", "alice", 5); d.OK || d.Shadow != nil {
		t.Fatalf("after the switch the key is refused (its penalty runs): %+v", d)
	}
	// On an enforced limit the confirmation page sends back to the limit.
	wantStatus(t, c.get(tpath(tn, "/limits/beta/enforce")), http.StatusSeeOther)
	log, err := e.svc.AuditLog(context.Background(), tn.ID, 20)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range log {
		found = found || (a.Action == "limit.update" && a.Target == "beta" && strings.Contains(a.Detail, "switched from shadow to enforce"))
	}
	if !found {
		t.Fatalf("the switch is not audited: %+v", log)
	}
}

// TestSwitchingALimitTodaysRulesRefuseSaysWhy: a definition stored before a rule it breaks (here a
// parent's key template under the reserved "session:" prefix) cannot be switched to enforce; the
// dashboard says why with a 400 page, not a 500.
func TestSwitchingALimitTodaysRulesRefuseSaysWhy(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	shadow := dailyBucket
	shadow.Mode = limiter.Shadow
	shadow.Parents = []limiter.Parent{{Name: "org", Key: "org:{org}"}}
	if _, _, err := e.engine.PutDefinition(context.Background(), tn.ID, "beta", shadow, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.db.Gorm.Exec(`UPDATE limit_definitions SET parents = replace(parents, 'org:{org}', 'session:{org}') WHERE tenant_id = ? AND name = 'beta'`, tn.ID).Error; err != nil {
		t.Fatal(err)
	}
	c := e.login(opEmail, opPassword)
	r := c.post(tpath(tn, "/limits/beta/enforce"), url.Values{"confirm": {"yes"}})
	wantStatus(t, r, http.StatusBadRequest)
	if !strings.Contains(r.body, "reserved") {
		t.Fatalf("the page does not say what is wrong: %s", r.body)
	}
	if d, err := e.engine.GetDefinition(context.Background(), tn.ID, "beta"); err != nil || d.Definition.Mode != limiter.Shadow {
		t.Fatalf("after the refused switch: %+v, %v; want it still in shadow mode", d.Definition, err)
	}
}
