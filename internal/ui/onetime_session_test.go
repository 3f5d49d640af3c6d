package ui_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/tenants"
)

// TestAOneTimeSecretOpensOnlyInTheSessionThatMadeIt: the cookie that carries a new key's secret
// across the redirect is bound to the session that created the key: another session (another
// user's on a shared browser, or the same user's after logging out and in) that presents it sees
// nothing, while the session that made it still does. It used to open for any session within
// its minute.
func TestAOneTimeSecretOpensOnlyInTheSessionThatMadeIt(t *testing.T) {
	e, tn, maker, page := aNewSecretKey(t, "shared")
	other := e.login(opEmail, opPassword) // a session of its own
	keys, _ := url.Parse(e.url + tpath(tn, "/keys"))
	handed := 0
	for _, ck := range maker.c.Jar.Cookies(keys) {
		if strings.Contains(ck.Name, "_once") {
			other.c.Jar.SetCookies(keys, []*http.Cookie{ck})
			handed++
		}
	}
	if handed != 1 {
		t.Fatalf("%d hand-over cookies after creating a key, want 1", handed)
	}
	seen := other.get(page)
	secret, _ := maker.get(page).doc(t).Find("#new-secret").Attr("value")
	if !strings.HasPrefix(secret, "sk_live_") {
		t.Fatalf("the session that made the key was shown %q, not its secret", secret)
	}
	if seen.doc(t).Find("#new-secret").Length() != 0 || strings.Contains(seen.body, secret) {
		t.Fatal("another session opened the one-time secret with the maker's cookie")
	}
}

// TestAHeadOfThePageLeavesTheOneTimeSecretForItsGet: HEAD is safe: a HEAD of the page a new key's
// secret is shown on (a link preview, a monitor) shows nothing, so it takes nothing; the GET that
// follows still shows the secret.
func TestAHeadOfThePageLeavesTheOneTimeSecretForItsGet(t *testing.T) {
	e, _, maker, page := aNewSecretKey(t, "previewed")
	res, err := maker.c.Head(e.url + page)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("HEAD %s: %d, want 200", page, res.StatusCode)
	}
	if secret, _ := maker.get(page).doc(t).Find("#new-secret").Attr("value"); !strings.HasPrefix(secret, "sk_live_") {
		t.Fatalf("after a HEAD of the page, its GET showed %q, not the new key's secret", secret)
	}
}

// aNewSecretKey has the operator create a secret key labelled label in tenant acme through the
// dashboard, and returns the session that did (maker) and the page the redirect leads to, where
// the key's secret is shown once.
func aNewSecretKey(t *testing.T, label string) (e *env, tn tenants.Tenant, maker *client, page string) {
	t.Helper()
	e = newEnv(t)
	e.operator()
	tn = e.tenant("acme")
	maker = e.login(opEmail, opPassword)
	posted := maker.post(tpath(tn, "/keys"), url.Values{"label": {label}, "kind": {"secret"}})
	wantStatus(t, posted, http.StatusSeeOther)
	return e, tn, maker, posted.Header.Get("Location")
}
