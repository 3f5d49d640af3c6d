package limiter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

func localMS(t *testing.T, zone, s string) int64 {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := time.ParseInLocation("2006-01-02 15:04:05.000", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMilli()
}

func quota(rate float64, cal limiter.Calendar, zone string, anchor int) limiter.Definition {
	return limiter.Definition{Kind: limiter.Quota, Rate: rate, Calendar: cal, TimeZone: zone, AnchorDay: anchor}
}

// A daily quota in Berlin on the day clocks spring forward (23 hours): refusals wait for local
// midnight, not for 24 hours after the window began, and the window turns over exactly there.
func TestQuotaWindowsTurnOverAtLocalMidnightAcrossDST(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(localMS(t, "Europe/Berlin", "2026-03-29 10:00:00.000"))
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "daily", quota(3, "day", "Europe/Berlin", 0))
		for i := range 3 {
			if got := mustLimit(t, e, limiter.Request{Name: "daily", Key: "k", Count: 1}); !got.OK || got.Remaining != float64(2-i) {
				t.Fatalf("consumption %d: %+v", i+1, got)
			}
		}
		midnight := localMS(t, "Europe/Berlin", "2026-03-30 00:00:00.000")
		got := mustLimit(t, e, limiter.Request{Name: "daily", Key: "k", Count: 1})
		if got.OK || got.RetryAfter == nil || *got.RetryAfter != midnight-clock.Now().UnixMilli() {
			t.Fatalf("fourth: %+v (retryAfter %v), want a refusal until local midnight (%d ms)", got, deref(got.RetryAfter), midnight-clock.Now().UnixMilli())
		}
		dayStart := localMS(t, "Europe/Berlin", "2026-03-29 00:00:00.000")
		if w := got.Window; w == nil || w.Start != dayStart || w.End != midnight || midnight-dayStart != 23*3_600_000 {
			t.Fatalf("window %+v, want the 23-hour day [%d, %d)", got.Window, dayStart, midnight)
		}
		policy, header := limiter.RateLimitHeaders([]limiter.Decision{got})
		if policy != `"daily";q=3;w=82800` || header != `"daily";r=0;t=50400` {
			t.Fatalf("headers %q, %q: want the 23-hour window and 14 h to midnight", policy, header)
		}
		v, err := e.GetValue(context.Background(), tenant, "daily", "k")
		if err != nil {
			t.Fatal(err)
		}
		if v.Value != 0 || v.WindowStart == nil || *v.WindowStart != dayStart || v.ResetAt == nil || *v.ResetAt != midnight {
			t.Fatalf("value %+v (windowStart %v, resetAt %v)", v, deref(v.WindowStart), deref(v.ResetAt))
		}
		clock.Set(midnight - 1)
		if got := mustLimit(t, e, limiter.Request{Name: "daily", Key: "k", Count: 1}); got.OK || *got.RetryAfter != 1 {
			t.Fatalf("1 ms before midnight: %+v", got)
		}
		clock.Set(midnight)
		if got := mustLimit(t, e, limiter.Request{Name: "daily", Key: "k", Count: 1}); !got.OK || got.Remaining != 2 {
			t.Fatalf("at midnight: %+v, want a new window", got)
		}
		if got := mustLimit(t, e, limiter.Request{Name: "daily", Key: "k", Count: 1}); got.Window.End-got.Window.Start != 24*3_600_000 {
			t.Fatalf("the next day is %d ms long, want 24 h", got.Window.End-got.Window.Start)
		}
	})
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// A monthly quota billed on the 31st: the window that opens on 31 January closes when February's
// last day begins, and the one after runs to 31 March; February 29 counts in a leap year.
func TestMonthlyQuotaBillingDay31AcrossShortMonths(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		const zone = "America/New_York"
		clock := newClock(localMS(t, zone, "2026-01-31 00:00:00.000"))
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "monthly", quota(10, "month", zone, 31))
		mustLimit(t, e, limiter.Request{Name: "monthly", Key: "acme", Count: 10})
		clock.Set(localMS(t, zone, "2026-02-27 23:59:59.999"))
		got := mustLimit(t, e, limiter.Request{Name: "monthly", Key: "acme", Count: 1})
		if got.OK || *got.RetryAfter != 1 {
			t.Fatalf("27 February, last ms: %+v, want refused for 1 ms", got)
		}
		clock.Set(localMS(t, zone, "2026-02-28 00:00:00.000"))
		if got := mustLimit(t, e, limiter.Request{Name: "monthly", Key: "acme", Count: 10}); !got.OK {
			t.Fatalf("28 February: %+v, want a new window", got)
		}
		if got := mustLimit(t, e, limiter.Request{Name: "monthly", Key: "acme", Count: 1}); got.OK ||
			got.Window.End != localMS(t, zone, "2026-03-31 00:00:00.000") {
			t.Fatalf("March: %+v, want the window to end on 31 March (EDT)", got)
		}
		// 2028 is a leap year: billed on the 31st, February's window opens on the 29th.
		clock.Set(localMS(t, zone, "2028-02-28 12:00:00.000"))
		if got := mustLimit(t, e, limiter.Request{Name: "monthly", Key: "acme", Count: 1}); got.Window.End != localMS(t, zone, "2028-02-29 00:00:00.000") {
			t.Fatalf("leap year: window %+v, want it to end when 29 February begins", got.Window)
		}
	})
}

