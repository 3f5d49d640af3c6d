package sluice_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// TestQuotaAndNestedBudgetsRoundTrip: a quota's calendar fields survive Put and Get (and a
// write-back), a child's parents are spent with the decision's attributes and reported in
// Result.Parents, and Value reports the quota's window.
func TestQuotaAndNestedBudgetsRoundTrip(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	org, team := limitName(t, "org"), limitName(t, "team")
	quota := sluice.Definition{Kind: sluice.Quota, Rate: 3, Calendar: sluice.Month, TimeZone: "Europe/Berlin", AnchorDay: 31}
	if _, err := c.Put(ctx, org, quota); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, org)
	if err != nil || got.Kind != sluice.Quota || got.Calendar != sluice.Month || got.TimeZone != "Europe/Berlin" || got.AnchorDay != 31 || got.Period != 0 {
		t.Fatalf("stored quota = %+v, %v", got, err)
	}
	if _, err := c.Put(ctx, org, got.Definition); err != nil { // read, write back: nothing lost
		t.Fatal(err)
	}
	child := sluice.Definition{Kind: sluice.FixedWindow, Rate: 10, Period: 3_600_000, Parents: []sluice.Parent{{Name: org, Key: "org:{org}"}}}
	if _, err := c.Put(ctx, team, child); err != nil {
		t.Fatal(err)
	}
	r, err := c.Limit(ctx, team, sluice.Decision{Key: "t1", Count: sluice.Count(2), Attributes: map[string]string{"org": "acme"}})
	if err != nil || !r.OK || len(r.Parents) != 1 || r.Parents[0].Name != org || r.Parents[0].Key != "org:acme" || r.Parents[0].Remaining != 1 {
		t.Fatalf("decision = %+v (%+v), %v", r, r.Parents, err)
	}
	refused, err := c.Limit(ctx, team, sluice.Decision{Key: "t2", Count: sluice.Count(2), Attributes: map[string]string{"org": "acme"}})
	if err != nil || refused.OK || refused.Parents[0].OK || refused.RetryAfter <= 0 {
		t.Fatalf("over the org's quota = %+v (%+v), %v", refused, refused.Parents, err)
	}
	var apiErr *sluice.Error
	if _, err := c.Limit(ctx, team, sluice.Decision{Key: "t3"}); !errors.As(err, &apiErr) || apiErr.Field != "attributes.org" {
		t.Fatalf("a missing attribute: %v", err)
	}
	v, err := c.Value(ctx, org, "org:acme")
	if err != nil || v.WindowStart == nil || v.ResetAt == nil || *v.ResetAt <= time.Now().UnixMilli() || *v.WindowStart > time.Now().UnixMilli() {
		t.Fatalf("quota value = %+v, %v", v, err)
	}
}

// TestWebhooksAreManagedAndVerified: an endpoint created through the client receives the events
// of the tenant's changes from the real server, signed so that VerifyWebhook accepts them and
// rejects a tampered body or a stale timestamp; the delivery log, a test event, a resend and a
// delete work.
func TestWebhooksAreManagedAndVerified(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	type delivery struct {
		header http.Header
		body   []byte
	}
	got := make(chan delivery, 16)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- delivery{r.Header.Clone(), b}
	}))
	defer rcv.Close()
	next := func(what string) delivery {
		t.Helper()
		select {
		case d := <-got:
			return d
		case <-time.After(60 * time.Second):
			t.Fatalf("waited 60 s for the server to deliver %s", what)
			panic("unreachable")
		}
	}
	hook, secret, err := c.CreateWebhook(ctx, rcv.URL, []string{sluice.EventDefinitionChanged})
	if err != nil || hook.ID == 0 || len(secret) < 10 {
		t.Fatalf("create = %+v %q, %v", hook, secret, err)
	}
	defer func() { _ = c.DeleteWebhook(ctx, hook.ID) }()
	name := limitName(t, "hooked")
	if _, err := c.Put(ctx, name, sluice.Definition{Kind: sluice.TokenBucket, Rate: 1, Period: 1000}); err != nil {
		t.Fatal(err)
	}
	d := next("the definition.changed event")
	if err := sluice.VerifyWebhook(secret, d.header, d.body, 0); err != nil {
		t.Fatalf("a real delivery does not verify: %v (headers %v)", err, d.header)
	}
	var payload struct {
		Type string `json:"type"`
		Data struct {
			Target string `json:"target"`
		} `json:"data"`
	}
	if err := json.Unmarshal(d.body, &payload); err != nil || payload.Type != sluice.EventDefinitionChanged || payload.Data.Target != name {
		t.Fatalf("payload %s (%v)", d.body, err)
	}
	if err := sluice.VerifyWebhook(secret, d.header, append(d.body, ' '), 0); !errors.Is(err, sluice.ErrWebhookSignature) {
		t.Fatalf("a tampered body verified: %v", err)
	}
	// A correctly signed delivery from an hour ago (a replay) is refused for its age alone.
	stale := d.header.Clone()
	old := strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(d.header.Get("webhook-id") + "." + old + "."))
	mac.Write(d.body)
	stale.Set("webhook-timestamp", old)
	stale.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	if err := sluice.VerifyWebhook(secret, stale, d.body, 2*time.Hour); err != nil {
		t.Fatalf("the re-signed delivery does not verify within a 2 h tolerance: %v", err)
	}
	if err := sluice.VerifyWebhook(secret, stale, d.body, 0); !errors.Is(err, sluice.ErrWebhookSignature) {
		t.Fatalf("a stale timestamp verified: %v", err)
	}
	if err := c.SendTestWebhook(ctx, hook.ID); err != nil {
		t.Fatal(err)
	}
	if test := next("the test event"); sluice.VerifyWebhook(secret, test.header, test.body, 0) != nil {
		t.Fatal("the test event does not verify")
	}
	log, err := c.WebhookDeliveries(ctx, hook.ID, 10)
	if err != nil || len(log) != 2 {
		t.Fatalf("delivery log = %+v, %v", log, err)
	}
	if err := c.ResendWebhookDelivery(ctx, hook.ID, log[len(log)-1].ID); err != nil {
		t.Fatal(err)
	}
	if again := next("the resent delivery"); again.header.Get("webhook-id") != d.header.Get("webhook-id") {
		t.Fatalf("the resend has webhook-id %q, the first delivery %q", again.header.Get("webhook-id"), d.header.Get("webhook-id"))
	}
	if hooks, err := c.Webhooks(ctx); err != nil || len(hooks) == 0 {
		t.Fatalf("list = %+v, %v", hooks, err)
	}
	if err := c.DeleteWebhook(ctx, hook.ID); err != nil {
		t.Fatal(err)
	}
	var apiErr *sluice.Error
	if _, err := c.WebhookDeliveries(ctx, hook.ID, 0); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Fatalf("deliveries of a deleted endpoint: %v", err)
	}
}

