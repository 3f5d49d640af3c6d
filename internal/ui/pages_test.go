package ui_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// dailyBucket refills 10 tokens a day: values stay put while a test runs.
var dailyBucket = limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 86_400_000}

func (e *env) consume(tn tenants.Tenant, name, key string, count float64) limiter.Decision {
	e.t.Helper()
	dec, err := e.engine.Limit(context.Background(), tn.ID, limiter.Request{Name: name, Key: key, Count: count})
	if err != nil {
		e.t.Fatal(err)
	}
	return dec
}

func TestLimitsListShowsLimitsWithLiveValues(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	ctx := context.Background()
	if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "api", dailyBucket, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "idle", limiter.Definition{Kind: limiter.FixedWindow, Rate: 5, Period: 60_000}, nil); err != nil {
		t.Fatal(err)
	}
	e.consume(tn, "api", "alice", 3)
	c := e.login(opEmail, opPassword)

	res := c.get(tpath(tn, "/limits"))
	wantStatus(t, res, http.StatusOK)
	d := res.doc(t)
	if n := d.Find("#limits tbody tr[data-limit]").Length(); n != 2 {
		t.Fatalf("%d limit rows, want 2", n)
	}
	if got := text(d, `tr[data-limit="api"] .chip[data-key="alice"] .value`); got != "7" {
		t.Fatalf("alice's live value = %q, want 7", got)
	}
	if got := text(d, `tr[data-limit="api"] td:nth-child(3)`); got != "10 per day" {
		t.Fatalf("rate summary = %q", got)
	}
	if got := text(d, `tr[data-limit="idle"] .live`); !strings.Contains(got, "full") {
		t.Fatalf("idle limit shows %q, want a 'full' note", got)
	}
	body := d.Find("#limit-rows")
	if v, _ := body.Attr("hx-get"); v != tpath(tn, "/limit-values") {
		t.Fatalf("hx-get = %q", v)
	}
	if v, _ := body.Attr("hx-trigger"); v != "every 3s" {
		t.Fatalf("hx-trigger = %q", v)
	}

	// The fragment htmx polls shows the new value after more consumption.
	e.consume(tn, "api", "alice", 2)
	frag := c.get(tpath(tn, "/limit-values"))
	wantStatus(t, frag, http.StatusOK)
	fd := tableFragment(t, frag)
	if got := text(fd, `tbody#limit-rows tr[data-limit="api"] .chip[data-key="alice"] .value`); got != "5" {
		t.Fatalf("fragment value = %q, want 5", got)
	}
	if fd.Find("header.topbar").Length() != 0 {
		t.Fatal("the fragment contains the page layout")
	}
}

