package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/captcha"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// newCaptchaEnv is newEnv with the application's captcha store, whose sessions the dashboard lists.
func newCaptchaEnv(t *testing.T) (*env, *captcha.Store) {
	t.Helper()
	e := newEnv(t)
	return e, e.app.Captcha
}

// authorize runs the real flow for sessionID of tn: issue a challenge, solve it, verify the
// payload and authorize the session in the store.
func authorize(t *testing.T, st *captcha.Store, tn tenants.Tenant, sessionID string) time.Time {
	t.Helper()
	is, err := captcha.NewIssuer([]byte("0123456789abcdef0123456789abcdef-captcha-key"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := is.Create(tn.ID, sessionID, 200, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := captcha.Solve(ch)
	if err != nil {
		t.Fatal(err)
	}
	solved, err := is.Verify(payload, tn.ID, sessionID, 1)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := st.Authorize(context.Background(), tn.ID, sessionID, solved, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return exp
}

func settingsForm(origins, difficulty string) url.Values {
	return url.Values{"origins": {origins}, "difficulty": {difficulty}}
}

// lastAudit returns the newest audit entry of tn with the given action.
func (e *env) lastAudit(tn tenants.Tenant, action string) (tenants.AuditEntry, bool) {
	e.t.Helper()
	entries, err := e.svc.AuditLog(context.Background(), tn.ID, 100)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, a := range entries {
		if a.Action == action {
			return a, true
		}
	}
	return tenants.AuditEntry{}, false
}

func TestCaptchaSettingsAreSavedAndShown(t *testing.T) {
	e, _ := newCaptchaEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)

	page := c.get(tpath(tn, "/captcha"))
	wantStatus(t, page, http.StatusOK)
	d := page.doc(t)
	if v, _ := d.Find("#difficulty").Attr("value"); v != "50000" {
		t.Fatalf("default difficulty shown as %q", v)
	}
	if got := text(d, "#origins"); got != "" {
		t.Fatalf("origins of a new tenant = %q", got)
	}
	if d.Find(`nav.tabs a.active[href="`+tpath(tn, "/captcha")+`"]`).Length() != 1 {
		t.Fatal("the Captcha tab is not shown as active")
	}

	res := c.post(tpath(tn, "/captcha/settings"), settingsForm("https://Shop.example/\r\n\r\n  http://localhost:3000\nhttps://shop.example", " 80000 "))
	wantStatus(t, res, http.StatusSeeOther)
	if loc := res.Header.Get("Location"); loc != tpath(tn, "/captcha?msg=captcha-saved") {
		t.Fatalf("redirect to %q", loc)
	}
	stored, err := e.svc.Tenant(context.Background(), tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(stored.AllowedOrigins, " ") != "https://shop.example http://localhost:3000" || stored.CaptchaDifficulty != 80000 {
		t.Fatalf("stored origins %q, difficulty %d", stored.AllowedOrigins, stored.CaptchaDifficulty)
	}

	d = c.get(res.Header.Get("Location")).doc(t)
	if got := text(d, "#flash"); got != "Captcha settings saved." {
		t.Fatalf("flash = %q", got)
	}
	if got := text(d, "#origins"); got != "https://shop.example\nhttp://localhost:3000" {
		t.Fatalf("origins shown as %q", got)
	}
	if v, _ := d.Find("#difficulty").Attr("value"); v != "80000" {
		t.Fatalf("difficulty shown as %q", v)
	}
	a, ok := e.lastAudit(tn, "captcha.settings")
	if !ok || a.Actor != "user:"+opEmail || !strings.Contains(a.Detail, "80000") || !strings.Contains(a.Detail, "https://shop.example") {
		t.Fatalf("audit entry %+v (found %v)", a, ok)
	}

	// Clearing every origin is allowed (no page may then fetch challenges).
	wantStatus(t, c.post(tpath(tn, "/captcha/settings"), settingsForm("", "1000")), http.StatusSeeOther)
	if stored, _ := e.svc.Tenant(context.Background(), tn.ID); len(stored.AllowedOrigins) != 0 || stored.CaptchaDifficulty != 1000 {
		t.Fatalf("after clearing: %+v", stored)
	}
	if a, _ := e.lastAudit(tn, "captcha.settings"); !strings.HasSuffix(a.Detail, "→ difficulty 1000, no origins") || !strings.HasPrefix(a.Detail, "difficulty 80000, origins ") {
		t.Fatalf("the change is not audited with before and after: %q", a.Detail)
	}
}

func TestCaptchaPageShowsEmbedSnippet(t *testing.T) {
	e, _ := newCaptchaEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)
	snippet := text(c.get(tpath(tn, "/captcha")).doc(t), "#embed-snippet")
	want := `<altcha-widget challenge="http://127.0.0.1/v1/captcha/challenge?pk=PUBLISHABLE_KEY&sid=SESSION_ID"></altcha-widget>`
	if !strings.Contains(snippet, want) {
		t.Fatalf("snippet %q lacks %q", snippet, want)
	}
	m := regexp.MustCompile(`<script type="module" src="http://127\.0\.0\.1(/static/altcha/altcha\.min\.js\?v=([0-9a-f]+))"></script>`).FindStringSubmatch(snippet)
	if m == nil {
		t.Fatalf("snippet %q lacks the widget's script tag with its version (/static/altcha/altcha.min.js?v=…)", snippet)
	}
	// The script it names is really served, and the version in its URL is this file's: /static
	// caches for a year, so tenants' pages must name the widget of this binary.
	res := c.get(m[1])
	wantStatus(t, res, http.StatusOK)
	if etag := res.Header.Get("ETag"); etag != `"`+m[2]+`"` {
		t.Fatalf("the snippet names version %s, the widget served is %s", m[2], etag)
	}
}

func TestCaptchaInvalidSettingsShowInlineErrors(t *testing.T) {
	e, _ := newCaptchaEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)

	res := c.post(tpath(tn, "/captcha/settings"), settingsForm("https://ok.example\nftp://files.example", "60000"))
	wantStatus(t, res, http.StatusUnprocessableEntity)
	d := res.doc(t)
	if got := text(d, "#origins-error"); !strings.Contains(got, "ftp://files.example") || !strings.Contains(got, "scheme") {
		t.Fatalf("origins error = %q", got)
	}
	if v, _ := d.Find("#origins").Attr("aria-invalid"); v != "true" {
		t.Fatalf("origins aria-invalid = %q", v)
	}
	// The form keeps what was typed, and the valid field shows no error.
	if got := text(d, "#origins"); got != "https://ok.example\nftp://files.example" {
		t.Fatalf("origins kept as %q", got)
	}
	if v, _ := d.Find("#difficulty").Attr("value"); v != "60000" {
		t.Fatalf("difficulty kept as %q", v)
	}
	if d.Find("#difficulty-error").Length() != 0 {
		t.Fatal("a valid difficulty shows an error")
	}

	for _, bad := range []string{"999", "5000001", "abc", "", "1e5"} {
		res := c.post(tpath(tn, "/captcha/settings"), settingsForm("https://ok.example", bad))
		wantStatus(t, res, http.StatusUnprocessableEntity)
		if got := text(res.doc(t), "#difficulty-error"); !strings.Contains(got, "between 1000 and 5000000") {
			t.Fatalf("difficulty %q: error = %q", bad, got)
		}
	}
	// Nothing was saved.
	stored, _ := e.svc.Tenant(context.Background(), tn.ID)
	if len(stored.AllowedOrigins) != 0 || stored.CaptchaDifficulty != 50000 {
		t.Fatalf("invalid input changed the settings: %+v", stored)
	}
	if _, ok := e.lastAudit(tn, "captcha.settings"); ok {
		t.Fatal("invalid input was audited as saved")
	}
}

func TestPublishableKeyIsShownAgainAndFilledIntoSnippet(t *testing.T) {
	e, _ := newCaptchaEnv(t)
	e.operator()
	tn := e.tenant("acme")
	ctx := context.Background()
	if _, _, err := e.svc.CreateKey(ctx, tn.ID, tenants.KindSecret, "backend", "test"); err != nil {
		t.Fatal(err)
	}
	c := e.login(opEmail, opPassword)
	if got := text(c.get(tpath(tn, "/captcha")).doc(t), "#publishable-keys-card .empty"); got != "No publishable keys yet." {
		t.Fatalf("a secret key is listed as publishable: %q", got)
	}

	// POST-redirect-GET: the form redirects to the captcha page, which shows the new key once;
	// reloading that page creates no second key.
	posted := c.post(tpath(tn, "/captcha/keys"), url.Values{"label": {"marketing site"}})
	wantStatus(t, posted, http.StatusSeeOther)
	if loc := posted.Header.Get("Location"); !strings.HasPrefix(loc, tpath(tn, "/captcha?created=")) || strings.Contains(posted.body, "pk_live_") {
		t.Fatalf("the form redirects to %q, answering %q", loc, posted.body)
	}
	res := c.get(posted.Header.Get("Location"))
	wantStatus(t, res, http.StatusOK)
	if cc := res.Header.Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("Cache-Control = %q", cc)
	}
	d := res.doc(t)
	pk, _ := d.Find("#new-secret").Attr("value")
	if !strings.HasPrefix(pk, "pk_live_") || len(pk) != tenants.KeyLen {
		t.Fatalf("publishable key = %q", pk)
	}
	if p, err := e.svc.Authenticate(ctx, pk, tenants.KindPublishable); err != nil || p.TenantID != tn.ID {
		t.Fatalf("the shown key does not authenticate as publishable: %+v %v", p, err)
	}
	if snippet := text(d, "#embed-snippet"); !strings.Contains(snippet, "?pk="+pk+"&sid=SESSION_ID") {
		t.Fatalf("snippet does not carry the new key: %q", snippet)
	}
	rows := d.Find("#publishable-keys tbody tr[data-key-id]")
	if rows.Length() != 1 || !strings.Contains(rows.Text(), "marketing site") || strings.Contains(rows.Text(), "backend") {
		t.Fatalf("publishable key list: %q", rows.Text())
	}
	if a, ok := e.lastAudit(tn, "key.create"); !ok || a.Actor != "user:"+opEmail {
		t.Fatalf("key.create audit %+v", a)
	}

	reloaded := c.get(posted.Header.Get("Location")) // the browser's reload
	wantStatus(t, reloaded, http.StatusOK)
	if rd := reloaded.doc(t); rd.Find("#new-secret").Length() != 0 || rd.Find("#publishable-keys tbody tr[data-key-id]").Length() != 1 {
		t.Fatal("reloading the page after the form showed the key as new again, or listed a second key")
	}
	if keys, err := e.svc.ListKeys(ctx, tn.ID); err != nil || len(keys) != 2 {
		t.Fatalf("%d keys (%v), want the secret one and one publishable", len(keys), err)
	}

	again := c.get(tpath(tn, "/captcha"))
	wantStatus(t, again, http.StatusOK)
	// Shown again (a publishable key is public by design), in the list and the snippet, but no
	// longer as a new key.
	ad := again.doc(t)
	if ad.Find("#new-secret").Length() != 0 || ad.Find("#publishable-keys input.pk-value").AttrOr("value", "") != pk ||
		!strings.Contains(text(ad, "#embed-snippet"), "?pk="+pk+"&sid=SESSION_ID") {
		t.Fatal("the publishable key is not listed again, or the snippet lost it")
	}

	bad := c.post(tpath(tn, "/captcha/keys"), url.Values{"label": {strings.Repeat("x", 101)}})
	wantStatus(t, bad, http.StatusUnprocessableEntity)
	if got := text(bad.doc(t), "#pk-label-error"); !strings.Contains(got, "100") {
		t.Fatalf("label error = %q", got)
	}
}

func TestCaptchaSessionsAreListedAndRevoked(t *testing.T) {
	e, st := newCaptchaEnv(t)
	e.operator()
	tn, other := e.tenant("acme"), e.tenant("other")
	ctx := context.Background()
	const sid, otherSID = "Zm9vYmFyYmF6cXV4cXV1eA", "0123456789abcdef0123456789abcdef"
	exp := authorize(t, st, tn, sid)
	authorize(t, st, other, otherSID)
	hash, otherHash := captcha.HashSessionID(sid), captcha.HashSessionID(otherSID)
	c := e.login(opEmail, opPassword)

	d := c.get(tpath(tn, "/captcha")).doc(t)
	rows := d.Find("#sessions tbody tr")
	if rows.Length() != 1 {
		t.Fatalf("%d session rows, want 1", rows.Length())
	}
	if h, _ := rows.Attr("data-session-hash"); h != hash {
		t.Fatalf("listed session %q, want %q", h, hash)
	}
	if got := strings.TrimSpace(rows.Find(".session-hash").Text()); got != hash[:16]+"…" {
		t.Fatalf("hash prefix shown as %q", got)
	}
	if got := strings.TrimSpace(rows.Find(".expires-at").Text()); got != exp.UTC().Format("2006-01-02 15:04:05 UTC") {
		t.Fatalf("expires at shown as %q, want %s", got, exp)
	}
	if strings.TrimSpace(rows.Find(".authorized-at").Text()) == "" {
		t.Fatal("no authorized-at time")
	}
	if strings.Contains(d.Text(), otherHash[:16]) || strings.Contains(d.Text(), sid) {
		t.Fatal("the page shows another tenant's session or a raw session ID")
	}

	// Another tenant's session cannot be revoked through this tenant's URL.
	wantStatus(t, c.post(tpath(tn, "/captcha/sessions/"+otherHash+"/revoke"), nil), http.StatusNotFound)
	if ok, _ := st.IsAuthorized(ctx, other.ID, otherSID); !ok {
		t.Fatal("another tenant's session was revoked")
	}

	action, _ := rows.Find("form").Attr("action")
	res := c.post(action, nil)
	wantStatus(t, res, http.StatusSeeOther)
	if ok, err := st.IsAuthorized(ctx, tn.ID, sid); err != nil || ok {
		t.Fatalf("after revoke: IsAuthorized = %v, %v", ok, err)
	}
	d = c.get(res.Header.Get("Location")).doc(t)
	if d.Find("#sessions tbody tr").Length() != 0 || text(d, "#captcha-sessions .empty") != "No authorized sessions." {
		t.Fatal("the revoked session is still listed")
	}
	if a, ok := e.lastAudit(tn, "session.revoke"); !ok || a.Actor != "user:"+opEmail || a.Target != "session:"+hash {
		t.Fatalf("session.revoke audit %+v (found %v)", a, ok)
	}
	// Revoking again, or a made-up hash, finds nothing.
	wantStatus(t, c.post(action, nil), http.StatusNotFound)
	wantStatus(t, c.post(tpath(tn, "/captcha/sessions/not-a-hash/revoke"), nil), http.StatusNotFound)
}

func TestCaptchaPageOfAnotherTenantIsNotFound(t *testing.T) {
	e, st := newCaptchaEnv(t)
	a, b := e.tenant("a-corp"), e.tenant("b-corp")
	ctx := context.Background()
	if err := e.svc.UpdateCaptchaSettings(ctx, b.ID, []string{"https://b.example"}, 70000, "test"); err != nil {
		t.Fatal(err)
	}
	const bSID = "b-session-0123456789abcdef"
	authorize(t, st, b, bSID)
	bHash := captcha.HashSessionID(bSID)
	if _, err := e.svc.CreateUser(ctx, "member@a.example", "member-password-1", false, &a.ID, "test", ""); err != nil {
		t.Fatal(err)
	}
	c := e.login("member@a.example", "member-password-1")
	wantStatus(t, c.get(tpath(a, "/captcha")), http.StatusOK)

	res := c.get(tpath(b, "/captcha"))
	wantStatus(t, res, http.StatusNotFound)
	if strings.Contains(res.body, "b.example") || strings.Contains(res.body, bHash[:16]) {
		t.Fatal("the 404 leaks tenant B's captcha data")
	}
	wantStatus(t, c.post(tpath(b, "/captcha/settings"), settingsForm("https://evil.example", "1000")), http.StatusNotFound)
	wantStatus(t, c.post(tpath(b, "/captcha/keys"), url.Values{"label": {"sneaky"}}), http.StatusNotFound)
	wantStatus(t, c.post(tpath(b, "/captcha/sessions/"+bHash+"/revoke"), nil), http.StatusNotFound)
	// B's hash through A's URL finds nothing either.
	wantStatus(t, c.post(tpath(a, "/captcha/sessions/"+bHash+"/revoke"), nil), http.StatusNotFound)

	stored, _ := e.svc.Tenant(ctx, b.ID)
	if strings.Join(stored.AllowedOrigins, " ") != "https://b.example" || stored.CaptchaDifficulty != 70000 {
		t.Fatalf("B's settings changed: %+v", stored)
	}
	if ks, _ := e.svc.ListKeys(ctx, b.ID); len(ks) != 0 {
		t.Fatalf("a key was created for B: %+v", ks)
	}
	if ok, _ := st.IsAuthorized(ctx, b.ID, bSID); !ok {
		t.Fatal("B's session was revoked")
	}
}

func TestCaptchaCrossOriginPostsAreRefused(t *testing.T) {
	e, st := newCaptchaEnv(t)
	e.operator()
	tn := e.tenant("acme")
	ctx := context.Background()
	const sid = "cross-origin-session-0123"
	authorize(t, st, tn, sid)
	revokeURL := tpath(tn, "/captcha/sessions/"+captcha.HashSessionID(sid)+"/revoke")
	c := e.login(opEmail, opPassword)

	posts := map[string]url.Values{
		tpath(tn, "/captcha/settings"): settingsForm("https://evil.example", "1000"),
		tpath(tn, "/captcha/keys"):     {"label": {"evil"}},
		revokeURL:                      nil,
	}
	for p, form := range posts {
		for _, h := range [][]string{{"Sec-Fetch-Site", "cross-site"}, {"Origin", "https://evil.example"}} {
			res := c.post(p, form, h...)
			wantStatus(t, res, http.StatusForbidden)
		}
	}
	stored, _ := e.svc.Tenant(ctx, tn.ID)
	if len(stored.AllowedOrigins) != 0 || stored.CaptchaDifficulty != 50000 {
		t.Fatalf("a cross-origin post changed the settings: %+v", stored)
	}
	if ks, _ := e.svc.ListKeys(ctx, tn.ID); len(ks) != 0 {
		t.Fatalf("a cross-origin post created a key: %+v", ks)
	}
	if ok, _ := st.IsAuthorized(ctx, tn.ID, sid); !ok {
		t.Fatal("a cross-origin post revoked the session")
	}
	// The same revoke from our own origin works: the check is what refused the others.
	wantStatus(t, c.post(revokeURL, nil, "Sec-Fetch-Site", "same-origin", "Origin", e.url), http.StatusSeeOther)
	if ok, _ := st.IsAuthorized(ctx, tn.ID, sid); ok {
		t.Fatal("the same-origin revoke did not revoke")
	}
}
