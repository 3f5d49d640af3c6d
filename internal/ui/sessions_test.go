package ui_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// adminSessionCells is every value of every admin_sessions row, as column=text.
func adminSessionCells(t *testing.T, e *env) []string {
	t.Helper()
	var out []string
	for _, row := range testkit.Rows(t, e.db, "admin_sessions") {
		for _, c := range row {
			out = append(out, c.Column+"="+c.Text)
		}
	}
	return out
}

// A copy of the database must not yield a live dashboard session: admin_sessions holds only a
// hash of the ID that the cookie carries.
func TestAdminSessionIDsAreStoredOnlyHashed(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		e := newEnv(t, onDatabase(url))
		e.operator()
		c := e.login(opEmail, opPassword)
		tok := c.cookie()
		jti := sessionClaims(t, tok).ID
		if len(jti) < 32 {
			t.Fatalf("session ID %q is shorter than 128 bits of hex", jti)
		}
		cells := adminSessionCells(t, e)
		if len(cells) == 0 {
			t.Fatal("the login created no admin_sessions row")
		}
		for _, cell := range cells {
			if strings.Contains(strings.ToLower(cell), strings.ToLower(jti)) {
				t.Fatalf("admin_sessions stores the cookie's session ID: %s", cell)
			}
		}
		wantStatus(t, e.getWithCookie("/tenants", tok), http.StatusOK)
		wantStatus(t, c.post("/logout", nil), http.StatusSeeOther)
		refused(t, e.getWithCookie("/tenants", tok))
	})
}

// Instances behind one load balancer never have exactly the same clock: a cookie issued by an
// instance whose clock runs ahead must work on one whose clock lags (within the leeway).
func TestSessionWorksAcrossInstancesWithSkewedClocks(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		const skew = 30 * time.Second
		ahead := newEnv(t, onDatabase(url), func(_ *config.Config, o *app.Options) {
			o.Now = func() time.Time { return time.Now().Add(skew) }
		})
		lagging := newEnv(t, onDatabase(url))
		ahead.operator()
		c := ahead.login(opEmail, opPassword)
		tok := c.cookie()
		wantStatus(t, ahead.getWithCookie("/tenants", tok), http.StatusOK)
		wantStatus(t, lagging.getWithCookie("/tenants", tok), http.StatusOK)

		// And the other way round: a cookie from the lagging instance works on the one ahead.
		back := lagging.login(opEmail, opPassword)
		wantStatus(t, ahead.getWithCookie("/tenants", back.cookie()), http.StatusOK)
	})
}