// Without a test clock, PostgreSQL's decisions read the database's clock: a process clock 26
// years off does not move the quota's window.
func TestQuotaWindowComesFromTheDatabaseClockOnPostgres(t *testing.T) {
	d := testkit.Open(t, db.Postgres)
	e := newEngine(t, d, limiter.Options{Clock: func() time.Time { return time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) }})
	mustPut(t, e, "q", quota(5, "day", "UTC", 0))
	before := time.Now().UnixMilli()
	got := mustLimit(t, e, limiter.Request{Name: "q", Key: "k", Count: 1})
	after := time.Now().UnixMilli()
	if got.Window == nil || got.Window.Now < before-1000 || got.Window.Now > after+1000 || got.Window.Start > got.Window.Now || got.Window.End <= got.Window.Now {
		t.Fatalf("window %+v, want today's (now %d..%d)", got.Window, before, after)
	}
}

func TestQuotaDefinitionProblemsNameTheirFields(t *testing.T) {
	d := testkit.Open(t, db.SQLite)
	e := newEngine(t, d, limiter.Options{})
	cases := []struct {
		def   limiter.Definition
		field string
	}{
		{quota(5, "day", "Mars/Olympus_Mons", 0), "timeZone"},
		{quota(5, "day", "", 0), "timeZone"},
		{quota(5, "day", "Local", 0), "timeZone"},
		{quota(5, "fortnight", "UTC", 0), "calendar"},
		{quota(5, "", "UTC", 0), "calendar"},
		{quota(5, "day", "UTC", 3), "anchorDay"},
		{quota(5, "month", "UTC", 32), "anchorDay"},
		{quota(5, "month", "UTC", -1), "anchorDay"},
		{limiter.Definition{Kind: limiter.Quota, Rate: 5, Period: 1000, Calendar: "day", TimeZone: "UTC"}, "period"},
		{limiter.Definition{Kind: limiter.Quota, Rate: 5, Calendar: "day", TimeZone: "UTC", Capacity: ptr(9.0)}, "capacity"},
		{limiter.Definition{Kind: limiter.Quota, Rate: 5, Calendar: "day", TimeZone: "UTC", MaxReserved: ptr(9.0)}, "maxReserved"},
		{limiter.Definition{Kind: limiter.Quota, Rate: 0, Calendar: "day", TimeZone: "UTC"}, "rate"},
		{limiter.Definition{Kind: limiter.TokenBucket, Rate: 5, Period: 1000, TimeZone: "UTC"}, "timeZone"},
		{limiter.Definition{Kind: limiter.TokenBucket, Rate: 5, Period: 1000, Calendar: "day"}, "calendar"},
		{limiter.Definition{Kind: limiter.FixedWindow, Rate: 5, Period: 1000, AnchorDay: 2}, "anchorDay"},
	}
	for _, tc := range cases {
		_, _, err := e.PutDefinition(context.Background(), tenant, "q", tc.def, nil)
		if ae := apperr.From(err); ae.Code != apperr.InvalidConfig || ae.Field != tc.field {
			t.Errorf("%+v: got %v (field %q), want invalid_config naming %q", tc.def, err, ae.Field, tc.field)
		}
	}
	mustPut(t, e, "q", quota(5, "day", "UTC", 0))
	_, err := e.Limit(context.Background(), tenant, limiter.Request{Name: "q", Key: "k", Count: 1, Reserve: true})
	if ae := apperr.From(err); ae.Code != apperr.InvalidRequest || ae.Field != "reserve" {
		t.Errorf("reserve on a quota: %v, want invalid_request naming reserve", err)
	}
}

