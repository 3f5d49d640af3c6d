package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/webhooks"
)

// WebhookEndpoint is an endpoint as the API shows it; Secret only in the answer that creates it.
type WebhookEndpoint struct {
	ID        int64     `json:"id"`
	URL       string    `json:"url"`
	Events    []string  `json:"events"`
	Enabled   bool      `json:"enabled"`
	CreatedAt time.Time `json:"createdAt"`
	// RefusalThreshold: limit.refusals fires when one limit refuses this many in a minute.
	RefusalThreshold int64  `json:"refusalThreshold"`
	Secret           string `json:"secret,omitempty"`
}

func endpointJSON(e webhooks.Endpoint) WebhookEndpoint {
	return WebhookEndpoint{ID: e.ID, URL: e.URL, Events: e.Events, Enabled: e.Enabled, CreatedAt: e.CreatedAt, RefusalThreshold: e.RefusalThreshold}
}

// WebhookDelivery is one delivery of the delivery log.
type WebhookDelivery struct {
	ID            string     `json:"id"`
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

// webhookID is the {id} path parameter; anything but a positive number written as the API
// writes it (digits, no sign, no leading zero: "+1" and "01" are not endpoint 1) names no
// endpoint.
func (s *Server) webhookID(c *gin.Context) (int64, bool) {
	text := c.Param("id")
	id, err := strconv.ParseInt(text, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != text {
		writeProblem(c, s.log, webhooks.ErrEndpointNotFound)
		return 0, false
	}
	return id, true
}

func (s *Server) createWebhook(c *gin.Context) {
	var body struct {
		URL              string   `json:"url"`
		Events           []string `json:"events"`
		RefusalThreshold *int64   `json:"refusalThreshold"`
	}
	if err := decodeJSON(c, &body); err != nil {
		writeProblem(c, s.log, err)
		return
	}
	var threshold []int64
	if body.RefusalThreshold != nil {
		threshold = append(threshold, *body.RefusalThreshold)
	}
	ep, secret, err := s.webhooks.CreateEndpoint(c.Request.Context(), tenantOf(c).TenantID, body.URL, body.Events, threshold...)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	s.recordAudit(c, "webhook.create", strconv.FormatInt(ep.ID, 10), ep.URL)
	out := endpointJSON(ep)
	out.Secret = secret
	c.Header("Cache-Control", "no-store") // the secret is shown once: no cache may keep it
	c.JSON(http.StatusCreated, out)
}

func (s *Server) listWebhooks(c *gin.Context) {
	eps, err := s.webhooks.Endpoints(c.Request.Context(), tenantOf(c).TenantID)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	out := make([]WebhookEndpoint, len(eps))
	for i, e := range eps {
		out[i] = endpointJSON(e)
	}
	c.JSON(http.StatusOK, gin.H{"webhooks": out})
}

func (s *Server) deleteWebhook(c *gin.Context) {
	id, ok := s.webhookID(c)
	if !ok {
		return
	}
	if err := s.webhooks.DeleteEndpoint(c.Request.Context(), tenantOf(c).TenantID, id); err != nil {
		writeProblem(c, s.log, err)
		return
	}
	s.recordAudit(c, "webhook.delete", strconv.FormatInt(id, 10), "")
	c.Status(http.StatusNoContent)
}

// manualSending spends one of the endpoint's manual sendings (a test event, a resend:
// webhooks.SpendManual) once the endpoint is known to be the tenant's; ok false when it has
// answered (404, or 429 with Retry-After).
func (s *Server) manualSending(c *gin.Context, id int64) bool {
	if _, err := s.webhooks.Endpoint(c.Request.Context(), tenantOf(c).TenantID, id); err != nil {
		writeProblem(c, s.log, err)
		return false
	}
	if err := webhooks.SpendManual(c.Request.Context(), s.engine, id); err != nil {
		writeProblem(c, s.log, err)
		return false
	}
	return true
}

func (s *Server) testWebhook(c *gin.Context) {
	id, ok := s.webhookID(c)
	if !ok || !s.manualSending(c, id) {
		return
	}
	if err := s.webhooks.SendTest(c.Request.Context(), tenantOf(c).TenantID, id); err != nil {
		writeProblem(c, s.log, err)
		return
	}
	// Audited as a resend is: both make Sluice call the endpoint's URL on request.
	s.recordAudit(c, "webhook.test", strconv.FormatInt(id, 10), "")
	c.Status(http.StatusAccepted)
}

func (s *Server) webhookDeliveries(c *gin.Context) {
	id, ok := s.webhookID(c)
	if !ok {
		return
	}
	limit, ok := s.pageSize(c, 50, 500)
	if !ok {
		return
	}
	tenantID := tenantOf(c).TenantID
	if _, err := s.webhooks.Endpoint(c.Request.Context(), tenantID, id); err != nil {
		writeProblem(c, s.log, err)
		return
	}
	ds, err := s.webhooks.Deliveries(c.Request.Context(), tenantID, id, limit)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	out := make([]WebhookDelivery, len(ds))
	for i, d := range ds {
		out[i] = WebhookDelivery{ID: d.ID, Event: d.Event, Payload: d.Payload, CreatedAt: d.CreatedAt, Attempts: d.Attempts,
			NextAttemptAt: d.NextAttempt, DeliveredAt: d.DeliveredAt, GivenUpAt: d.GivenUpAt, LastStatus: d.LastStatus, LastError: d.LastError}
	}
	c.JSON(http.StatusOK, gin.H{"deliveries": out})
}

func (s *Server) resendWebhookDelivery(c *gin.Context) {
	id, ok := s.webhookID(c)
	if !ok || !s.manualSending(c, id) {
		return
	}
	deliveryID := c.Param("deliveryId")
	if err := s.webhooks.Resend(c.Request.Context(), tenantOf(c).TenantID, id, deliveryID); err != nil {
		writeProblem(c, s.log, err)
		return
	}
	s.recordAudit(c, "webhook.resend", deliveryID, "")
	c.Status(http.StatusAccepted)
}
