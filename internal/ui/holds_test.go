package ui_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/limiter"
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
	if _, err := e.svc.CreateUser(ctx, "g@example.com", "globex-password-1", false, &other.ID); err != nil {
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
