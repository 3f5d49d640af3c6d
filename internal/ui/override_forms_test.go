package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// The "Add override" form must not silently replace an existing override of the same match, and
// the edit form must not re-create an override deleted while it was open (as the limit forms
// refuse both for limits).
func TestOverrideFormsNeitherReplaceNorRecreate(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL))
		e.operator()
		tn := e.tenant("acme")
		c := e.login(opEmail, opPassword)
		ctx := context.Background()
		if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60000}, nil); err != nil {
			t.Fatal(err)
		}
		rate := 1000.0
		if _, _, err := e.engine.PutOverride(ctx, tn.ID, "api", limiter.Override{Match: "vip", Rate: &rate}, nil); err != nil {
			t.Fatal(err)
		}
		// Another admin opens "Add override" and types the same match: the form has no "editing".
		res := c.post(tpath(tn, "/limits/api/overrides"), url.Values{"match": {"vip"}, "action": {"deny"}})
		got, err := e.engine.GetOverride(ctx, tn.ID, "api", "vip")
		if res.StatusCode == http.StatusSeeOther || err != nil || got.Override.Action != "" {
			t.Errorf("the add form replaced the existing override: status %d, now %+v (%v)", res.StatusCode, got.Override, err)
		}
		wantStatus(t, res, http.StatusConflict)
		if msg := text(res.doc(t), "main"); !strings.Contains(msg, "edit it instead") {
			t.Errorf("the add form's answer does not say the override exists: %q", msg)
		}

		// An edit form opened on "gold", which is deleted before it is saved.
		if _, _, err := e.engine.PutOverride(ctx, tn.ID, "api", limiter.Override{Match: "gold", Rate: &rate}, nil); err != nil {
			t.Fatal(err)
		}
		edit := c.get(tpath(tn, "/limits/api/overrides/edit?match=gold")).doc(t)
		if v, _ := edit.Find(`input[name="editing"]`).Attr("value"); v != "yes" {
			t.Fatal("no edit form")
		}
		wantStatus(t, c.post(tpath(tn, "/limits/api/overrides/delete"), url.Values{"match": {"gold"}}), http.StatusSeeOther)
		res = c.post(tpath(tn, "/limits/api/overrides"), url.Values{"editing": {"yes"}, "match": {"gold"}, "rate": {"2000"}})
		if _, err := e.engine.GetOverride(ctx, tn.ID, "api", "gold"); res.StatusCode == http.StatusSeeOther || err == nil {
			t.Errorf("saving the edit form of a deleted override re-created it: status %d, override still there: %v", res.StatusCode, err == nil)
		}
		wantStatus(t, res, http.StatusConflict)
		if msg := text(res.doc(t), "main"); !strings.Contains(msg, "deleted while you edited it") {
			t.Errorf("the edit form's answer does not say the override was deleted: %q", msg)
		}
	})
}

// An override's expiresAt is stored in milliseconds; its edit form showed it in whole seconds,
// so saving the form unchanged moved the expiry up to 999 ms earlier.
func TestSavingAnOverridesEditFormUnchangedKeepsItsExpiry(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)
	ctx := context.Background()
	if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60000}, nil); err != nil {
		t.Fatal(err)
	}
	rate := 100.0
	exp := time.Now().Add(time.Hour).Truncate(time.Second).UnixMilli() + 750
	if _, _, err := e.engine.PutOverride(ctx, tn.ID, "api", limiter.Override{Match: "vip", Rate: &rate, ExpiresAt: &exp}, nil); err != nil {
		t.Fatal(err)
	}
	d := c.get(tpath(tn, "/limits/api/overrides/edit?match=vip")).doc(t)
	form := url.Values{"editing": {"yes"}, "match": {"vip"}}
	for _, f := range []string{"rate", "capacity", "maxReserved", "expiresAt"} {
		v, _ := d.Find(`#override-form input[name="` + f + `"]`).Attr("value")
		form.Set(f, v)
	}
	wantStatus(t, c.post(tpath(tn, "/limits/api/overrides"), form), http.StatusSeeOther)
	got, _ := e.engine.GetOverride(ctx, tn.ID, "api", "vip")
	if got.Override.ExpiresAt == nil || *got.Override.ExpiresAt != exp {
		t.Fatalf("saving the edit form unchanged moved expiresAt from %d to %v (form sent %q)", exp, *got.Override.ExpiresAt, form.Get("expiresAt"))
	}
}