// org > team > user: a decision on a user spends the user's, the team's and the org's budgets
// all or nothing, each under the key its template makes of the decision's attributes.
func TestNestedBudgetsSpendEveryAncestorAllOrNothing(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(localMS(t, "UTC", "2026-06-10 12:00:00.000"))
		e := newEngine(t, d, clock.opts())
		ctx := context.Background()
		mustPut(t, e, "org", quota(5, "day", "UTC", 0))
		team := limiter.Definition{Kind: limiter.FixedWindow, Rate: 3, Period: 3_600_000, Start: ptr(int64(0)),
			Parents: []limiter.Parent{{Name: "org", Key: "org:{org}"}}}
		mustPut(t, e, "team", team)
		user := limiter.Definition{Kind: limiter.TokenBucket, Rate: 2, Period: 3_600_000,
			Parents: []limiter.Parent{{Name: "team", Key: "{org}/{team}"}}}
		mustPut(t, e, "user", user)
		attrs := func(org, team string) map[string]string { return map[string]string{"org": org, "team": team} }
		try := func(key, teamName string) limiter.Decision {
			t.Helper()
			return mustLimit(t, e, limiter.Request{Name: "user", Key: key, Count: 1, Attributes: attrs("acme", teamName)})
		}
		first := try("u1", "t1")
		if !first.OK || len(first.Parents) != 2 || first.Parents[0].Name != "team" || first.Parents[0].Key != "acme/t1" ||
			first.Parents[1].Name != "org" || first.Parents[1].Key != "org:acme" || first.Parents[1].Remaining != 4 || first.Parents[1].Window == nil {
			t.Fatalf("first decision: %+v", first)
		}
		try("u1", "t1")
		own := try("u1", "t1") // the user's own budget (2) refuses; nothing else is spent
		if own.OK || own.RetryAfter == nil || !own.Parents[0].OK || !own.Parents[1].OK {
			t.Fatalf("third for u1: %+v, want refused by the user alone", own)
		}
		try("u2", "t1") // the team's third
		byTeam := try("u3", "t1")
		if byTeam.OK || byTeam.Parents[0].OK || !byTeam.Parents[1].OK || *byTeam.RetryAfter != *byTeam.Parents[0].RetryAfter {
			t.Fatalf("u3 in a full team: %+v, want refused by the team, retryAfter the team's", byTeam)
		}
		if v := value(t, e, "user", "u3"); v != 2 {
			t.Fatalf("u3 was refused by its team but spent: value %v", v)
		}
		try("u4", "t2")
		byOrg := try("u5", "t2") // org: 5 - 3 (t1) - 1 (t2) = 1 left; then 0
		if !byOrg.OK {
			t.Fatalf("u5: %+v, want the org's last", byOrg)
		}
		refused := try("u6", "t3")
		if refused.OK || refused.Parents[1].OK || refused.Parents[1].Name != "org" {
			t.Fatalf("u6: %+v, want refused by the org", refused)
		}
		if v := value(t, e, "team", "acme/t3"); v != 3 {
			t.Fatalf("team t3 spent %v by a decision its org refused", 3-v)
		}
		if v := value(t, e, "org", "org:acme"); v != 0 {
			t.Fatalf("org value %v, want 0", v)
		}
		// Check spends nothing, anywhere.
		c, err := e.Check(ctx, tenant, limiter.Request{Name: "user", Key: "u9", Count: 1, Attributes: attrs("other", "t1")})
		if err != nil || !c.OK || value(t, e, "org", "org:other") != 5 {
			t.Fatalf("check: %+v, %v", c, err)
		}
		// A parent added since the last decision (hints on PostgreSQL are stale) is still spent.
		mustPut(t, e, "global", limiter.Definition{Kind: limiter.FixedWindow, Rate: 100, Period: 3_600_000, Start: ptr(int64(0))})
		user.Parents = append(user.Parents, limiter.Parent{Name: "global", Key: "all"})
		mustPut(t, e, "user", user)
		got := mustLimit(t, e, limiter.Request{Name: "user", Key: "u10", Count: 1, Attributes: attrs("beta", "t1")})
		if !got.OK || len(got.Parents) != 3 || got.Parents[1].Name != "global" || value(t, e, "global", "all") != 99 {
			t.Fatalf("after adding a parent: %+v", got)
		}
	})
}