func TestLimitPageShowsConfigShardValuesRecentKeysAndChart(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	def := dailyBucket
	def.Shards = 2
	if _, _, err := e.engine.PutDefinition(context.Background(), tn.ID, "api", def, nil); err != nil {
		t.Fatal(err)
	}
	e.consume(tn, "api", "alice", 1)
	e.consume(tn, "api", "bob", 2)
	if dec := e.consume(tn, "api", "bob", 9); dec.OK {
		t.Fatal("expected a refusal for the chart")
	}
	c := e.login(opEmail, opPassword)

	res := c.get(tpath(tn, "/limits/api?key=alice"))
	wantStatus(t, res, http.StatusOK)
	d := res.doc(t)
	if got := text(d, "#limit-name"); got != "api" {
		t.Fatalf("name = %q", got)
	}
	if got := d.Find("#config dt").Map(func(_ int, s *goquery.Selection) string { return s.Text() }); !contains(got, "Shards") {
		t.Fatalf("config labels %v lack Shards", got)
	}
	if got := text(d, "#lookup-value"); got != "9" {
		t.Fatalf("lookup value = %q, want 9", got)
	}
	if n := d.Find("#shards tbody tr").Length(); n != 2 {
		t.Fatalf("%d shard rows, want 2", n)
	}
	var shardSum []string
	d.Find("#shards tbody tr td.value").Each(func(_ int, s *goquery.Selection) { shardSum = append(shardSum, s.Text()) })
	if !contains(shardSum, "4") || !contains(shardSum, "5") {
		t.Fatalf("shard values %v, want 4 and 5 (each shard holds 5; alice used 1)", shardSum)
	}
	if got := text(d, `#key-rows tr[data-key="bob"] .value`); got != "8" {
		t.Fatalf("bob's value = %q, want 8", got)
	}
	if d.Find(`#key-rows tr[data-key="alice"] form button.reset-key`).Length() != 1 {
		t.Fatal("no reset button for alice")
	}
	charts := d.Find("figure.chart")
	if charts.Length() != 2 {
		t.Fatalf("%d charts, want 2 (hour and day)", charts.Length())
	}
	first := charts.First()
	if got := strings.TrimSpace(first.Find(".total-allowed").Text()); got != "2" {
		t.Fatalf("allowed total = %q, want 2", got)
	}
	if got := strings.TrimSpace(first.Find(".total-refused").Text()); got != "1" {
		t.Fatalf("refused total = %q, want 1", got)
	}
	if first.Find("svg rect.allowed").Length() != 1 || first.Find("svg rect.refused").Length() != 1 {
		t.Fatal("the hour chart should have one allowed and one refused bar (all decisions in this minute)")
	}

	// The key fragment htmx polls.
	frag := tableFragment(t, c.get(tpath(tn, "/limits/api/keys")))
	if frag.Find(`tbody#key-rows tr[data-key]`).Length() != 2 {
		t.Fatal("fragment should list alice and bob")
	}

	// Unknown limits and invalid keys are a 404 and a 422, never a 500.
	wantStatus(t, c.get(tpath(tn, "/limits/nope")), http.StatusNotFound)
	bad := c.get(tpath(tn, "/limits/api?key=%ff"))
	wantStatus(t, bad, http.StatusUnprocessableEntity)
	if bad.doc(t).Find("#key-error").Length() != 1 {
		t.Fatal("invalid key lookup shows no error")
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if strings.TrimSpace(x) == v {
			return true
		}
	}
	return false
}

func limitForm(name, rate string) url.Values {
	return url.Values{"name": {name}, "kind": {"token bucket"}, "rate": {rate}, "period": {"60000"}}
}

func TestInvalidRateShowsInlineFieldErrorFromAPIValidation(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)

	res := c.post(tpath(tn, "/limits"), limitForm("api", "-5"))
	wantStatus(t, res, http.StatusUnprocessableEntity)
	d := res.doc(t)
	// The message is limiter.Definition.Validate's, under the API's field name.
	if got := text(d, "#rate-error"); !strings.Contains(got, "must be a number > 0") {
		t.Fatalf("#rate-error = %q", got)
	}
	if v, _ := d.Find("#rate").Attr("aria-invalid"); v != "true" {
		t.Fatal("rate input not marked invalid")
	}
	if v, _ := d.Find("#rate").Attr("value"); v != "-5" {
		t.Fatalf("the typed rate was not kept: %q", v)
	}
	if v, _ := d.Find("#name").Attr("value"); v != "api" {
		t.Fatalf("the typed name was not kept: %q", v)
	}
	if d.Find("#period-error").Length() != 0 || d.Find("#name-error").Length() != 0 {
		t.Fatal("valid fields show errors")
	}
	if _, err := e.engine.GetDefinition(context.Background(), tn.ID, "api"); !limiter.IsNotFound(err) {
		t.Fatalf("an invalid definition was stored: %v", err)
	}

	// Unparseable input and cross-field rules get inline errors too.
	form := limitForm("api", "ten")
	form.Set("kind", "sliding window")
	form.Set("capacity", "5")
	form.Set("shards", "0")
	d = c.post(tpath(tn, "/limits"), form).doc(t)
	if got := text(d, "#rate-error"); got != mustBeANumber {
		t.Fatalf("#rate-error = %q", got)
	}
	if got := text(d, "#shards-error"); !strings.Contains(got, "between 1 and 1024") {
		t.Fatalf("#shards-error = %q", got)
	}
	bad := c.post(tpath(tn, "/limits"), url.Values{"name": {"bad name!"}, "kind": {"token bucket"}, "rate": {"1"}, "period": {"1000"}})
	wantStatus(t, bad, http.StatusUnprocessableEntity)
	if bad.doc(t).Find("#name-error").Length() != 1 {
		t.Fatal("invalid name has no inline error")
	}

	// Fixed, it saves and redirects to the limit's page.
	ok := c.post(tpath(tn, "/limits"), limitForm("api", "10"))
	wantStatus(t, ok, http.StatusSeeOther)
	if loc := ok.Header.Get("Location"); !strings.HasPrefix(loc, tpath(tn, "/limits/api")) {
		t.Fatalf("redirect to %q", loc)
	}
	stored, err := e.engine.GetDefinition(context.Background(), tn.ID, "api")
	if err != nil || stored.Definition.Rate != 10 || stored.Definition.Period != 60000 {
		t.Fatalf("stored %+v, %v", stored, err)
	}
	// Creating it again is refused on the name; editing works through its own form.
	dup := c.post(tpath(tn, "/limits"), limitForm("api", "10"))
	wantStatus(t, dup, http.StatusUnprocessableEntity)
	if !strings.Contains(text(dup.doc(t), "#name-error"), "exists") {
		t.Fatal("duplicate name not reported")
	}
	edit := c.get(tpath(tn, "/limits/api/edit")).doc(t)
	if v, _ := edit.Find("#rate").Attr("value"); v != "10" {
		t.Fatalf("edit form rate = %q", v)
	}
	upd := limitForm("", "20")
	wantStatus(t, c.post(tpath(tn, "/limits/api"), upd), http.StatusSeeOther)
	if s, _ := e.engine.GetDefinition(context.Background(), tn.ID, "api"); s.Definition.Rate != 20 {
		t.Fatalf("rate after edit = %v", s.Definition.Rate)
	}
}

