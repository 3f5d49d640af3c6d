package ui

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// auditVM is a tenant's audit log, newest first.
type auditVM struct {
	Layout layoutVM
	Rows   []auditRow
}

type auditRow struct {
	When, Actor, Action, Target, Detail string
}

// auditShown is how many entries the page lists.
const auditShown = 200

func (u *UI) auditPage(c *gin.Context) {
	t := tenantOf(c)
	l, err := u.layout(c, "Audit log · "+t.Name, "audit")
	if err != nil {
		u.internalError(c, err)
		return
	}
	entries, err := u.tenants.AuditLog(c.Request.Context(), t.ID, auditShown)
	if err != nil {
		u.internalError(c, err)
		return
	}
	vm := auditVM{Layout: l}
	for _, e := range entries {
		vm.Rows = append(vm.Rows, auditRow{When: fmtTime(e.CreatedAt), Actor: e.Actor, Action: e.Action, Target: e.Target, Detail: e.Detail})
	}
	u.render(c, http.StatusOK, auditPage(vm))
}
