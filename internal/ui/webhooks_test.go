package ui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
)

// TestWebhooksPageAddsEndpointsShowsTheirLogAndDeletesWithConfirmation walks the webhooks page:
// a bad URL is an inline error that keeps what was typed; a good one shows its secret once; the
// endpoint's page sends a test event, lists it once the dispatcher ran, and resends it; delete
// needs its confirmation box.
func TestWebhooksPageAddsEndpointsShowsTheirLogAndDeletesWithConfirmation(t *testing.T) {
	var hits atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer rcv.Close()
	e := newEnv(t, func(c *config.Config, _ *app.Options) { c.WebhookAllowPrivate = true })
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)

	page := c.get(tpath(tn, "/webhooks"))
	wantStatus(t, page, http.StatusOK)
	if got := page.doc(t).Find(`#new-webhook-form input[name="events"][checked]`).Length(); got != 6 {
		t.Fatalf("%d events ticked by default, want all 6", got)
	}

	bad := c.post(tpath(tn, "/webhooks"), url.Values{"url": {"ftp://nope.example/"}, "events": {"key.created"}})
	wantStatus(t, bad, http.StatusUnprocessableEntity)
	d := bad.doc(t)
	if text(d, "#url-error") == "" || d.Find("#url").AttrOr("value", "") != "ftp://nope.example/" {
		t.Fatalf("bad URL: error %q, kept %q", text(d, "#url-error"), d.Find("#url").AttrOr("value", ""))
	}
	if d.Find(`input[name="events"][value="key.created"][checked]`).Length() != 1 || d.Find(`input[name="events"][value="key.revoked"][checked]`).Length() != 0 {
		t.Fatal("the ticked events were not kept")
	}
	noEvents := c.post(tpath(tn, "/webhooks"), url.Values{"url": {rcv.URL}})
	wantStatus(t, noEvents, http.StatusUnprocessableEntity)
	if text(noEvents.doc(t), "#events-error") == "" {
		t.Fatal("no events: no inline error")
	}

	badThreshold := c.post(tpath(tn, "/webhooks"), url.Values{"url": {rcv.URL}, "events": {"limit.refusals"}, "refusalThreshold": {"many"}})
	wantStatus(t, badThreshold, http.StatusUnprocessableEntity)
	if d := badThreshold.doc(t); text(d, "#refusalThreshold-error") == "" || d.Find("#refusalThreshold").AttrOr("value", "") != "many" {
		t.Fatalf("bad threshold: error %q, kept %q", text(d, "#refusalThreshold-error"), d.Find("#refusalThreshold").AttrOr("value", ""))
	}
	loud := c.post(tpath(tn, "/webhooks"), url.Values{"url": {rcv.URL + "/alerts"}, "events": {"limit.refusals"}, "refusalThreshold": {"7"}})
	wantStatus(t, loud, http.StatusSeeOther)
	if rows := c.get(tpath(tn, "/webhooks")).doc(t).Find("#webhooks tbody").Text(); !strings.Contains(rows, "limit.refusals at 7 a minute") {
		t.Fatalf("the list does not show the endpoint's threshold: %q", rows)
	}
	eps, err := e.app.Webhooks.Endpoints(context.Background(), tn.ID)
	if err != nil || len(eps) != 1 || eps[0].RefusalThreshold != 7 {
		t.Fatalf("stored endpoints %+v (%v), want one with threshold 7", eps, err)
	}
	if err := e.app.Webhooks.DeleteEndpoint(context.Background(), tn.ID, eps[0].ID); err != nil {
		t.Fatal(err)
	}

	// POST-redirect-GET, as for API keys: the page after the redirect shows the secret once, and
	// reloading it creates no second endpoint (the create form answered the POST itself).
	posted := c.post(tpath(tn, "/webhooks"), url.Values{"url": {rcv.URL + "/hook"}, "events": {"key.created", "key.revoked"}})
	wantStatus(t, posted, http.StatusSeeOther)
	created := c.get(posted.Header.Get("Location"))
	wantStatus(t, created, http.StatusOK)
	secret := created.doc(t).Find("#new-secret").AttrOr("value", "")
	if !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("secret %q", secret)
	}
	if !strings.Contains(created.body, rcv.URL+"/hook") {
		t.Fatal("the page with the secret does not name the endpoint's URL")
	}
	reloaded := c.get(posted.Header.Get("Location"))
	if strings.Contains(reloaded.body, secret) {
		t.Fatal("reloading the page shows the secret again")
	}
	if eps, err := e.app.Webhooks.Endpoints(context.Background(), tn.ID); err != nil || len(eps) != 1 {
		t.Fatalf("stored endpoints %+v (%v), want the one created", eps, err)
	}
	list := c.get(tpath(tn, "/webhooks"))
	if strings.Contains(list.body, secret) {
		t.Fatal("the secret is shown again")
	}
	logURL, _ := list.doc(t).Find("#webhooks tbody tr a").Attr("href")
	if logURL == "" {
		t.Fatal("no link to the endpoint's page")
	}

	wantStatus(t, c.post(logURL+"/test", nil), http.StatusSeeOther)
	if _, err := e.app.Webhooks.DeliverDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	logPage := c.get(logURL)
	wantStatus(t, logPage, http.StatusOK)
	rows := logPage.doc(t).Find("#deliveries tbody tr")
	if rows.Length() != 1 || !strings.Contains(rows.Find(".state").Text(), "delivered") || hits.Load() != 1 {
		t.Fatalf("log after the test event: %d rows, state %q, receiver hits %d", rows.Length(), rows.Find(".state").Text(), hits.Load())
	}
	resend, _ := rows.Find("form").Attr("action")
	wantStatus(t, c.post(resend, nil), http.StatusSeeOther)
	if _, err := e.app.Webhooks.DeliverDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	if hits.Load() != 2 {
		t.Fatalf("after resend the receiver has %d hits, want 2", hits.Load())
	}

	del, _ := list.doc(t).Find("#webhooks form").Attr("action")
	wantStatus(t, c.post(del, nil), http.StatusUnprocessableEntity) // no confirmation
	wantStatus(t, c.post(del, url.Values{"confirm": {"yes"}}), http.StatusSeeOther)
	wantStatus(t, c.get(logURL), http.StatusNotFound)
	if strings.Contains(c.get(tpath(tn, "/webhooks")).body, rcv.URL) {
		t.Fatal("the endpoint is still listed after delete")
	}
	wantStatus(t, c.get(tpath(tn, "/webhooks/abc")), http.StatusNotFound)

	audit := c.get(tpath(tn, "/audit")).body
	for _, action := range []string{"webhook.create", "webhook.test", "webhook.resend", "webhook.delete"} {
		if !strings.Contains(audit, action) {
			t.Errorf("audit log lacks %s", action)
		}
	}
}