func TestCreatedKeyIsShownOnceAndWorks(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)

	// POST-redirect-GET: the form redirects to the list, which shows the secret once; reloading
	// that page creates nothing and shows nothing secret.
	posted := c.post(tpath(tn, "/keys"), url.Values{"label": {"backend"}, "kind": {"secret"}})
	wantStatus(t, posted, http.StatusSeeOther)
	if strings.Contains(posted.body, "sk_live_") {
		t.Fatal("the form's answer carries the secret")
	}
	res := c.get(posted.Header.Get("Location"))
	wantStatus(t, res, http.StatusOK)
	if cc := res.Header.Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("Cache-Control = %q; a page with a secret must not be cached", cc)
	}
	d := res.doc(t)
	secret, _ := d.Find("#new-secret").Attr("value")
	if !strings.HasPrefix(secret, "sk_live_") || len(secret) != tenants.KeyLen {
		t.Fatalf("secret = %q", secret)
	}
	if d.Find(`button[data-copy="new-secret"]`).Length() != 1 {
		t.Fatal("no copy button")
	}
	p, err := e.svc.Authenticate(context.Background(), secret, tenants.KindSecret)
	if err != nil || p.TenantID != tn.ID {
		t.Fatalf("the shown secret does not authenticate: %+v %v", p, err)
	}
	row := d.Find("#keys tbody tr[data-key-id]")
	if row.Length() != 1 || !strings.Contains(row.Text(), "backend") {
		t.Fatalf("key list: %q", row.Text())
	}
	if hint := text(d, "#keys code.hint"); !strings.HasPrefix(secret, strings.SplitN(hint, "…", 2)[0]) {
		t.Fatalf("hint %q does not match the secret", hint)
	}

	reloaded := c.get(posted.Header.Get("Location")) // the browser's reload
	wantStatus(t, reloaded, http.StatusOK)
	if reloaded.doc(t).Find("#new-secret").Length() != 0 || reloaded.doc(t).Find("#keys tbody tr[data-key-id]").Length() != 1 {
		t.Fatal("reloading the page after the form showed the secret again or created a key")
	}
	// A secret not picked up within its minute is gone.
	late := c.post(tpath(tn, "/keys"), url.Values{"label": {"late"}, "kind": {"secret"}})
	wantStatus(t, late, http.StatusSeeOther)
	e.clock.Advance(2 * time.Minute)
	if r := c.get(late.Header.Get("Location")); r.doc(t).Find("#new-secret").Length() != 0 {
		t.Fatal("a one-time secret was shown after its minute")
	}
	// Another client (without the cookie) sees nothing either.
	other := e.client()
	if r := other.get(posted.Header.Get("Location")); r.StatusCode == http.StatusOK && strings.Contains(r.body, secret) {
		t.Fatal("a client without the cookie saw the secret")
	}
	again := c.get(tpath(tn, "/keys"))
	wantStatus(t, again, http.StatusOK)
	if again.doc(t).Find("#new-secret").Length() != 0 || strings.Contains(again.body, secret) {
		t.Fatal("the secret is shown a second time")
	}

	// Revoke: the key stops working at once and the list says so.
	id, _ := row.Attr("data-key-id")
	wantStatus(t, c.post(tpath(tn, "/keys/"+id+"/revoke"), nil), http.StatusUnprocessableEntity) // not confirmed
	if _, err := e.svc.Authenticate(context.Background(), secret, tenants.KindSecret); err != nil {
		t.Fatalf("an unconfirmed revoke revoked the key: %v", err)
	}
	revoked := c.post(tpath(tn, "/keys/"+id+"/revoke"), url.Values{"confirm": {"yes"}})
	wantStatus(t, revoked, http.StatusSeeOther)
	if loc := revoked.Header.Get("Location"); !strings.HasSuffix(loc, "msg=key-revoked") {
		t.Fatalf("revoking the key leads to %q, want the keys page saying it was revoked", loc)
	}
	if _, err := e.svc.Authenticate(context.Background(), secret, tenants.KindSecret); err == nil {
		t.Fatal("revoked key still authenticates")
	}
	// Revoking it again (another tab, a form sent twice) changes nothing and says so.
	again = c.post(tpath(tn, "/keys/"+id+"/revoke"), url.Values{"confirm": {"yes"}})
	wantStatus(t, again, http.StatusSeeOther)
	if loc := again.Header.Get("Location"); !strings.HasSuffix(loc, "msg=key-already-revoked") {
		t.Fatalf("revoking the revoked key again leads to %q, want the keys page saying it was revoked before", loc)
	}
	if got := text(c.get(tpath(tn, "/keys")).doc(t), `tr[data-key-id="`+id+`"] .tag.danger`); got != "revoked" {
		t.Fatalf("revoked key shows %q", got)
	}
	wantStatus(t, c.post(tpath(tn, "/keys/key_nonexistent00000/revoke"), url.Values{"confirm": {"yes"}}), http.StatusNotFound)
	wantStatus(t, c.post(tpath(tn, "/keys"), url.Values{"label": {"x"}, "kind": {"weird"}}), http.StatusUnprocessableEntity)
}

