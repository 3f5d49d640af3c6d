package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/tenants"
)

// TestEveryNewKeysSecretIsShown: two API keys created in the same browser within the minute (two
// tabs, or a second form sent before the first redirect was followed) each have their secret
// shown on their own page, once. The hand-over cookie was one per path, so the second key's
// replaced the first's, whose secret was never shown.
func TestEveryNewKeysSecretIsShown(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)
	var pages []string
	for _, label := range []string{"first", "second", "third"} {
		posted := c.post(tpath(tn, "/keys"), url.Values{"label": {label}, "kind": {"secret"}})
		wantStatus(t, posted, http.StatusSeeOther)
		pages = append(pages, posted.Header.Get("Location"))
	}
	seen := map[string]bool{}
	for i, page := range pages {
		res := c.get(page)
		wantStatus(t, res, http.StatusOK)
		secret, _ := res.doc(t).Find("#new-secret").Attr("value")
		if !strings.HasPrefix(secret, "sk_live_") {
			t.Fatalf("key %d of 3: its page (%s) shows no secret", i+1, page)
		}
		if seen[secret] {
			t.Fatalf("key %d of 3: its page shows another key's secret", i+1)
		}
		seen[secret] = true
		k, err := e.svc.Authenticate(context.Background(), secret, tenants.KindSecret)
		if err != nil {
			t.Fatalf("key %d of 3: the secret shown does not authenticate: %v", i+1, err)
		}
		if !strings.HasSuffix(page, "?created="+url.QueryEscape(k.KeyID)) {
			t.Fatalf("key %d of 3: page %s shows the secret of key %s", i+1, page, k.KeyID)
		}
		// Once: the page shows it no more.
		if again := c.get(page); again.doc(t).Find("#new-secret").Length() != 0 {
			t.Fatalf("key %d of 3: its secret is shown twice", i+1)
		}
	}
}
