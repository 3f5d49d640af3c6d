package ui

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/tenants"
)

// auditVM is an audit log (a tenant's, or the server's), newest first, narrowed by its filter
// form and paged by "Older entries".
type auditVM struct {
	Layout  layoutVM
	Heading string
	Rows    []auditRow
	// The filter, as typed (a GET form), its problems, and the link to the next page.
	Actor, Action, From, To string
	FromErr, ToErr          string
	OlderURL                string
	Filtered                bool
}

type auditRow struct {
	When, Actor, Action, Target, Detail string
}

// auditShown is how many entries a page lists.
const auditShown = 100

// auditPage is a tenant's audit log.
func (u *UI) auditPage(c *gin.Context) {
	t := tenantOf(c)
	u.renderAudit(c, "Audit log · "+t.Name, "audit", "Audit log", &t.ID)
}

// serverAuditPage is the server-wide audit log, for operators: their logins, failed logins
// and lockouts with the client address, and other events that belong to no tenant.
func (u *UI) serverAuditPage(c *gin.Context) {
	u.renderAudit(c, "Security log", "server-audit", "Security log", nil)
}

// auditDate reads a yyyy-mm-dd filter date (UTC midnight); "" is no bound.
func auditDate(v string) (time.Time, string) {
	if v == "" {
		return time.Time{}, ""
	}
	d, err := time.Parse(time.DateOnly, v)
	if err != nil {
		return time.Time{}, "Dates are written 2026-11-25."
	}
	return d, ""
}

func (u *UI) renderAudit(c *gin.Context, title, nav, heading string, tenantID *int64) {
	l, err := u.layout(c, title, nav)
	if err != nil {
		u.internalError(c, err)
		return
	}
	vm := auditVM{Layout: l, Heading: heading, Actor: c.Query("actor"), Action: c.Query("action"), From: c.Query("from"), To: c.Query("to")}
	vm.Filtered = vm.Actor != "" || vm.Action != "" || vm.From != "" || vm.To != ""
	q := tenants.AuditQuery{Actor: vm.Actor, Action: vm.Action, Limit: auditShown}
	q.Since, vm.FromErr = auditDate(vm.From)
	var until time.Time
	until, vm.ToErr = auditDate(vm.To)
	// "to" is inclusive: up to the end of that day. The end of the year 9999 is no bound: it
	// is the year 10000, which SQLite's stored times compare as text before every other year.
	if end := until.AddDate(0, 0, 1); !until.IsZero() && end.Year() <= 9999 {
		q.Until = end
	}
	if b, err := strconv.ParseInt(c.Query("before"), 10, 64); err == nil && b > 0 {
		q.Before = b
	}
	if vm.FromErr != "" || vm.ToErr != "" {
		u.render(c, http.StatusUnprocessableEntity, auditPage(vm))
		return
	}
	entries, next, err := u.tenants.AuditPage(c.Request.Context(), tenantID, q)
	if err != nil {
		u.internalError(c, err)
		return
	}
	for _, e := range entries {
		vm.Rows = append(vm.Rows, auditRow{When: fmtTime(e.CreatedAt), Actor: e.Actor, Action: e.Action, Target: e.Target, Detail: e.Detail})
	}
	if next > 0 {
		v := url.Values{}
		for k, val := range map[string]string{"actor": vm.Actor, "action": vm.Action, "from": vm.From, "to": vm.To} {
			if val != "" {
				v.Set(k, val)
			}
		}
		v.Set("before", strconv.FormatInt(next, 10))
		vm.OlderURL = c.Request.URL.Path + "?" + v.Encode()
	}
	u.render(c, http.StatusOK, auditPage(vm))
}