func TestResetKeyAndResetAllWithConfirmation(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	if _, _, err := e.engine.PutDefinition(context.Background(), tn.ID, "api", dailyBucket, nil); err != nil {
		t.Fatal(err)
	}
	e.consume(tn, "api", "alice", 4)
	e.consume(tn, "api", "bob", 4)
	c := e.login(opEmail, opPassword)
	value := func(key string) float64 {
		v, err := e.engine.GetValue(context.Background(), tn.ID, "api", key)
		if err != nil {
			t.Fatal(err)
		}
		return math.Round(v.Value*1000) / 1000 // the bucket refills a little while the test runs
	}

	res := c.post(tpath(tn, "/limits/api/reset"), url.Values{"key": {"alice"}})
	wantStatus(t, res, http.StatusSeeOther)
	if value("alice") != 10 || value("bob") != 6 {
		t.Fatalf("after resetting alice: alice %v, bob %v", value("alice"), value("bob"))
	}
	page := c.get(res.Header.Get("Location")).doc(t)
	if got := text(page, "#lookup-value"); got != "10" {
		t.Fatalf("after reset the page shows alice at %q", got)
	}
	if got := text(page, "#flash"); !strings.Contains(got, "full again") {
		t.Fatalf("flash = %q", got)
	}

	confirm := c.get(tpath(tn, "/limits/api/reset-all"))
	wantStatus(t, confirm, http.StatusOK)
	form := confirm.doc(t).Find(`form[action$="/reset-all"][method="post"]`)
	if v, _ := form.Find(`input[name="confirm"]`).Attr("value"); v != "yes" {
		t.Fatal("confirmation page has no confirm form")
	}
	// Without the confirmation field nothing happens.
	wantStatus(t, c.post(tpath(tn, "/limits/api/reset-all"), nil), http.StatusSeeOther)
	if value("bob") != 6 {
		t.Fatal("reset-all ran without confirmation")
	}
	wantStatus(t, c.post(tpath(tn, "/limits/api/reset-all"), url.Values{"confirm": {"yes"}}), http.StatusSeeOther)
	if value("bob") != 10 {
		t.Fatal("reset-all did not reset bob")
	}
	wantStatus(t, c.post(tpath(tn, "/limits/api/reset"), nil), http.StatusUnprocessableEntity) // no key named
}

