package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

func TestOverridesAreAddedEditedAndDeletedOnTheLimitPage(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL))
		e.operator()
		tn := e.tenant("acme")
		ctx := context.Background()
		if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "api", dailyBucket, nil); err != nil {
			t.Fatal(err)
		}
		c := e.login(opEmail, opPassword)
		page := c.get(tpath(tn, "/limits/api"))
		wantStatus(t, page, http.StatusOK)
		if d := page.doc(t); d.Find("#no-overrides").Length() != 1 || d.Find("#add-override").AttrOr("href", "") != tpath(tn, "/limits/api/overrides/new") {
			t.Fatalf("limit page without overrides:\n%s", page.body)
		}
		wantStatus(t, c.get(tpath(tn, "/limits/api/overrides/new")), http.StatusOK)

		// Invalid: each error is inline, on its field, and what was typed stays.
		bad := c.post(tpath(tn, "/limits/api/overrides"), url.Values{"match": {"org:*:x"}, "capacity": {"lots"}, "maxReserved": {"Inf"}, "expiresAt": {"soon"}})
		wantStatus(t, bad, http.StatusUnprocessableEntity)
		d := bad.doc(t)
		if text(d, "#capacity-error") != mustBeANumber || text(d, "#maxReserved-error") != mustBeANumber || !strings.Contains(text(d, "#expiresAt-error"), "2030-01-02T15:04:05Z") ||
			d.Find("#capacity").AttrOr("value", "") != "lots" || d.Find("#match").AttrOr("value", "") != "org:*:x" {
			t.Fatalf("parse errors:\n%s", bad.body)
		}
		// The year 9999 where it was written is 10000 in UTC, as it would be shown.
		bad = c.post(tpath(tn, "/limits/api/overrides"), url.Values{"match": {"k"}, "action": {"deny"}, "expiresAt": {"9999-12-31T23:59:59-01:00"}})
		wantStatus(t, bad, http.StatusUnprocessableEntity)
		if d = bad.doc(t); !strings.Contains(text(d, "#expiresAt-error"), "2030-01-02T15:04:05Z") {
			t.Fatalf("an expiry after the year 9999 in UTC:\n%s", bad.body)
		}
		// Offsets RFC 3339 and the API refuse, though Go's time.Parse reads them.
		for _, at := range []string{"2030-01-01T00:00:00+24:00", "2030-01-01T00:00:00+00:60"} {
			bad = c.post(tpath(tn, "/limits/api/overrides"), url.Values{"match": {"k"}, "action": {"deny"}, "expiresAt": {at}})
			wantStatus(t, bad, http.StatusUnprocessableEntity)
			if d = bad.doc(t); !strings.Contains(text(d, "#expiresAt-error"), "2030-01-02T15:04:05Z") {
				t.Fatalf("an expiry at %s:\n%s", at, bad.body)
			}
		}
		bad = c.post(tpath(tn, "/limits/api/overrides"), url.Values{"match": {"org:*:x"}, "capacity": {"5"}})
		wantStatus(t, bad, http.StatusUnprocessableEntity)
		if d = bad.doc(t); !strings.Contains(text(d, "#match-error"), `one "*" at the end`) || d.Find("#capacity").AttrOr("value", "") != "5" {
			t.Fatalf("engine's match error:\n%s", bad.body)
		}
		bad = c.post(tpath(tn, "/limits/api/overrides"), url.Values{"match": {"org:*"}, "rate": {"-1"}})
		wantStatus(t, bad, http.StatusUnprocessableEntity)
		if d = bad.doc(t); !strings.Contains(text(d, "#rate-error"), "must be a number > 0") {
			t.Fatalf("engine's rate error:\n%s", bad.body)
		}

		// Valid: saved, listed, audited, and it decides.
		ok := c.post(tpath(tn, "/limits/api/overrides"), url.Values{"match": {"org:*"}, "capacity": {"3"}, "action": {""}})
		wantStatus(t, ok, http.StatusSeeOther)
		page = c.get(tpath(tn, "/limits/api"))
		if got := text(page.doc(t), `#override-rows tr[data-match="org:*"] .effect`); got != "capacity 3" {
			t.Fatalf("listed effect %q:\n%s", got, page.body)
		}
		if dec := e.consume(tn, "api", "org:1", 1); dec.Override != "org:*" || dec.Remaining != 2 {
			t.Fatalf("decision after adding: %+v", dec)
		}
		// The key's value reads under the override (2 of 3, not of the limit's 10).
		page = c.get(tpath(tn, "/limits/api"))
		if row := page.doc(t).Find(`#key-rows tr[data-key="org:1"]`); strings.Join(strings.Fields(row.Find("td.num").Text()), " ") != "2 / 3" {
			t.Fatalf("recent key under the override: %q", row.Text())
		}
		edit := c.get(tpath(tn, "/limits/api/overrides/edit?match="+url.QueryEscape("org:*")))
		wantStatus(t, edit, http.StatusOK)
		if v := edit.doc(t).Find("#capacity").AttrOr("value", ""); v != "3" {
			t.Fatalf("edit form capacity %q", v)
		}
		wantStatus(t, c.post(tpath(tn, "/limits/api/overrides"), url.Values{"editing": {"yes"}, "match": {"org:*"}, "action": {"deny"}}), http.StatusSeeOther)
		if dec := e.consume(tn, "api", "org:1", 1); dec.OK || dec.Override != "org:*" {
			t.Fatalf("decision after editing to deny: %+v", dec)
		}
		wantStatus(t, c.post(tpath(tn, "/limits/api/overrides/delete"), url.Values{"match": {"org:*"}}), http.StatusSeeOther)
		if dec := e.consume(tn, "api", "org:1", 1); dec.Override != "" {
			t.Fatalf("decision after deleting: %+v", dec)
		}
		wantStatus(t, c.post(tpath(tn, "/limits/api/overrides/delete"), url.Values{"match": {"org:*"}}), http.StatusNotFound)
		wantStatus(t, c.get(tpath(tn, "/limits/api/overrides/edit?match=nope")), http.StatusNotFound)
		wantStatus(t, c.get(tpath(tn, "/limits/nope/overrides/new")), http.StatusNotFound)

		entries, err := e.svc.AuditLog(ctx, tn.ID, 20)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, a := range entries {
			if a.Target == `api override "org:*"` {
				got[a.Action] = a.Detail
			}
		}
		// An update records the override before and after, as a limit's update does.
		if got["override.create"] != "capacity=3" || got["override.update"] != "capacity=3 → action=deny" || len(got) != 3 {
			t.Fatalf("audit entries of the override: %v", got)
		}
		if log := c.get(tpath(tn, "/audit")); !strings.Contains(log.body, "override.delete") {
			t.Errorf("the audit page does not show the deletion")
		}
	})
}

