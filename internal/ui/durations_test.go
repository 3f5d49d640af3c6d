package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestLimitFormTakesHumanDurationsAndShowsThem: the period field takes "per 10 minutes",
// "1h30m" and milliseconds alike, stores milliseconds, shows the period in words on the pages
// and compactly in the edit form (which reads back to the same period), and refuses what it
// cannot read inline, keeping what was typed.
func TestLimitFormTakesHumanDurationsAndShowsThem(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)
	ctx := context.Background()
	period := func(name string) int64 {
		t.Helper()
		d, err := e.engine.GetDefinition(ctx, tn.ID, name)
		if err != nil {
			t.Fatal(err)
		}
		return d.Definition.Period
	}
	for name, in := range map[string]string{"words": "per 10 minutes", "compact": "1h30m", "millis": "60000"} {
		wantStatus(t, c.post(tpath(tn, "/limits"), url.Values{"name": {name}, "kind": {"token bucket"}, "rate": {"10"}, "period": {in}}), http.StatusSeeOther)
	}
	for name, want := range map[string]int64{"words": 600_000, "compact": 5_400_000, "millis": 60_000} {
		if got := period(name); got != want {
			t.Errorf("%s: stored period %d ms, want %d", name, got, want)
		}
	}
	list := c.get(tpath(tn, "/limits")).doc(t)
	for name, want := range map[string]string{"words": "10 per 10 minutes", "compact": "10 per 1 hour 30 minutes", "millis": "10 per minute"} {
		if got := text(list, `tr[data-limit="`+name+`"] td:nth-child(3)`); got != want {
			t.Errorf("%s listed as %q, want %q", name, got, want)
		}
	}
	if cfg := text(c.get(tpath(tn, "/limits/words")).doc(t), "#config"); !strings.Contains(cfg, "10 per 10 minutes (600000 ms)") {
		t.Errorf("the limit's page shows %q", cfg)
	}
	// The edit form shows the period compactly, and saving it unchanged keeps the period.
	edit := c.get(tpath(tn, "/limits/compact/edit")).doc(t)
	shown := edit.Find("#period").AttrOr("value", "")
	if shown != "1h30m" {
		t.Fatalf("edit form shows the period as %q, want 1h30m", shown)
	}
	wantStatus(t, c.post(tpath(tn, "/limits/compact"), url.Values{"kind": {"token bucket"}, "rate": {"20"}, "period": {shown}}), http.StatusSeeOther)
	if got := period("compact"); got != 5_400_000 {
		t.Fatalf("saving the edit form unchanged made the period %d ms", got)
	}
	bad := c.post(tpath(tn, "/limits"), url.Values{"name": {"bad"}, "kind": {"token bucket"}, "rate": {"10"}, "period": {"10 fortnights"}})
	wantStatus(t, bad, http.StatusUnprocessableEntity)
	d := bad.doc(t)
	if !strings.Contains(text(d, "#period-error"), "per 10 minutes") || d.Find("#period").AttrOr("value", "") != "10 fortnights" {
		t.Fatalf("a period the form cannot read: error %q, kept %q", text(d, "#period-error"), d.Find("#period").AttrOr("value", ""))
	}
}