func TestAuditLogListsDashboardActions(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)
	wantStatus(t, c.post(tpath(tn, "/limits"), limitForm("api", "10")), http.StatusSeeOther)
	wantStatus(t, c.post(tpath(tn, "/keys"), url.Values{"label": {"ci"}, "kind": {"secret"}}), http.StatusSeeOther)
	e.consume(tn, "api", "k", 1)
	wantStatus(t, c.post(tpath(tn, "/limits/api/reset"), url.Values{"key": {"k"}}), http.StatusSeeOther)

	d := c.get(tpath(tn, "/audit")).doc(t)
	type entry struct{ actor, action, target string }
	var got []entry
	d.Find("#audit tbody tr").Each(func(_ int, s *goquery.Selection) {
		got = append(got, entry{strings.TrimSpace(s.Find(".actor").Text()), strings.TrimSpace(s.Find(".action").Text()), strings.TrimSpace(s.Find(".target").Text())})
	})
	want := []entry{ // newest first
		{"user:" + opEmail, "limit.reset", `api key "k"`},
		{"user:" + opEmail, "key.create", ""},
		{"user:" + opEmail, "limit.create", "api"},
	}
	if len(got) < len(want) {
		t.Fatalf("audit rows %+v", got)
	}
	for i, w := range want {
		if got[i].actor != w.actor || got[i].action != w.action || (w.target != "" && got[i].target != w.target) {
			t.Fatalf("row %d = %+v, want %+v (all: %+v)", i, got[i], w, got)
		}
	}
}

func TestOperatorCreatesTenantsAndSwitches(t *testing.T) {
	e := newEnv(t)
	e.operator()
	c := e.login(opEmail, opPassword)
	res := c.post("/tenants", url.Values{"name": {"globex"}})
	wantStatus(t, res, http.StatusSeeOther)
	tn, err := e.svc.TenantByName(context.Background(), "globex")
	if err != nil {
		t.Fatal(err)
	}
	if loc := res.Header.Get("Location"); !strings.HasPrefix(loc, tpath(tn, "/limits")) {
		t.Fatalf("redirect %q", loc)
	}
	d := c.get("/tenants").doc(t)
	if d.Find(`#tenants tr[data-tenant="globex"]`).Length() != 1 {
		t.Fatal("new tenant not listed")
	}
	if d.Find(`#tenant-switch option`).Length() != 1 {
		t.Fatal("tenant switcher missing")
	}
	dup := c.post("/tenants", url.Values{"name": {"globex"}})
	wantStatus(t, dup, http.StatusUnprocessableEntity)
	if dup.doc(t).Find("#name-error").Length() != 1 {
		t.Fatal("duplicate tenant has no inline error")
	}
	wantStatus(t, c.post("/tenants", url.Values{"name": {"no spaces"}}), http.StatusUnprocessableEntity)
	sw := c.get("/tenants/go?tenant=" + strings.TrimPrefix(tpath(tn, ""), "/tenants/"))
	if sw.Header.Get("Location") != tpath(tn, "/limits") {
		t.Fatalf("switch went to %q", sw.Header.Get("Location"))
	}
}

