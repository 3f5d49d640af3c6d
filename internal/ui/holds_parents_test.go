package ui_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// A hold on a limit with a parent reserves from the parent too (README: "the confirmation of a
// hold that also reserves other limits lists them, since its release gives those back too"). The
// parent's page counted only holds made on it: 30 of its 100 were held with its page saying none
// were, the child's release confirmation did not name it, and its own page answered 404 for that
// hold's release.
func TestAHoldOnAChildShowsOnItsParentsPage(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL))
		e.operator()
		tn := e.tenant("acme")
		ctx := context.Background()
		if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "org", limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 86_400_000}, nil); err != nil {
			t.Fatal(err)
		}
		child := limiter.Definition{Kind: limiter.TokenBucket, Rate: 50, Period: 86_400_000, Parents: []limiter.Parent{{Name: "org", Key: "org:{org}"}}}
		if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "user", child, nil); err != nil {
			t.Fatal(err)
		}
		acme := map[string]string{"org": "acme"}
		h, err := e.engine.Hold(ctx, tn.ID, []limiter.HoldLimit{{Name: "user", Key: "alice", Count: 30, Attributes: acme}}, 3_600_000)
		if err != nil || !h.Decision.OK {
			t.Fatalf("hold: %+v %v", h, err)
		}
		if v, _ := e.engine.GetValue(ctx, tn.ID, "org", "org:acme"); v.Value > 70.01 {
			t.Fatalf("the hold did not reserve from the parent: %v", v.Value)
		}
		c := e.login(opEmail, opPassword)
		org := c.get(tpath(tn, "/limits/org")).doc(t)
		if open, held := text(org, "#holds-open"), text(org, "#holds-held"); open != "1" || held != "30" {
			t.Errorf("the parent's page shows %s open holds holding %s; want 1 holding 30", open, held)
		}
		if rows := text(org, "#hold-rows"); !strings.Contains(rows, "org:acme") {
			t.Errorf("the parent's hold rows do not list the parent's key org:acme: %q", rows)
		}
		confirm := c.get(tpath(tn, "/limits/user/holds/"+h.ID+"/release"))
		wantStatus(t, confirm, http.StatusOK)
		if !strings.Contains(text(confirm.doc(t), "main"), "org") {
			t.Errorf("the release confirmation does not say that it gives back to org too:\n%s", text(confirm.doc(t), "main"))
		}
		wantStatus(t, c.get(tpath(tn, "/limits/org/holds/"+h.ID+"/release")), http.StatusOK)

		// A hold of the parent itself and of a child is one open hold on the parent, holding both.
		both, err := e.engine.Hold(ctx, tn.ID, []limiter.HoldLimit{
			{Name: "org", Key: "org:acme", Count: 5},
			{Name: "user", Key: "bob", Count: 10, Attributes: acme},
		}, 3_600_000)
		if err != nil || !both.Decision.OK {
			t.Fatalf("hold of both: %+v %v", both, err)
		}
		org = c.get(tpath(tn, "/limits/org")).doc(t)
		if open, held := text(org, "#holds-open"), text(org, "#holds-held"); open != "2" || held != "45" {
			t.Errorf("the parent's page shows %s open holds holding %s; want 2 holding 45 (30, then 5 + 10)", open, held)
		}
		user := c.get(tpath(tn, "/limits/user")).doc(t)
		if open, held := text(user, "#holds-open"), text(user, "#holds-held"); open != "2" || held != "40" {
			t.Errorf("the child's page shows %s open holds holding %s; want 2 holding 40 (its parents' holds are not its own)", open, held)
		}
	})
}
