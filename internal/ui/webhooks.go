package ui

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/webhooks"
)

// webhooksVM is the webhooks page: the tenant's endpoints and the form that adds one. NewSecret
// is set only in the answer to that form: the signing secret is shown that once.
type webhooksVM struct {
	Layout    layoutVM
	CreateURL string
	Rows      []webhookRow
	Events    []eventChoice
	URL       string
	URLErr    string
	EventsErr string
	FormErr   string
	NewSecret string
	NewURL    string
	newID     string // the endpoint NewSecret signs for (its URL is NewURL)
	// Threshold is the typed refusals per minute for limit.refusals ("" for the default).
	Threshold    string
	ThresholdErr string
}

type eventChoice struct {
	Name    string
	Checked bool
}

type webhookRow struct {
	URL, Events, Created, LogURL, DeleteURL string
}

// webhookLogVM is one endpoint's page: its delivery log with resend buttons, and a test button.
type webhookLogVM struct {
	Layout  layoutVM
	URL     string
	Events  string
	TestURL string
	BackURL string
	Rows    []deliveryRow
}

type deliveryRow struct {
	ID, Event, Created, State, LastStatus, LastError, ResendURL string
	Attempts                                                    int
}

func webhookPath(tid, id int64, rest string) string {
	return tenantPath(tid, "/webhooks/"+strconv.FormatInt(id, 10)+rest)
}

func (u *UI) renderWebhooks(c *gin.Context, status int, vm webhooksVM, chosen []string) {
	t := tenantOf(c)
	l, err := u.layout(c, "Webhooks · "+t.Name, "webhooks")
	if err != nil {
		u.internalError(c, err)
		return
	}
	eps, err := u.webhooks.Endpoints(c.Request.Context(), t.ID)
	if err != nil {
		u.internalError(c, err)
		return
	}
	vm.Layout = l
	if !l.ReadOnly {
		vm.CreateURL = tenantPath(t.ID, "/webhooks")
	}
	for _, e := range eps {
		if vm.newID == strconv.FormatInt(e.ID, 10) {
			vm.NewURL = e.URL
		}
		evs := strings.Join(e.Events, ", ")
		if slices.Contains(e.Events, webhooks.EventLimitRefusals) {
			evs += fmt.Sprintf(" (limit.refusals at %d a minute)", e.RefusalThreshold)
		}
		row := webhookRow{URL: e.URL, Events: evs, Created: fmtTime(e.CreatedAt), LogURL: webhookPath(t.ID, e.ID, "")}
		if !l.ReadOnly {
			row.DeleteURL = webhookPath(t.ID, e.ID, "/delete")
		}
		vm.Rows = append(vm.Rows, row)
	}
	for _, ev := range webhooks.Events {
		vm.Events = append(vm.Events, eventChoice{Name: ev, Checked: slices.Contains(chosen, ev)})
	}
	u.render(c, status, webhooksPage(vm))
}

// webhooksPage lists the endpoints; right after the create form it shows the new endpoint's
// signing secret, once (handed over by createWebhook through a one-time cookie, as a new API
// key's: onetime.go).
func (u *UI) webhooksPage(c *gin.Context) {
	vm := webhooksVM{}
	if id := c.Query("created"); id != "" {
		if secret, ok := u.takeOneTime(c, tenantPath(tenantOf(c).ID, "/webhooks"), "webhook:"+id); ok {
			vm.NewSecret, vm.newID = secret, id
		}
	}
	u.renderWebhooks(c, http.StatusOK, vm, webhooks.Events)
}

func (u *UI) createWebhook(c *gin.Context) {
	t := tenantOf(c)
	rawURL, events, rawThreshold := c.PostForm("url"), c.PostFormArray("events"), strings.TrimSpace(c.PostForm("refusalThreshold"))
	var threshold []int64
	var err error
	if rawThreshold != "" {
		n, ok := parseWhole(rawThreshold)
		if !ok {
			n = 0 // CreateEndpoint refuses it with the field's message
		}
		threshold = append(threshold, n)
	}
	ep, secret, err := u.webhooks.CreateEndpoint(c.Request.Context(), t.ID, rawURL, events, threshold...)
	if err != nil {
		e := apperr.From(err)
		vm := webhooksVM{URL: rawURL, Threshold: rawThreshold}
		switch {
		case e.Field == "url":
			vm.URLErr = e.Sentence()
		case e.Field == "events":
			vm.EventsErr = e.Sentence()
		case e.Field == "refusalThreshold":
			vm.ThresholdErr = e.Sentence()
		case e.Status() < 500:
			vm.FormErr = e.Sentence()
		default:
			u.internalError(c, err)
			return
		}
		u.renderWebhooks(c, http.StatusUnprocessableEntity, vm, events)
		return
	}
	u.auditRequest(c, &t.ID, actor(c), "webhook.create", strconv.FormatInt(ep.ID, 10), ep.URL)
	// POST-redirect-GET: reloading the page that shows the secret must not create another endpoint.
	id := strconv.FormatInt(ep.ID, 10)
	page := tenantPath(t.ID, "/webhooks")
	u.putOneTime(c, page, "webhook:"+id, secret)
	redirect(c, page+"?created="+id)
}

