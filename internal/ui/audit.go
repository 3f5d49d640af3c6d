package ui

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/tenants"
)

// auditVM is an audit log (a tenant's, or the server's), newest first.
type auditVM struct {
	Layout  layoutVM
	Heading string
	Rows    []auditRow
}

type auditRow struct {
	When, Actor, Action, Target, Detail string
}

// auditShown is how many entries the page lists.
const auditShown = 200

// auditPage is a tenant's audit log.
func (u *UI) auditPage(c *gin.Context) {
	t := tenantOf(c)
	u.renderAudit(c, "Audit log · "+t.Name, "audit", "Audit log", func() ([]tenants.AuditEntry, error) {
		return u.tenants.AuditLog(c.Request.Context(), t.ID, auditShown)
	})
}

// serverAuditPage is the server-wide audit log, for operators: their logins, failed logins
// and lockouts with the client address, and other events that belong to no tenant.
func (u *UI) serverAuditPage(c *gin.Context) {
	u.renderAudit(c, "Security log", "server-audit", "Security log", func() ([]tenants.AuditEntry, error) {
		return u.tenants.ServerAuditLog(c.Request.Context(), auditShown)
	})
}

func (u *UI) renderAudit(c *gin.Context, title, nav, heading string, load func() ([]tenants.AuditEntry, error)) {
	l, err := u.layout(c, title, nav)
	if err != nil {
		u.internalError(c, err)
		return
	}
	entries, err := load()
	if err != nil {
		u.internalError(c, err)
		return
	}
	vm := auditVM{Layout: l, Heading: heading}
	for _, e := range entries {
		vm.Rows = append(vm.Rows, auditRow{When: fmtTime(e.CreatedAt), Actor: e.Actor, Action: e.Action, Target: e.Target, Detail: e.Detail})
	}
	u.render(c, http.StatusOK, auditPage(vm))
}
