package ui_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"

	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestLimitPageShowsAndReleasesHoldsAndLeases: a limit's page counts its open holds (and a
// concurrency limit's leases) and lists them; releasing one takes a confirmation, is refused
// cross-origin and to another tenant's member, gives the amount back, and is audited.
func TestLimitPageShowsAndReleasesHoldsAndLeases(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn, other := e.tenant("acme"), e.tenant("globex")
	ctx := context.Background()
	if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "tokens", dailyBucket, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "jobs", limiter.Definition{Kind: limiter.Concurrency, Rate: 2, LeaseTTL: 3_600_000}, nil); err != nil {
		t.Fatal(err)
	}
	h, err := e.engine.Hold(ctx, tn.ID, []limiter.HoldLimit{{Name: "tokens", Key: "alice", Count: 3}}, 30_000)
	if err != nil || !h.Decision.OK {
		t.Fatalf("hold: %+v %v", h, err)
	}
	if _, err := e.engine.Hold(ctx, tn.ID, []limiter.HoldLimit{{Name: "tokens", Key: "bob", Count: 2}}, 3_600_000); err != nil {
		t.Fatal(err)
	}
	lease := e.consume(tn, "jobs", "worker", 1)
	if lease.LeaseID == "" {
		t.Fatalf("no lease: %+v", lease)
	}

	c := e.login(opEmail, opPassword)
	page := c.get(tpath(tn, "/limits/tokens")).doc(t)
	if got := text(page, "#holds-open") + "/" + text(page, "#holds-held") + "/" + text(page, "#holds-soon"); got != "2/5/1" {
		t.Fatalf("open/held/expiring soon = %q, want 2/5/1", got)
	}
	if n := page.Find("#hold-rows tbody tr").Length(); n != 2 {
		t.Fatalf("%d hold rows, want 2", n)
	}
	jobs := c.get(tpath(tn, "/limits/jobs")).doc(t)
	if got := text(jobs, "#leases-open"); got != "1" || jobs.Find(`#lease-rows tr[data-id="`+lease.LeaseID+`"]`).Length() != 1 {
		t.Fatalf("leases in flight = %q", got)
	}

	release := tpath(tn, "/limits/tokens/holds/"+h.ID+"/release")
	confirm := c.get(release)
	wantStatus(t, confirm, http.StatusOK)
	if v, _ := confirm.doc(t).Find(`form input[name="confirm"]`).Attr("value"); v != "yes" {
		t.Fatal("no confirmation form")
	}
	wantStatus(t, c.post(release, nil), http.StatusSeeOther) // without the confirmation: nothing
	wantStatus(t, c.post(release, url.Values{"confirm": {"yes"}}, "Sec-Fetch-Site", "cross-site"), http.StatusForbidden)
	if v, _ := e.engine.GetValue(ctx, tn.ID, "tokens", "alice"); v.Value > dailyBucket.Max()-3+0.01 {
		t.Fatalf("released without a confirmed same-origin POST: %v", v.Value)
	}
	// A member of another tenant cannot reach it.
	if _, err := e.svc.CreateUser(ctx, "g@example.com", "globex-password-1", false, &other.ID, "test", ""); err != nil {
		t.Fatal(err)
	}
	g := e.login("g@example.com", "globex-password-1")
	wantStatus(t, g.post(release, url.Values{"confirm": {"yes"}}), http.StatusNotFound)
	wantStatus(t, g.post(tpath(other, "/limits/tokens/holds/"+h.ID+"/release"), url.Values{"confirm": {"yes"}}), http.StatusNotFound)

	wantStatus(t, c.post(release, url.Values{"confirm": {"yes"}}), http.StatusSeeOther)
	if v, _ := e.engine.GetValue(ctx, tn.ID, "tokens", "alice"); v.Value < dailyBucket.Max()-0.01 {
		t.Fatalf("the release gave nothing back: %v", v.Value)
	}
	if err := e.engine.ReleaseHold(ctx, tn.ID, h.ID); !errors.Is(err, limiter.ErrHoldClosed) {
		t.Fatalf("the client's release after the dashboard's: %v", err)
	}
	wantStatus(t, c.post(release, url.Values{"confirm": {"yes"}}), http.StatusConflict)

	leaseRelease := tpath(tn, "/limits/jobs/leases/"+lease.LeaseID+"/release")
	wantStatus(t, c.get(leaseRelease), http.StatusOK)
	wantStatus(t, c.post(leaseRelease, url.Values{"confirm": {"yes"}}), http.StatusSeeOther)
	if got := text(c.get(tpath(tn, "/limits/jobs")).doc(t), "#leases-open"); got != "0" {
		t.Fatalf("after the release %s leases are in flight", got)
	}

	log, err := e.svc.AuditLog(ctx, tn.ID, 20)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, a := range log {
		if strings.HasSuffix(a.Action, ".release") {
			seen = append(seen, a.Action+" "+a.Target)
		}
	}
	want := []string{"lease.release jobs " + lease.LeaseID, "hold.release tokens " + h.ID}
	if strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Fatalf("audited releases %v, want %v", seen, want)
	}
}