func TestStaticFilesAreServedWithLongCacheAndPagesCarryCSP(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	login := c.get("/login")
	wantStatus(t, login, http.StatusOK)
	if csp := login.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'self'") {
		t.Fatalf("CSP = %q", csp)
	}
	d := login.doc(t)
	if d.Find("script:not([src])").Length() != 0 {
		t.Fatal("inline script on a page: the CSP forbids it")
	}
	for _, sel := range []string{`link[rel="stylesheet"]`, `script[src*="htmx"]`, `script[src*="app.js"]`} {
		attr := "src"
		if strings.HasPrefix(sel, "link") {
			attr = "href"
		}
		src, _ := d.Find(sel).Attr(attr)
		res := c.get(src)
		wantStatus(t, res, http.StatusOK)
		if cc := res.Header.Get("Cache-Control"); !strings.Contains(cc, "max-age=31536000") {
			t.Fatalf("%s: Cache-Control = %q", src, cc)
		}
		// Under another version (an old instance of a rolling deploy asked for a new one's URL)
		// or none, the file is to be revalidated, not kept a year under that URL.
		for _, other := range []string{strings.Split(src, "?")[0], strings.Split(src, "?")[0] + "?v=000000000000"} {
			if cc := c.get(other).Header.Get("Cache-Control"); cc != "no-cache" {
				t.Fatalf("%s: Cache-Control = %q, want no-cache", other, cc)
			}
		}
	}
	// The captcha widget is loaded by tenants' pages on other origins (module scripts need CORS);
	// the dashboard's own assets are not offered cross-origin.
	widget := c.get("/static/altcha/altcha.min.js")
	wantStatus(t, widget, http.StatusOK)
	if got := widget.Header.Get("Access-Control-Allow-Origin"); got != "*" {
		t.Fatalf("widget Access-Control-Allow-Origin = %q, want *", got)
	}
	if got := c.get("/static/app.js").Header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Fatalf("app.js Access-Control-Allow-Origin = %q, want none", got)
	}
	wantStatus(t, c.get("/static/"), http.StatusNotFound)
	wantStatus(t, c.get("/static/../ui.go"), http.StatusNotFound)
	wantStatus(t, c.get("/static/nope.js"), http.StatusNotFound)
}

