package sluice

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The events a webhook endpoint may subscribe to.
const (
	EventKeyCreated        = "key.created"
	EventKeyRevoked        = "key.revoked"
	EventDefinitionChanged = "definition.changed"
	// EventTenantQuotaNear: the tenant's limits, API keys or overrides reached 80 % of its plan.
	EventTenantQuotaNear = "tenant.quota_near"
	// EventLimitRefusals: one limit refused at least the endpoint's RefusalThreshold decisions
	// within a minute (UTC); at most once per limit and minute.
	EventLimitRefusals = "limit.refusals"
	// EventKeyNearLimit: a decision left a key below 20 % of its limit's maximum; at most once per
	// limit, key and hour.
	EventKeyNearLimit = "key.near_limit"
)

// Webhook is one of the tenant's webhook endpoints.
type Webhook struct {
	ID        int64     `json:"id"`
	URL       string    `json:"url"`
	Events    []string  `json:"events"`
	Enabled   bool      `json:"enabled"`
	CreatedAt time.Time `json:"createdAt"`
	// RefusalThreshold is how many refusals of one limit within a minute fire EventLimitRefusals.
	RefusalThreshold int `json:"refusalThreshold"`
}

// WebhookDelivery is one delivery of an endpoint's log.
type WebhookDelivery struct {
	ID            string     `json:"id"` // the webhook-id header, the same on every retry
	Event         string     `json:"event"`
	Payload       string     `json:"payload"`
	CreatedAt     time.Time  `json:"createdAt"`
	Attempts      int        `json:"attempts"`
	NextAttemptAt *time.Time `json:"nextAttemptAt"`
	DeliveredAt   *time.Time `json:"deliveredAt"`
	GivenUpAt     *time.Time `json:"givenUpAt"`
	LastStatus    *int       `json:"lastStatus"`
	LastError     string     `json:"lastError"`
}

// WebhookOption sets a member of an endpoint CreateWebhook adds.
type WebhookOption func(body map[string]any)

// WithRefusalThreshold sets the endpoint's RefusalThreshold (1 to 1,000,000,000; Sluice's default
// is 100).
func WithRefusalThreshold(n int) WebhookOption {
	return func(body map[string]any) { body["refusalThreshold"] = n }
}

// CreateWebhook adds an endpoint that receives events (EventKeyCreated, …) and returns it with
// its signing secret ("whsec_…"), which Sluice shows this once. It is not retried.
func (c *Client) CreateWebhook(ctx context.Context, endpoint string, events []string, opts ...WebhookOption) (Webhook, string, error) {
	var out struct {
		Webhook
		Secret string `json:"secret"`
	}
	body := map[string]any{"url": endpoint, "events": events}
	for _, o := range opts {
		o(body)
	}
	_, err := c.do(ctx, http.MethodPost, "/v1/webhooks", nil, body, consuming, &out)
	return out.Webhook, out.Secret, err
}

// Webhooks lists the tenant's endpoints, oldest first.
func (c *Client) Webhooks(ctx context.Context) ([]Webhook, error) {
	var out struct {
		Webhooks []Webhook `json:"webhooks"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/webhooks", nil, nil, idempotent, &out)
	return out.Webhooks, err
}

// DeleteWebhook removes an endpoint and its delivery log.
func (c *Client) DeleteWebhook(ctx context.Context, id int64) error {
	_, err := c.do(ctx, http.MethodDelete, webhookPath(id, ""), nil, nil, idempotent, nil)
	return err
}

// SendTestWebhook queues a webhook.test event to one endpoint. It is not retried. The server
// takes at most 10 test events and resends a minute per endpoint (a 429 error with its
// RetryAfter beyond that) and none while the endpoint has 1,000 deliveries waiting (409).
func (c *Client) SendTestWebhook(ctx context.Context, id int64) error {
	_, err := c.do(ctx, http.MethodPost, webhookPath(id, "/test"), nil, nil, consuming, nil)
	return err
}

// WebhookDeliveries lists an endpoint's most recent deliveries (limit 1–500; 0 means 50),
// newest first.
func (c *Client) WebhookDeliveries(ctx context.Context, id int64, limit int) ([]WebhookDelivery, error) {
	var q url.Values
	if limit != 0 {
		q = url.Values{"limit": {strconv.Itoa(limit)}}
	}
	var out struct {
		Deliveries []WebhookDelivery `json:"deliveries"`
	}
	_, err := c.do(ctx, http.MethodGet, webhookPath(id, "/deliveries"), q, nil, idempotent, &out)
	return out.Deliveries, err
}

// ResendWebhookDelivery makes a delivery due again (same webhook-id). It is not retried, and is
// bounded as SendTestWebhook is.
func (c *Client) ResendWebhookDelivery(ctx context.Context, id int64, deliveryID string) error {
	_, err := c.do(ctx, http.MethodPost, webhookPath(id, "/deliveries/"+url.PathEscape(deliveryID)+"/resend"), nil, nil, consuming, nil)
	return err
}

func webhookPath(id int64, rest string) string {
	return "/v1/webhooks/" + strconv.FormatInt(id, 10) + rest
}

// ErrWebhookSignature means a webhook request does not carry a valid signature of its body by
// the endpoint's secret, or its timestamp is outside the tolerance.
var ErrWebhookSignature = errors.New("sluice: webhook signature does not verify")

// VerifyWebhook checks a delivery Sluice sent to a receiver, by the Standard Webhooks convention:
// the webhook-signature header holds "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." +
// body)), key being the bytes of the secret after "whsec_", and the webhook-timestamp (Unix
// seconds) must be within tolerance of now (0 means 5 minutes), which stops replays of old
// deliveries. Deduplicate on the webhook-id header: a delivery may arrive more than once.
func VerifyWebhook(secret string, header http.Header, body []byte, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = 5 * time.Minute
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return errors.New("sluice: a webhook secret is whsec_ followed by base64")
	}
	id, ts := header.Get("webhook-id"), header.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if id == "" || err != nil {
		return ErrWebhookSignature
	}
	if d := time.Since(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrWebhookSignature
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(header.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return ErrWebhookSignature
}