func TestNestedBudgetProblems(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, limiter.Options{})
		ctx := context.Background()
		fw := func(parents ...limiter.Parent) limiter.Definition {
			return limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 60_000, Parents: parents}
		}
		p := func(name string) limiter.Parent { return limiter.Parent{Name: name, Key: "{org}"} }
		mustPut(t, e, "child", fw(p("parent")))

		// The parent does not exist (yet): decisions are 404 naming it.
		_, err := e.Limit(ctx, tenant, limiter.Request{Name: "child", Key: "k", Count: 1, Attributes: map[string]string{"org": "a"}})
		if ae := apperr.From(err); ae.Code != apperr.LimitNotFound || !strings.Contains(ae.Message, `"parent"`) {
			t.Fatalf("missing parent: %v", err)
		}
		mustPut(t, e, "parent", fw())
		// A missing attribute is invalid_request naming it.
		_, err = e.Limit(ctx, tenant, limiter.Request{Name: "child", Key: "k", Count: 1, Attributes: map[string]string{"team": "a"}})
		if ae := apperr.From(err); ae.Code != apperr.InvalidRequest || ae.Field != "attributes.org" {
			t.Fatalf("missing attribute: %v (field %q)", err, ae.Field)
		}
		// A filled key longer than a key may be.
		mustPut(t, e, "prefixed", fw(limiter.Parent{Name: "parent", Key: "org:{org}"}))
		_, err = e.Limit(ctx, tenant, limiter.Request{Name: "prefixed", Key: "k", Count: 1, Attributes: map[string]string{"org": strings.Repeat("x", 256)}})
		if ae := apperr.From(err); ae.Code != apperr.InvalidRequest || ae.Field != "attributes" {
			t.Fatalf("long attribute: %v (field %q)", err, ae.Field)
		}
		for _, bad := range []map[string]string{{"bad-name": "x"}, {"org": ""}, {"org": "a\x00b"}} {
			_, err = e.Limit(ctx, tenant, limiter.Request{Name: "child", Key: "k", Count: 1, Attributes: bad})
			if ae := apperr.From(err); ae.Code != apperr.InvalidRequest || !strings.HasPrefix(ae.Field, "attributes") {
				t.Errorf("attributes %q: %v", bad, err)
			}
		}
		// Cycles and depth are refused when stored; nothing is stored.
		_, _, err = e.PutDefinition(ctx, tenant, "parent", fw(p("child")), nil)
		if ae := apperr.From(err); ae.Code != apperr.InvalidConfig || ae.Field != "parents" || !strings.Contains(ae.Message, "parent → child → parent") {
			t.Fatalf("cycle: %v", err)
		}
		_, _, err = e.PutDefinition(ctx, tenant, "self", fw(p("self")), nil)
		if ae := apperr.From(err); ae.Code != apperr.InvalidConfig || ae.Field != "parents" {
			t.Fatalf("self-parent: %v", err)
		}
		// child → parent → g2 → g3 → g4 is 4 generations: allowed; a fifth is not.
		mustPut(t, e, "g4", fw())
		mustPut(t, e, "g3", fw(p("g4")))
		mustPut(t, e, "g2", fw(p("g3")))
		mustPut(t, e, "parent", fw(p("g2")))
		got, err := e.Limit(ctx, tenant, limiter.Request{Name: "child", Key: "k", Count: 1, Attributes: map[string]string{"org": "a"}})
		if err != nil || !got.OK || len(got.Parents) != 4 {
			t.Fatalf("four generations: %+v, %v", got, err)
		}
		_, _, err = e.PutDefinition(ctx, tenant, "g4", fw(p("g5")), nil)
		if ae := apperr.From(err); ae.Code != apperr.InvalidConfig || ae.Field != "parents" || !strings.Contains(ae.Message, "child → parent → g2 → g3 → g4 → g5") {
			t.Fatalf("five generations: %v", err)
		}
		if s, err := e.GetDefinition(ctx, tenant, "g4"); err != nil || len(s.Definition.Parents) != 0 {
			t.Fatalf("a refused definition was stored: %+v, %v", s, err)
		}
		// Parents' own problems name the field.
		for _, tc := range []struct {
			parents []limiter.Parent
			field   string
		}{
			{[]limiter.Parent{{Name: "bad name", Key: "k"}}, "parents[0].name"},
			{[]limiter.Parent{{Name: "parent", Key: ""}}, "parents[0].key"},
			{[]limiter.Parent{{Name: "parent", Key: "org:{org"}}, "parents[0].key"},
			{[]limiter.Parent{{Name: "parent", Key: "org:}"}}, "parents[0].key"},
			{[]limiter.Parent{{Name: "parent", Key: "{a-b}"}}, "parents[0].key"},
			{[]limiter.Parent{{Name: "parent", Key: "k"}, {Name: "parent", Key: "k"}}, "parents[1]"},
			{make([]limiter.Parent, 9), "parents"},
		} {
			_, _, err := e.PutDefinition(ctx, tenant, "x", fw(tc.parents...), nil)
			if ae := apperr.From(err); ae.Code != apperr.InvalidConfig || ae.Field != tc.field {
				t.Errorf("parents %+v: %v (field %q), want %q", tc.parents, err, ae.Field, tc.field)
			}
		}
		// Inline configs cannot have parents.
		inline := fw(p("parent"))
		_, err = e.Limit(ctx, tenant, limiter.Request{Name: "inline", Key: "k", Count: 1, Config: &inline})
		if ae := apperr.From(err); ae.Code != apperr.InvalidConfig || ae.Field != "parents" {
			t.Fatalf("inline parents: %v", err)
		}
	})
}