func TestOverrideFormsRefuseOtherTenantsAndOtherOrigins(t *testing.T) {
	e := newEnv(t)
	a, b := e.tenant("a-corp"), e.tenant("b-corp")
	ctx := context.Background()
	if _, err := e.svc.CreateUser(ctx, "member@a.example", "member-password-1", false, &a.ID, "test", ""); err != nil {
		t.Fatal(err)
	}
	for _, tn := range []int64{a.ID, b.ID} {
		if _, _, err := e.engine.PutDefinition(ctx, tn, "api", dailyBucket, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := e.engine.PutOverride(ctx, b.ID, "api", limiter.Override{Match: "vip", Action: limiter.ActionAllow}, nil); err != nil {
		t.Fatal(err)
	}
	c := e.login("member@a.example", "member-password-1")
	for _, p := range []string{"/limits/api/overrides/new", "/limits/api/overrides/edit?match=vip"} {
		wantStatus(t, c.get(tpath(b, p)), http.StatusNotFound)
	}
	wantStatus(t, c.post(tpath(b, "/limits/api/overrides"), url.Values{"match": {"x"}, "action": {"deny"}}), http.StatusNotFound)
	wantStatus(t, c.post(tpath(b, "/limits/api/overrides/delete"), url.Values{"match": {"vip"}}), http.StatusNotFound)
	// The member's own limit, from another origin: refused before anything is saved.
	wantStatus(t, c.post(tpath(a, "/limits/api/overrides"), url.Values{"match": {"x"}, "action": {"deny"}}, "Sec-Fetch-Site", "cross-site"), http.StatusForbidden)
	if list, _, _ := e.engine.ListOverrides(ctx, a.ID, "api", "", 10); len(list) != 0 {
		t.Fatalf("a cross-origin post saved %+v", list)
	}
	wantStatus(t, c.post(tpath(a, "/limits/api/overrides"), url.Values{"match": {"x"}, "action": {"deny"}}), http.StatusSeeOther)
	if list, _, _ := e.engine.ListOverrides(ctx, a.ID, "api", "", 10); len(list) != 1 || list[0].Override.Match != "x" {
		t.Fatalf("A's overrides: %+v", list)
	}
	if list, _, _ := e.engine.ListOverrides(ctx, b.ID, "api", "", 10); len(list) != 1 || list[0].Override.Match != "vip" {
		t.Fatalf("B's overrides changed: %+v", list)
	}
}
