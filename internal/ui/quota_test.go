package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// A quota with parents through the form: problems of the new fields come back inline (a parents
// line names its line), the stored definition is what was typed, the edit form shows it again,
// and an edit that keeps it saves it unchanged.
func TestQuotaAndParentsFormRoundTrip(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)
	form := url.Values{"name": {"team"}, "kind": {"quota"}, "rate": {"500"}, "period": {"60000"},
		"calendar": {"month"}, "timeZone": {"America/Havana"}, "anchorDay": {"40"},
		"parents": {"org org:{org}\nregion {region\njust-one-word"}}
	res := c.post(tpath(tn, "/limits"), form)
	wantStatus(t, res, http.StatusUnprocessableEntity)
	d := res.doc(t)
	if got := text(d, "#anchorDay-error"); !strings.Contains(got, "between 1 and 31") {
		t.Fatalf("#anchorDay-error = %q", got)
	}
	if got := text(d, "#parents-error"); !strings.Contains(got, "line 3") {
		t.Fatalf("#parents-error = %q, want the malformed third line named", got)
	}
	if d.Find("#period-error").Length() != 0 {
		t.Fatal("the form's period was held against a quota")
	}
	if v := d.Find("#parents").Text(); !strings.Contains(v, "region {region") {
		t.Fatalf("the typed parents were not kept: %q", v)
	}
	form.Set("parents", "org org:{org}\nregion {region")
	form.Set("anchorDay", "31")
	if got := text(c.post(tpath(tn, "/limits"), form).doc(t), "#parents-error"); !strings.Contains(got, "line 2, the key template") {
		t.Fatalf("#parents-error = %q, want line 2's template", got)
	}
	form.Set("parents", "org org:{org}\n\nregion region:{region}")
	wantStatus(t, c.post(tpath(tn, "/limits"), form), http.StatusSeeOther)
	stored, err := e.engine.GetDefinition(context.Background(), tn.ID, "team")
	want := limiter.Definition{Kind: limiter.Quota, Rate: 500, Calendar: "month", TimeZone: "America/Havana", AnchorDay: 31, Shards: 1,
		Parents: []limiter.Parent{{Name: "org", Key: "org:{org}"}, {Name: "region", Key: "region:{region}"}}}
	if err != nil || stored.Definition.Kind != want.Kind || stored.Definition.Calendar != want.Calendar || stored.Definition.TimeZone != want.TimeZone ||
		stored.Definition.AnchorDay != 31 || stored.Definition.Period != 0 || len(stored.Definition.Parents) != 2 || stored.Definition.Parents[1] != want.Parents[1] {
		t.Fatalf("stored %+v, %v; want %+v", stored.Definition, err, want)
	}

	edit := c.get(tpath(tn, "/limits/team/edit")).doc(t)
	for field, want := range map[string]string{"rate": "500", "timeZone": "America/Havana", "anchorDay": "31", "period": ""} {
		if v, _ := edit.Find("#" + field).Attr("value"); v != want {
			t.Errorf("edit form %s = %q, want %q", field, v, want)
		}
	}
	if v, _ := edit.Find("#calendar option[selected]").Attr("value"); v != "month" {
		t.Errorf("edit form calendar = %q", v)
	}
	if v := edit.Find("#parents").Text(); v != "org org:{org}\nregion region:{region}" {
		t.Errorf("edit form parents = %q", v)
	}
	upd := url.Values{}
	upd.Set("kind", "quota")
	upd.Set("rate", "600")
	upd.Set("calendar", "month")
	upd.Set("timeZone", "America/Havana")
	upd.Set("anchorDay", "31")
	upd.Set("parents", edit.Find("#parents").Text())
	wantStatus(t, c.post(tpath(tn, "/limits/team"), upd), http.StatusSeeOther)
	if s, _ := e.engine.GetDefinition(context.Background(), tn.ID, "team"); s.Definition.Rate != 600 || len(s.Definition.Parents) != 2 {
		t.Fatalf("after the edit: %+v", s.Definition)
	}
	page := c.get(tpath(tn, "/limits/team")).doc(t)
	if page.Find("#window-start").Length() != 1 || !strings.Contains(text(page, "#config"), "region under key region:{region}") {
		t.Fatalf("the quota's page lacks its window or parents: %q", text(page, "#config"))
	}
	if a, ok := e.lastAudit(tn, "limit.update"); !ok || !strings.Contains(a.Detail, "calendar=month timeZone=America/Havana anchorDay=31 parents=org") {
		t.Fatalf("audit of the edit: %+v", a)
	}
}