// A diamond (two parents sharing a grandparent under one key) spends the grandparent once per
// decision; the same parent under two different keys is two budgets, each spent.
func TestNestedBudgetsSpendEachAncestorKeyOncePerDecision(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, newClock(1_700_000_000_000).opts())
		fw := func(rate float64, parents ...limiter.Parent) limiter.Definition {
			return limiter.Definition{Kind: limiter.FixedWindow, Rate: rate, Period: 3_600_000, Start: ptr(int64(0)), Parents: parents}
		}
		mustPut(t, e, "g", fw(10))
		mustPut(t, e, "a", fw(10, limiter.Parent{Name: "g", Key: "all"}))
		mustPut(t, e, "b", fw(10, limiter.Parent{Name: "g", Key: "all"}))
		mustPut(t, e, "child", fw(10, limiter.Parent{Name: "a", Key: "{x}"}, limiter.Parent{Name: "b", Key: "{x}"},
			limiter.Parent{Name: "g", Key: "{x}"}))
		got := mustLimit(t, e, limiter.Request{Name: "child", Key: "k", Count: 2, Attributes: map[string]string{"x": "one"}})
		if !got.OK || len(got.Parents) != 4 {
			t.Fatalf("diamond: %+v, want a, b, g under one and g under all", got)
		}
		if v := value(t, e, "g", "all"); v != 8 {
			t.Fatalf("the shared grandparent holds %v, want 8 (spent once)", v)
		}
		if v := value(t, e, "g", "one"); v != 8 {
			t.Fatalf("g under the child's own key holds %v, want 8", v)
		}
	})
}
