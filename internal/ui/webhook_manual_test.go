package ui_test

import (
	"context"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/webhooks"
)

// TestWebhookButtonsAreBoundedLikeTheAPI: the endpoint page's test and resend buttons are manual
// sendings as the API's are: past webhooks.MaxManualPerMinute a minute the answer is a 429 page
// that says so and when to try again (with Retry-After), and an endpoint with
// webhooks.MaxWaitingPerEndpoint deliveries waiting answers a 409 page that says why; neither a
// 500.
func TestWebhookButtonsAreBoundedLikeTheAPI(t *testing.T) {
	frozen := time.Now()
	e := newEnv(t, func(_ *config.Config, o *app.Options) { o.EngineNow = func() time.Time { return frozen } })
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)
	ctx := context.Background()
	busy, _, err := e.app.Webhooks.CreateEndpoint(ctx, tn.ID, "https://hooks.example.com/busy", []string{webhooks.EventKeyCreated})
	if err != nil {
		t.Fatal(err)
	}
	full, _, err := e.app.Webhooks.CreateEndpoint(ctx, tn.ID, "https://hooks.example.com/full", []string{webhooks.EventKeyCreated})
	if err != nil {
		t.Fatal(err)
	}
	page := func(ep webhooks.Endpoint) string { return tpath(tn, "/webhooks/"+strconv.FormatInt(ep.ID, 10)) }

	for range webhooks.MaxManualPerMinute {
		wantStatus(t, c.post(page(busy)+"/test", nil), http.StatusSeeOther)
	}
	resend, _ := c.get(page(busy)).doc(t).Find("#deliveries tbody tr form").Attr("action")
	if resend == "" {
		t.Fatal("no resend button")
	}
	for _, path := range []string{page(busy) + "/test", resend} {
		r := c.post(path, nil)
		wantStatus(t, r, http.StatusTooManyRequests)
		if !strings.Contains(strings.ToLower(r.body), "at most "+strconv.Itoa(webhooks.MaxManualPerMinute)+" test events and resends a minute") {
			t.Errorf("%s: the page does not say why: %s", path, r.body)
		}
		if wait, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || wait < 1 || wait > 60 {
			t.Errorf("%s: Retry-After %q, want 1 to 60 seconds", path, r.Header.Get("Retry-After"))
		}
	}

	later := time.Now().Add(time.Hour).UnixMilli() // not due: the dispatcher leaves them waiting
	var rows []map[string]any
	for i := range webhooks.MaxWaitingPerEndpoint {
		rows = append(rows, map[string]any{"id": "waiting-" + strconv.Itoa(i), "tenant_id": tn.ID, "endpoint_id": full.ID, "event": "key.created",
			"payload": "{}", "created_at": later, "attempts": 0, "next_attempt_at": later, "last_error": ""})
	}
	rows = append(rows, map[string]any{"id": "delivered", "tenant_id": tn.ID, "endpoint_id": full.ID, "event": "key.created", "payload": "{}",
		"created_at": later, "attempts": 1, "next_attempt_at": int64(math.MaxInt64), "delivered_at": later, "last_error": ""})
	if err := e.db.Gorm.Table("webhook_deliveries").CreateInBatches(rows, 200).Error; err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{page(full) + "/test", page(full) + "/deliveries/delivered/resend"} {
		r := c.post(path, nil)
		wantStatus(t, r, http.StatusConflict)
		if !strings.Contains(r.body, strconv.Itoa(webhooks.MaxWaitingPerEndpoint)+" deliveries waiting") {
			t.Errorf("%s: the page does not say why: %s", path, r.body)
		}
	}
}

// TestWebhookFormRefusesAHostOutsideASCII: a host name outside ASCII, which no delivery could
// reach, is an error beside the URL, kept as typed, as the API's 400 on url; its xn-- form is
// taken.
func TestWebhookFormRefusesAHostOutsideASCII(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)
	raw := "https://ünï.example/h"
	bad := c.post(tpath(tn, "/webhooks"), url.Values{"url": {raw}, "events": {"key.created"}})
	wantStatus(t, bad, http.StatusUnprocessableEntity)
	d := bad.doc(t)
	if !strings.Contains(text(d, "#url-error"), "invalid host") || d.Find("#url").AttrOr("value", "") != raw {
		t.Fatalf("error %q, kept %q", text(d, "#url-error"), d.Find("#url").AttrOr("value", ""))
	}
	if eps, err := e.app.Webhooks.Endpoints(context.Background(), tn.ID); err != nil || len(eps) != 0 {
		t.Fatalf("stored endpoints %+v (%v), want none", eps, err)
	}
	wantStatus(t, c.post(tpath(tn, "/webhooks"), url.Values{"url": {"https://xn--n-bga6a.example/h"}, "events": {"key.created"}}), http.StatusSeeOther)
}
