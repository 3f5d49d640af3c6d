package ui_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestTheDashboardAnswers503WhileTheDatabaseIsGone: a page or a form that cannot reach the
// database says the service is unavailable (503, retry shortly), as the API does, not that
// something went wrong (500): a proxy's health checks and an operator's alerts read the two apart.
func TestTheDashboardAnswers503WhileTheDatabaseIsGone(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)
	wantStatus(t, c.get(tpath(tn, "/limits")), http.StatusOK)

	if err := e.db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []response{
		c.get(tpath(tn, "/limits")),
		c.get("/tenants"),
		e.client().post("/login", url.Values{"email": {opEmail}, "password": {opPassword}}),
	} {
		wantStatus(t, r, http.StatusServiceUnavailable)
		if r.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s: 503 without Retry-After", r.Request.Method, r.Request.URL.Path)
		}
		if !strings.Contains(r.body, "unavailable") {
			t.Errorf("%s %s: the page does not say the service is unavailable:\n%s", r.Request.Method, r.Request.URL.Path, r.body)
		}
	}
}