// TestRefundGivesBackWhatWasTaken: a refund through the client gives tokens back, never above
// the limit's maximum; an impossible count is refused before sending.
func TestRefundGivesBackWhatWasTaken(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	name := limitName(t, "refund")
	if _, err := c.Put(ctx, name, sluice.Definition{Kind: sluice.FixedWindow, Rate: 10, Period: 3_600_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Limit(ctx, name, sluice.Decision{Key: "k", Count: sluice.Count(6)}); err != nil {
		t.Fatal(err)
	}
	r, err := c.Refund(ctx, name, sluice.Refund{Key: "k", Count: 4})
	if err != nil || r.Refunded != 4 || r.Remaining != 8 {
		t.Fatalf("refund = %+v, %v", r, err)
	}
	if r, err = c.Refund(ctx, name, sluice.Refund{Key: "k", Count: 50}); err != nil || r.Refunded != 2 || r.Remaining != 10 {
		t.Fatalf("refund past the maximum = %+v, %v", r, err)
	}
	if _, err := c.Refund(ctx, name, sluice.Refund{Key: "k", Count: -1}); !errors.Is(err, sluice.ErrInvalidArgument) {
		t.Fatalf("a negative refund: %v", err)
	}
}

// TestARefundIsRetriedOnlyUnderAnIdempotencyKey: a refund whose answer is lost is not retried
// without a key (it may have given the tokens back); under WithIdempotencyKey it is, and Sluice
// replays the first answer (Replayed), so the tokens come back once. Against the real server
// through a proxy that loses the first answer.
func TestARefundIsRetriedOnlyUnderAnIdempotencyKey(t *testing.T) {
	ctx := testCtx(t)
	direct := newClient(t)
	name := limitName(t, "refund-keyed")
	if _, err := direct.Put(ctx, name, sluice.Definition{Kind: sluice.FixedWindow, Rate: 10, Period: 3_600_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Limit(ctx, name, sluice.Decision{Key: "k", Count: sluice.Count(8)}); err != nil {
		t.Fatal(err)
	}
	value := func() float64 {
		t.Helper()
		v, err := direct.Value(ctx, name, "k")
		if err != nil {
			t.Fatal(err)
		}
		return v.Value
	}
	front, addr := newLosingFront(t)
	c := sluice.New(addr, secretKey, sluice.WithRetries(2), sluice.WithBackoff(time.Millisecond, 4*time.Millisecond))

	front.loseNext()
	if _, err := c.Refund(ctx, name, sluice.Refund{Key: "k", Count: 1}); err == nil || front.seen.Load() != 1 {
		t.Fatalf("a refund without a key whose answer was lost: %v after %d requests, want an error after 1 (never retried)", err, front.seen.Load())
	}
	if got := value(); got != 3 {
		t.Fatalf("after the lost refund of 1: %v left, want 3 (it was made)", got)
	}

	front.loseNext()
	keyed := sluice.WithIdempotencyKey(ctx, name+"-r1")
	r, err := c.Refund(keyed, name, sluice.Refund{Key: "k", Count: 2})
	if err != nil || front.seen.Load() != 2 || !r.Replayed || r.Refunded != 2 || r.Remaining != 5 {
		t.Fatalf("a keyed refund whose answer was lost: %+v, %v after %d requests; want the first answer replayed (2 back, 5 left) after 2", r, err, front.seen.Load())
	}
	if got := value(); got != 5 {
		t.Fatalf("after the keyed refund of 2 and its retry: %v left, want 5 (given back once)", got)
	}
}
