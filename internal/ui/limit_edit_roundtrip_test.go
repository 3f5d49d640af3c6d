package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// editFormValues reads the edit form as a browser would submit it.
func editFormValues(d *goquery.Document) url.Values {
	v := url.Values{}
	d.Find("#limit-form input").Each(func(_ int, s *goquery.Selection) {
		name, _ := s.Attr("name")
		if name == "" {
			return
		}
		if typ, _ := s.Attr("type"); typ == "checkbox" {
			if _, on := s.Attr("checked"); on {
				v.Add(name, "on")
			}
			return
		}
		val, _ := s.Attr("value")
		v.Add(name, val)
	})
	d.Find("#limit-form select").Each(func(_ int, s *goquery.Selection) {
		name, _ := s.Attr("name")
		val, _ := s.Find("option[selected]").Attr("value")
		v.Add(name, val)
	})
	d.Find("#limit-form textarea").Each(func(_ int, s *goquery.Selection) {
		name, _ := s.Attr("name")
		v.Add(name, s.Text())
	})
	return v
}

// A limit saved unchanged from its edit form is stored unchanged. The parents box read a
// template's spaces as separators: a leading or trailing space was dropped (the child then spent
// another, full, key of its parent), and a template with an inner space could not be saved.
func TestSavingALimitsEditFormUnchangedKeepsItsParentsKeys(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)
	ctx := context.Background()
	org := limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 60000}
	if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "org", org, nil); err != nil {
		t.Fatal(err)
	}
	for name, key := range map[string]string{"lead": " org:{org}", "trail": "org:{org} ", "inner": "org {org}"} {
		child := limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60000, Parents: []limiter.Parent{{Name: "org", Key: key}}}
		if _, _, err := e.engine.PutDefinition(ctx, tn.ID, name, child, nil); err != nil {
			t.Fatal(err)
		}
		before, _ := e.engine.GetDefinition(ctx, tn.ID, name)
		form := editFormValues(c.get(tpath(tn, "/limits/"+name+"/edit")).doc(t))
		res := c.post(tpath(tn, "/limits/"+name), form)
		after, _ := e.engine.GetDefinition(ctx, tn.ID, name)
		if res.StatusCode != http.StatusSeeOther {
			t.Errorf("%s (parent key %q): saving the edit form unchanged: status %d, #parents-error %q", name, key, res.StatusCode, text(res.doc(t), "#parents-error"))
			continue
		}
		if !reflect.DeepEqual(before.Definition.Parents, after.Definition.Parents) {
			t.Errorf("%s: saving the edit form unchanged changed the parents: %q -> %q", name, before.Definition.Parents, after.Definition.Parents)
		}
	}
}

// The consequence: the parent's budget, spent under " org:acme", is full again under "org:acme"
// after an edit that changed nothing on the form, so the org admits past its daily rate of 1.
func TestAnUnchangedEditKeepsTheParentsBudgetSpent(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)
	ctx := context.Background()
	if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "org", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 86_400_000}, nil); err != nil {
		t.Fatal(err)
	}
	child := limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60000, Parents: []limiter.Parent{{Name: "org", Key: " org:{org}"}}}
	if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "user", child, nil); err != nil {
		t.Fatal(err)
	}
	decide := func() bool {
		d, err := e.engine.Limit(ctx, tn.ID, limiter.Request{Name: "user", Key: "alice", Count: 1, Attributes: map[string]string{"org": "acme"}})
		if err != nil {
			t.Fatal(err)
		}
		return d.OK
	}
	if !decide() || decide() {
		t.Fatal("the org's daily budget of 1 should admit one decision and refuse the next")
	}
	wantStatus(t, c.post(tpath(tn, "/limits/user"), editFormValues(c.get(tpath(tn, "/limits/user/edit")).doc(t))), http.StatusSeeOther)
	if decide() {
		t.Error("after saving the edit form unchanged, the org admitted a second decision within its day (rate 1 per day)")
	}
}

// A valid limit of a small rate (one every 250 s, written per second) is shown with its rate.
func TestASmallRateIsShownWithItsDigits(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)
	ctx := context.Background()
	if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "slow", limiter.Definition{Kind: limiter.TokenBucket, Rate: 0.004, Period: 1000}, nil); err != nil {
		t.Fatal(err)
	}
	page := c.get(tpath(tn, "/limits/slow")).doc(t)
	cfg := text(page, "#config")
	list := text(c.get(tpath(tn, "/limits")).doc(t), `tr[data-limit="slow"]`)
	t.Logf("limit page config: %q", cfg)
	t.Logf("limits list row: %q", list)
	for _, s := range []string{cfg, list} {
		if !strings.Contains(s, "0.004") {
			t.Errorf("the rate 0.004 per second is not shown: %q", s)
		}
	}
}