// tableFragment parses a <tbody> fragment the way htmx does: inside a table.
func tableFragment(t *testing.T, r response) *goquery.Document {
	t.Helper()
	if !strings.HasPrefix(strings.TrimSpace(r.body), "<tbody") {
		t.Fatalf("fragment does not start with <tbody>: %.80s", r.body)
	}
	d, err := goquery.NewDocumentFromReader(strings.NewReader("<table>" + r.body + "</table>"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDeleteALimitFromItsPageWithConfirmation: the limit's page links to a confirmation page; a
// post without the confirmation deletes nothing; with it, the definition and its keys' state go,
// audited, and the API no longer knows the limit.
func TestDeleteALimitFromItsPageWithConfirmation(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	ctx := context.Background()
	if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.engine.Limit(ctx, tn.ID, limiter.Request{Name: "api", Key: "bob", Count: 4}); err != nil {
		t.Fatal(err)
	}
	c := e.login(opEmail, opPassword)
	page := c.get(tpath(tn, "/limits/api"))
	wantStatus(t, page, http.StatusOK)
	confirm, _ := page.doc(t).Find("#delete-limit").Attr("href")
	if confirm != tpath(tn, "/limits/api/delete") {
		t.Fatalf("delete link %q", confirm)
	}
	wantStatus(t, c.get(confirm), http.StatusOK)
	wantStatus(t, c.post(confirm, nil), http.StatusSeeOther) // back to the confirmation
	if _, err := e.engine.GetDefinition(ctx, tn.ID, "api"); err != nil {
		t.Fatalf("deleted without confirmation: %v", err)
	}
	res := c.post(confirm, url.Values{"confirm": {"yes"}})
	wantStatus(t, res, http.StatusSeeOther)
	if loc := res.Header.Get("Location"); loc != tpath(tn, "/limits?msg=limit-deleted") {
		t.Fatalf("redirect to %q", loc)
	}
	if _, err := e.engine.GetDefinition(ctx, tn.ID, "api"); !limiter.IsNotFound(err) {
		t.Fatalf("the definition is still there: %v", err)
	}
	wantStatus(t, c.get(tpath(tn, "/limits/api")), http.StatusNotFound)
	wantStatus(t, c.post(confirm, url.Values{"confirm": {"yes"}}), http.StatusNotFound)
	if !strings.Contains(c.get(tpath(tn, "/audit")).body, "limit.delete") {
		t.Fatal("the deletion is not in the audit log")
	}
}

// TestAuditLogPagesAndFilters: the audit log pages 100 entries at a time (the filter kept across
// pages), narrows by actor, action and dates (to inclusive), and shows a bad date inline.
func TestAuditLogPagesAndFilters(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) { auditLogPagesAndFilters(t, newEnv(t, onDatabase(url))) })
}

func auditLogPagesAndFilters(t *testing.T, e *env) {
	e.operator()
	tn := e.tenant("acme")
	ctx := context.Background()
	for i := range 230 {
		actor, action := "user:a@example.com", "limit.reset"
		if i%10 == 0 {
			actor, action = "user:b@example.com", "key.revoke"
		}
		if err := e.svc.Audit(ctx, &tn.ID, actor, action, fmt.Sprint("t", i), ""); err != nil {
			t.Fatal(err)
		}
	}
	c := e.login(opEmail, opPassword)
	rows := func(r response) int { return r.doc(t).Find("#audit tbody tr").Length() }
	first := c.get(tpath(tn, "/audit"))
	wantStatus(t, first, http.StatusOK)
	total := rows(first)
	older, _ := first.doc(t).Find("#older").Attr("href")
	for older != "" {
		next := c.get(older)
		wantStatus(t, next, http.StatusOK)
		total += rows(next)
		older, _ = next.doc(t).Find("#older").Attr("href")
	}
	if rows(first) != 100 || total != 230 {
		t.Fatalf("first page %d rows, %d over all pages", rows(first), total)
	}
	revokes := c.get(tpath(tn, "/audit?action=key.revoke&actor=user:b@example.com"))
	if n := rows(revokes); n != 23 {
		t.Fatalf("filtered by action and actor: %d rows, want 23", n)
	}
	if strings.Contains(revokes.body, "limit.reset") {
		t.Fatal("the action filter let another action through")
	}
	paged := c.get(tpath(tn, "/audit?action=limit.reset"))
	if href, _ := paged.doc(t).Find("#older").Attr("href"); !strings.Contains(href, "action=limit.reset") || !strings.Contains(href, "before=") {
		t.Fatalf("the next page link %q drops the filter", href)
	}
	today := time.Now().UTC().Format(time.DateOnly)
	if n := rows(c.get(tpath(tn, "/audit?action=key.revoke&from="+today+"&to="+today))); n != 23 {
		t.Fatalf("from and to today: %d rows, want 23 (to is inclusive)", n)
	}
	if n := rows(c.get(tpath(tn, "/audit?action=key.revoke&to=9999-12-31"))); n != 23 {
		t.Fatalf("to the last day there is: %d rows, want 23", n)
	}
	future := c.get(tpath(tn, "/audit?from=2999-01-01"))
	if rows(future) != 0 || !strings.Contains(future.body, "Nothing matches") {
		t.Fatal("a filter matching nothing should say so")
	}
	bad := c.get(tpath(tn, "/audit?from=yesterday&to=31/12/2026"))
	wantStatus(t, bad, http.StatusUnprocessableEntity)
	if d := bad.doc(t); text(d, "#from-error") == "" || text(d, "#to-error") == "" || d.Find(`input[name="from"]`).AttrOr("value", "") != "yesterday" {
		t.Fatal("bad dates: every field error inline, and what was typed kept")
	}
	wantStatus(t, c.get("/audit?action=login"), http.StatusOK) // the security log takes the same filter
}
