package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluice-dev/sluice/internal/limiter"
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

// configValue is the value the limit page's configuration shows under label.
func configValue(d *goquery.Document, label string) string {
	return strings.TrimSpace(d.Find("#config dt").FilterFunction(func(_ int, s *goquery.Selection) bool {
		return strings.TrimSpace(s.Text()) == label
	}).First().Next().Text())
}

// TestLimitFormTakesHumanDurationsForJitterPenaltyAndLeaseTTL: jitter, penalty and a
// concurrency limit's lease TTL take "1.5s", "10m", "per 30 seconds" and milliseconds alike,
// store milliseconds, are shown in words on the limit's page and compactly in the edit form
// (which saves back to the same value), and a value the form cannot read is refused inline,
// keeping what was typed. A fixed window's start, an instant, is shown as a time.
func TestLimitFormTakesHumanDurationsForJitterPenaltyAndLeaseTTL(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)
	ctx := context.Background()
	bucket := url.Values{"kind": {"token bucket"}, "rate": {"10"}, "period": {"1m"}}
	jobs := url.Values{"kind": {"concurrency"}, "rate": {"2"}}
	cases := []struct {
		name, field, in string
		form            url.Values
		stored          func(limiter.Definition) int64
		want            int64
		label, shown    string // the limit page's configuration row and what it contains
		compact         string // the edit form's value
	}{
		{"jitter-words", "jitter", "1.5s", bucket, func(d limiter.Definition) int64 { return d.Jitter }, 1500, "Jitter", "1 second 500 milliseconds (1500 ms)", "1s500ms"},
		{"jitter-millis", "jitter", "250", bucket, func(d limiter.Definition) int64 { return d.Jitter }, 250, "Jitter", "250 milliseconds (250 ms)", "250ms"},
		{"penalty-words", "penalty", "1h30m", bucket, func(d limiter.Definition) int64 { return d.Penalty }, 5_400_000, "Penalty", "1 hour 30 minutes (5400000 ms)", "1h30m"},
		{"penalty-millis", "penalty", "60000", bucket, func(d limiter.Definition) int64 { return d.Penalty }, 60_000, "Penalty", "1 minute (60000 ms)", "1m"},
		{"lease-words", "leaseTtl", "per 30 seconds", jobs, func(d limiter.Definition) int64 { return d.LeaseTTL }, 30_000, "Rate", "each lasting 30 seconds (30000 ms)", "30s"},
		{"lease-compact", "leaseTtl", "2m", jobs, func(d limiter.Definition) int64 { return d.LeaseTTL }, 120_000, "Rate", "each lasting 2 minutes (120000 ms)", "2m"},
		{"lease-millis", "leaseTtl", "45000", jobs, func(d limiter.Definition) int64 { return d.LeaseTTL }, 45_000, "Rate", "each lasting 45 seconds (45000 ms)", "45s"},
	}
	form := func(base url.Values, field, value string) url.Values {
		f := url.Values{}
		for k, v := range base {
			f[k] = v
		}
		f.Set(field, value)
		return f
	}
	stored := func(name string) limiter.Definition {
		t.Helper()
		d, err := e.engine.GetDefinition(ctx, tn.ID, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return d.Definition
	}
	for _, tc := range cases {
		f := form(tc.form, tc.field, tc.in)
		f.Set("name", tc.name)
		wantStatus(t, c.post(tpath(tn, "/limits"), f), http.StatusSeeOther)
		if got := tc.stored(stored(tc.name)); got != tc.want {
			t.Errorf("%s: %s %q stored as %d ms, want %d", tc.name, tc.field, tc.in, got, tc.want)
			continue
		}
		if got := configValue(c.get(tpath(tn, "/limits/"+tc.name)).doc(t), tc.label); !strings.Contains(got, tc.shown) {
			t.Errorf("%s: the limit's page shows %s as %q, want %q in it", tc.name, tc.label, got, tc.shown)
		}
		shown := c.get(tpath(tn, "/limits/"+tc.name+"/edit")).doc(t).Find("#"+tc.field).AttrOr("value", "")
		if shown != tc.compact {
			t.Errorf("%s: the edit form shows %s as %q, want %q", tc.name, tc.field, shown, tc.compact)
			continue
		}
		wantStatus(t, c.post(tpath(tn, "/limits/"+tc.name), form(tc.form, tc.field, shown)), http.StatusSeeOther)
		if got := tc.stored(stored(tc.name)); got != tc.want {
			t.Errorf("%s: saving the edit form unchanged made %s %d ms", tc.name, tc.field, got)
		}
	}
	if got := text(c.get(tpath(tn, "/limits")).doc(t), `tr[data-limit="jitter-words"] td:nth-child(3)`); !strings.Contains(got, "jitter 1 second 500 milliseconds") {
		t.Errorf("the list shows jitter-words as %q", got)
	}

	for _, bad := range []struct {
		field, in string
		form      url.Values
	}{{"jitter", "a little", bucket}, {"penalty", "10 fortnights", bucket}, {"leaseTtl", "forever", jobs}} {
		f := form(bad.form, bad.field, bad.in)
		f.Set("name", "bad")
		res := c.post(tpath(tn, "/limits"), f)
		wantStatus(t, res, http.StatusUnprocessableEntity)
		d := res.doc(t)
		if msg, kept := text(d, "#"+bad.field+"-error"), d.Find("#"+bad.field).AttrOr("value", ""); !strings.Contains(msg, `"1.5s"`) || kept != bad.in {
			t.Errorf("%s %q: error %q, kept %q", bad.field, bad.in, msg, kept)
		}
	}

	wantStatus(t, c.post(tpath(tn, "/limits"), url.Values{"name": {"windows"}, "kind": {"fixed window"}, "rate": {"10"}, "period": {"1m"}, "start": {"30000"}}), http.StatusSeeOther)
	if got := configValue(c.get(tpath(tn, "/limits/windows")).doc(t), "Window start"); got != "1970-01-01 00:00:30 UTC (30000 ms)" {
		t.Errorf("the window start is shown as %q", got)
	}
}
