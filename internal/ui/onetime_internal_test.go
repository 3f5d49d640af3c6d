package ui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
)

// The hand-over cookie must be one a browser keeps: the tests' cookie jar does not apply the
// cookie-prefix rules, and over plain HTTP on localhost the cookie has no prefix, so this checks
// the production cookie against the rules themselves (RFC 6265bis: a __Host- cookie is Secure,
// has Path=/ and no Domain; a __Secure- cookie is Secure).
func TestTheOneTimeCookieKeepsTheBrowsersPrefixRules(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		u := &UI{insecure: insecure, sessionKey: []byte("0123456789abcdef0123456789abcdef"), now: time.Now}
		rec := httptest.NewRecorder()
		c, _ := gin.CreateTestContext(rec)
		u.putOneTime(c, "/tenants/1/keys", "key:k1", "the secret")
		cookies := rec.Result().Cookies()
		if len(cookies) != 1 {
			t.Fatalf("insecure=%v: %d cookies set, want 1", insecure, len(cookies))
		}
		ck := cookies[0]
		switch {
		case strings.HasPrefix(ck.Name, "__Host-") && (ck.Path != "/" || !ck.Secure || ck.Domain != ""):
			t.Errorf("%s with Path=%s Secure=%v Domain=%q: browsers refuse it", ck.Name, ck.Path, ck.Secure, ck.Domain)
		case strings.HasPrefix(ck.Name, "__Secure-") && !ck.Secure:
			t.Errorf("%s without Secure: browsers refuse it", ck.Name)
		case !insecure && !ck.Secure:
			t.Errorf("production cookie %s without Secure", ck.Name)
		}
		// And the next page of that path reads it back.
		req := httptest.NewRequest(http.MethodGet, "/tenants/1/keys", nil)
		req.AddCookie(ck)
		c2, _ := gin.CreateTestContext(httptest.NewRecorder())
		c2.Request = req
		if secret, ok := u.takeOneTime(c2, "/tenants/1/keys", "key:k1"); !ok || secret != "the secret" {
			t.Errorf("insecure=%v: took %q, %v; want the secret", insecure, secret, ok)
		}
	}
}