// endpointOf finds the {id} endpoint of the tenant; ok false when it has answered 404.
func (u *UI) endpointOf(c *gin.Context) (webhooks.Endpoint, bool) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil {
		u.NotFound(c)
		return webhooks.Endpoint{}, false
	}
	ep, err := u.webhooks.Endpoint(c.Request.Context(), tenantOf(c).ID, id)
	if err != nil {
		u.fail(c, err) // the not-found page for another tenant's endpoint, or none
		return webhooks.Endpoint{}, false
	}
	return ep, true
}

func (u *UI) webhookLog(c *gin.Context) {
	t := tenantOf(c)
	ep, ok := u.endpointOf(c)
	if !ok {
		return
	}
	l, err := u.layout(c, "Webhook deliveries · "+t.Name, "webhooks")
	if err != nil {
		u.internalError(c, err)
		return
	}
	ds, err := u.webhooks.Deliveries(c.Request.Context(), t.ID, ep.ID, 100)
	if err != nil {
		u.internalError(c, err)
		return
	}
	vm := webhookLogVM{Layout: l, URL: ep.URL, Events: strings.Join(ep.Events, ", "), BackURL: tenantPath(t.ID, "/webhooks")}
	if !l.ReadOnly {
		vm.TestURL = webhookPath(t.ID, ep.ID, "/test")
	}
	for _, d := range ds {
		r := deliveryRow{ID: d.ID, Event: d.Event, Created: fmtTime(d.CreatedAt), Attempts: d.Attempts, LastError: d.LastError}
		if !l.ReadOnly {
			r.ResendURL = webhookPath(t.ID, ep.ID, "/deliveries/"+d.ID+"/resend")
		}
		switch {
		case d.DeliveredAt != nil:
			r.State = "delivered " + fmtTime(*d.DeliveredAt)
		case d.GivenUpAt != nil:
			r.State = "given up " + fmtTime(*d.GivenUpAt)
		case d.NextAttempt != nil:
			r.State = "next attempt " + fmtTime(*d.NextAttempt)
		}
		if d.LastStatus != nil {
			r.LastStatus = strconv.Itoa(*d.LastStatus)
		}
		vm.Rows = append(vm.Rows, r)
	}
	u.render(c, http.StatusOK, webhookLogPage(vm))
}

// manualSending spends one of the endpoint's manual sendings (a test event, a resend:
// webhooks.SpendManual); when none is left it answers with the error page (429, with
// Retry-After) and returns the error.
func (u *UI) manualSending(c *gin.Context, endpointID int64) error {
	err := webhooks.SpendManual(c.Request.Context(), u.engine, endpointID)
	if err != nil {
		u.fail(c, err)
	}
	return err
}

func (u *UI) testWebhook(c *gin.Context) {
	t := tenantOf(c)
	ep, ok := u.endpointOf(c)
	if !ok {
		return
	}
	if err := u.manualSending(c, ep.ID); err != nil {
		return
	}
	if err := u.webhooks.SendTest(c.Request.Context(), t.ID, ep.ID); err != nil {
		u.fail(c, err)
		return
	}
	u.auditRequest(c, &t.ID, actor(c), "webhook.test", strconv.FormatInt(ep.ID, 10), ep.URL)
	redirect(c, webhookPath(t.ID, ep.ID, "?msg=webhook-test"))
}

func (u *UI) resendWebhook(c *gin.Context) {
	t := tenantOf(c)
	ep, ok := u.endpointOf(c)
	if !ok {
		return
	}
	if err := u.manualSending(c, ep.ID); err != nil {
		return
	}
	if err := u.webhooks.Resend(c.Request.Context(), t.ID, ep.ID, c.Param("did")); err != nil {
		u.fail(c, err)
		return
	}
	u.auditRequest(c, &t.ID, actor(c), "webhook.resend", c.Param("did"), ep.URL)
	redirect(c, webhookPath(t.ID, ep.ID, "?msg=webhook-resent"))
}

// deleteWebhook removes an endpoint; the form must carry the confirmation box.
func (u *UI) deleteWebhook(c *gin.Context) {
	t := tenantOf(c)
	ep, ok := u.endpointOf(c)
	if !ok {
		return
	}
	if c.PostForm("confirm") != "yes" {
		u.renderWebhooks(c, http.StatusUnprocessableEntity, webhooksVM{FormErr: "Tick the box beside Delete to confirm."}, webhooks.Events)
		return
	}
	if err := u.webhooks.DeleteEndpoint(c.Request.Context(), t.ID, ep.ID); err != nil {
		u.fail(c, err)
		return
	}
	u.auditRequest(c, &t.ID, actor(c), "webhook.delete", strconv.FormatInt(ep.ID, 10), ep.URL)
	redirect(c, tenantPath(t.ID, "/webhooks?msg=webhook-deleted"))
}