// TestReleaseGoesOnlyThroughALimitItInvolves: a hold or lease is released (and its confirmation
// shown) only through the page of a limit it involves: through another limit's page of the same
// tenant it is not found and stays open. The confirmation of a hold over several limits names
// the others, and the audit entry names the limit released through.
func TestReleaseGoesOnlyThroughALimitItInvolves(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	ctx := context.Background()
	for _, name := range []string{"tokens", "calls"} {
		if _, _, err := e.engine.PutDefinition(ctx, tn.ID, name, dailyBucket, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "jobs", limiter.Definition{Kind: limiter.Concurrency, Rate: 2, LeaseTTL: 3_600_000}, nil); err != nil {
		t.Fatal(err)
	}
	hold := func(ls ...limiter.HoldLimit) string {
		t.Helper()
		h, err := e.engine.Hold(ctx, tn.ID, ls, 3_600_000)
		if err != nil || !h.Decision.OK {
			t.Fatalf("hold: %+v %v", h, err)
		}
		return h.ID
	}
	single := hold(limiter.HoldLimit{Name: "tokens", Key: "alice", Count: 3})
	both := hold(limiter.HoldLimit{Name: "tokens", Key: "bob", Count: 2}, limiter.HoldLimit{Name: "calls", Key: "bob", Count: 4})
	lease := e.consume(tn, "jobs", "worker", 1).LeaseID
	left := func(name, key string) float64 {
		t.Helper()
		v, err := e.engine.GetValue(ctx, tn.ID, name, key)
		if err != nil {
			t.Fatal(err)
		}
		return v.Value
	}
	c := e.login(opEmail, opPassword)
	yes := url.Values{"confirm": {"yes"}}

	// Through a limit it does not involve: not found, and nothing is released.
	for _, wrong := range []string{
		"/limits/calls/holds/" + single + "/release",
		"/limits/jobs/holds/" + single + "/release",
		"/limits/tokens/leases/" + lease + "/release",
	} {
		wantStatus(t, c.get(tpath(tn, wrong)), http.StatusNotFound)
		wantStatus(t, c.post(tpath(tn, wrong), yes), http.StatusNotFound)
	}
	if v := left("tokens", "alice"); v > dailyBucket.Max()-3+0.01 {
		t.Fatalf("the hold was released through another limit's page: tokens left %v", v)
	}
	if got := text(c.get(tpath(tn, "/limits/jobs")).doc(t), "#leases-open"); got != "1" {
		t.Fatalf("the lease was released through another limit's page: %s in flight", got)
	}

	// The confirmation says what else a hold gives back.
	page := c.get(tpath(tn, "/limits/tokens/holds/"+single+"/release")).doc(t)
	if page.Find("#release-others").Length() != 0 {
		t.Fatalf("a hold of one limit said it holds others: %q", text(page, "#release-others"))
	}
	page = c.get(tpath(tn, "/limits/calls/holds/"+both+"/release")).doc(t)
	if others := page.Find("#release-others li").Map(func(_ int, s *goquery.Selection) string { return s.Text() }); strings.Join(others, ",") != "tokens" {
		t.Fatalf("the confirmation of a hold of calls and tokens, on calls, lists %q as the other limits", others)
	}

	// Released through either of its limits: both get their amounts back, audited under the
	// limit of the page.
	wantStatus(t, c.post(tpath(tn, "/limits/calls/holds/"+both+"/release"), yes), http.StatusSeeOther)
	if left("calls", "bob") < dailyBucket.Max()-0.01 || left("tokens", "bob") < dailyBucket.Max()-0.01 {
		t.Fatalf("after the release: calls %v, tokens %v left", left("calls", "bob"), left("tokens", "bob"))
	}
	log, err := e.svc.AuditLog(ctx, tn.ID, 20)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, a := range log {
		if strings.HasSuffix(a.Action, ".release") {
			seen = append(seen, a.Action+" "+a.Target+" ("+a.Detail+")")
		}
	}
	want := "hold.release calls " + both + " (released from the dashboard; it also held tokens)"
	if strings.Join(seen, ",") != want {
		t.Fatalf("audited releases %v, want only %q", seen, want)
	}
}

// auditLossEnv is a dashboard whose log goes to out, with an operator, tenant acme and one
// daily bucket limit called name: the set-up of the tests of a lost audit entry.
func auditLossEnv(t *testing.T, name string) (*env, *testkit.SyncBuffer, tenants.Tenant) {
	t.Helper()
	out := &testkit.SyncBuffer{}
	e := newEnv(t, func(_ *config.Config, o *app.Options) { o.Stdout = out })
	e.operator()
	tn := e.tenant("acme")
	if _, _, err := e.engine.PutDefinition(context.Background(), tn.ID, name, dailyBucket, nil); err != nil {
		t.Fatal(err)
	}
	return e, out, tn
}

// postWithoutAuditLog posts form to path as c while the audit log's table is away, so that the
// change the request makes commits and its audit entry cannot be written.
func postWithoutAuditLog(t *testing.T, e *env, c *client, path string, form url.Values) response {
	t.Helper()
	if err := e.db.Gorm.Exec("ALTER TABLE audit_log RENAME TO audit_log_away").Error; err != nil {
		t.Fatal(err)
	}
	res := c.post(path, form)
	if err := e.db.Gorm.Exec("ALTER TABLE audit_log_away RENAME TO audit_log").Error; err != nil {
		t.Fatal(err)
	}
	return res
}

// TestReleaseSaysWhenItsAuditEntryIsLost: when the audit entry of a manual release cannot be
// written, the release (committed) stands, and the page says that its entry is missing and the
// failure is logged as an error, instead of redirecting as if all went well.
func TestReleaseSaysWhenItsAuditEntryIsLost(t *testing.T) {
	e, out, tn := auditLossEnv(t, "tokens")
	ctx := context.Background()
	h, err := e.engine.Hold(ctx, tn.ID, []limiter.HoldLimit{{Name: "tokens", Key: "alice", Count: 3}}, 3_600_000)
	if err != nil || !h.Decision.OK {
		t.Fatalf("hold: %+v %v", h, err)
	}
	c := e.login(opEmail, opPassword)

	res := postWithoutAuditLog(t, e, c, tpath(tn, "/limits/tokens/holds/"+h.ID+"/release"), url.Values{"confirm": {"yes"}})
	wantStatus(t, res, http.StatusInternalServerError)
	if msg := text(res.doc(t), "#limit-error"); !strings.Contains(msg, "was released, but its audit log entry could not be written") {
		t.Fatalf("the page says %q", msg)
	}
	if err := e.engine.ReleaseHold(ctx, tn.ID, h.ID); !errors.Is(err, limiter.ErrHoldClosed) {
		t.Fatalf("the hold is not released: %v", err)
	}
	if log := out.String(); !strings.Contains(log, `level=ERROR msg="audit log write failed"`) || !strings.Contains(log, "hold.release") {
		t.Fatalf("no error logged for the lost audit entry:\n%s", log)
	}
}

// TestResetsAndOverridesCommitWithTheirAuditEntry: a key reset, a reset of every key and an
// override's creation, edit and deletion from the dashboard write their audit entry in their own
// transaction, as definition changes do. While the entry cannot be written (the audit log's
// table away) each fails whole: an error page, and the key, the limit and its overrides are as
// they were; once the log is back, each commits with its entry. (They used to commit first and
// audit after, so a lost entry left a change nobody could find in the log.)
func TestResetsAndOverridesCommitWithTheirAuditEntry(t *testing.T) {
	e, _, tn := auditLossEnv(t, "api")
	ctx := context.Background()
	e.consume(tn, "api", "alice", 4)
	e.consume(tn, "api", "bob", 4)
	rate := 1000.0
	if _, _, err := e.engine.PutOverride(ctx, tn.ID, "api", limiter.Override{Match: "gold", Rate: &rate}, nil); err != nil {
		t.Fatal(err)
	}
	c := e.login(opEmail, opPassword)
	left := func(key string) float64 {
		t.Helper()
		v, err := e.engine.GetValue(ctx, tn.ID, "api", key)
		if err != nil {
			t.Fatal(err)
		}
		return v.Value
	}
	overrideRate := func(match string) (float64, bool) {
		t.Helper()
		o, err := e.engine.GetOverride(ctx, tn.ID, "api", match)
		if errors.Is(err, limiter.ErrOverrideNotFound) {
			return 0, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return *o.Override.Rate, true
	}
	changes := []struct {
		what string
		path string
		form url.Values
	}{
		{"a key reset", "/limits/api/reset", url.Values{"key": {"alice"}}},
		{"a reset of every key", "/limits/api/reset-all", url.Values{"confirm": {"yes"}}},
		{"a new override", "/limits/api/overrides", url.Values{"match": {"vip"}, "rate": {"500"}}},
		{"an override's edit", "/limits/api/overrides", url.Values{"editing": {"yes"}, "match": {"gold"}, "rate": {"2000"}}},
		{"an override's deletion", "/limits/api/overrides/delete", url.Values{"match": {"gold"}}},
	}
	for _, ch := range changes {
		if res := postWithoutAuditLog(t, e, c, tpath(tn, ch.path), ch.form); res.StatusCode < 500 {
			t.Errorf("%s without its audit entry: status %d, want an error page", ch.what, res.StatusCode)
		}
	}
	_, vip := overrideRate("vip")
	gold, _ := overrideRate("gold")
	if left("alice") > 6.001 || left("bob") > 6.001 || vip || gold != 1000 {
		t.Fatalf("changes whose audit entry was lost stood: alice %v, bob %v left (want 6), vip override %v, gold rate %v (want 1000)",
			left("alice"), left("bob"), vip, gold)
	}
	entries, err := e.svc.AuditLog(ctx, tn.ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	before := len(entries)

	for _, ch := range changes {
		wantStatus(t, c.post(tpath(tn, ch.path), ch.form), http.StatusSeeOther)
	}
	_, vip = overrideRate("vip")
	_, gold2 := overrideRate("gold")
	if left("alice") < 9.999 || left("bob") < 9.999 || !vip || gold2 {
		t.Fatalf("the changes with the log back: alice %v, bob %v left (want 10), vip override %v (want it), gold override %v (want it deleted)",
			left("alice"), left("bob"), vip, gold2)
	}
	if entries, err = e.svc.AuditLog(ctx, tn.ID, 100); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, en := range entries[:len(entries)-before] {
		got = append(got, en.Action+" "+en.Target)
	}
	want := []string{`override.delete api override "gold"`, `override.update api override "gold"`,
		`override.create api override "vip"`, "limit.reset api (all keys)", `limit.reset api key "alice"`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit entries, newest first:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
