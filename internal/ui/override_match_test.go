package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// postedFields is what a browser posts for the form sel of d: each named field that is not
// disabled with the value the page fills in (a checkbox or radio only when checked, a select's
// chosen option, a textarea's text), and the form's action.
func postedFields(t *testing.T, d *goquery.Document, sel string) (string, url.Values) {
	t.Helper()
	f := d.Find(sel)
	if f.Length() != 1 {
		t.Fatalf("no single form %s on the page", sel)
	}
	vals := url.Values{}
	f.Find("input[name], select[name], textarea[name]").Each(func(_ int, in *goquery.Selection) {
		name, _ := in.Attr("name")
		if _, disabled := in.Attr("disabled"); disabled {
			return
		}
		switch goquery.NodeName(in) {
		case "select":
			opt := in.Find("option[selected]").First()
			if opt.Length() == 0 {
				opt = in.Find("option").First()
			}
			vals.Add(name, opt.AttrOr("value", opt.Text()))
		case "textarea":
			vals.Add(name, in.Text())
		default:
			typ := in.AttrOr("type", "text")
			if typ == "checkbox" || typ == "radio" {
				if _, checked := in.Attr("checked"); checked {
					vals.Add(name, in.AttrOr("value", "on"))
				}
				return
			}
			vals.Add(name, in.AttrOr("value", ""))
		}
	})
	return f.AttrOr("action", ""), vals
}

// TestOverrideWithSpacesInItsMatchIsEditedAndDeletedAsItIs: a match is an exact byte string, so
// the edit form of "vip " saves "vip ", not a new override "vip", and the delete form deletes
// " vip " and nothing else.
func TestOverrideWithSpacesInItsMatchIsEditedAndDeletedAsItIs(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	ctx := context.Background()
	if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "api", dailyBucket, nil); err != nil {
		t.Fatal(err)
	}
	one := 1.0
	for _, m := range []string{"vip ", " vip ", "vip"} {
		if _, _, err := e.engine.PutOverride(ctx, tn.ID, "api", limiter.Override{Match: m, Rate: &one}, nil); err != nil {
			t.Fatal(err)
		}
	}
	rates := func() map[string]float64 {
		t.Helper()
		list, _, err := e.engine.ListOverrides(ctx, tn.ID, "api", "", 10)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, s := range list {
			got[s.Override.Match] = *s.Override.Rate
		}
		return got
	}
	c := e.login(opEmail, opPassword)

	// The edit form, as the dashboard renders it, with a new rate.
	edit := c.get(tpath(tn, "/limits/api/overrides/edit?match="+url.QueryEscape("vip ")))
	wantStatus(t, edit, http.StatusOK)
	action, form := postedFields(t, edit.doc(t), "#override-form")
	if form.Get("match") != "vip " {
		t.Fatalf("the edit form of %q posts match %q", "vip ", form.Get("match"))
	}
	form.Set("rate", "50")
	wantStatus(t, c.post(action, form), http.StatusSeeOther)
	if got := rates(); len(got) != 3 || got["vip "] != 50 || got[" vip "] != 1 || got["vip"] != 1 {
		t.Fatalf("after editing %q: %v", "vip ", got)
	}
	// As the brief's repro posts it.
	wantStatus(t, c.post(tpath(tn, "/limits/api/overrides"), url.Values{"match": {" vip "}, "rate": {"7"}, "editing": {"1"}}), http.StatusSeeOther)
	if got := rates(); len(got) != 3 || got[" vip "] != 7 || got["vip "] != 50 || got["vip"] != 1 {
		t.Fatalf("after editing %q: %v", " vip ", got)
	}

	// The delete form of the row " vip " deletes that override only.
	var del *goquery.Selection
	c.get(tpath(tn, "/limits/api")).doc(t).Find("#override-rows tr").Each(func(_ int, row *goquery.Selection) {
		if row.AttrOr("data-match", "") == " vip " {
			del = row.Find("form")
		}
	})
	if del == nil || del.Length() != 1 {
		t.Fatal("no delete form on the row of \" vip \"")
	}
	if m := del.Find(`input[name="match"]`).AttrOr("value", ""); m != " vip " {
		t.Fatalf("the delete form of %q posts match %q", " vip ", m)
	}
	wantStatus(t, c.post(del.AttrOr("action", ""), url.Values{"match": {" vip "}}), http.StatusSeeOther)
	if got := rates(); len(got) != 2 || got["vip "] != 50 || got["vip"] != 1 {
		t.Fatalf("after deleting %q: %v", " vip ", got)
	}
}
