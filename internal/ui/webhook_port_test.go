package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestWebhookFormRefusesAnImpossiblePort: the dashboard's form goes through the same URL checks
// as the API, so a port that is not 1 to 65535 is an error beside the URL, kept as typed, and
// nothing is stored.
func TestWebhookFormRefusesAnImpossiblePort(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)
	for _, raw := range []string{"https://93.184.216.34:99999/h", "https://93.184.216.34:0/h", "https://hooks.example.com:00443/h"} {
		bad := c.post(tpath(tn, "/webhooks"), url.Values{"url": {raw}, "events": {"key.created"}})
		wantStatus(t, bad, http.StatusUnprocessableEntity)
		d := bad.doc(t)
		if !strings.Contains(text(d, "#url-error"), "port") || d.Find("#url").AttrOr("value", "") != raw {
			t.Errorf("%s: error %q, kept %q", raw, text(d, "#url-error"), d.Find("#url").AttrOr("value", ""))
		}
	}
	if eps, err := e.app.Webhooks.Endpoints(context.Background(), tn.ID); err != nil || len(eps) != 0 {
		t.Fatalf("stored endpoints %+v (%v), want none", eps, err)
	}
	wantStatus(t, c.post(tpath(tn, "/webhooks"), url.Values{"url": {"https://93.184.216.34:8443/h"}, "events": {"key.created"}}), http.StatusSeeOther)
}
