package ui

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/tenants"
)

// tenantsVM is the operator's tenant list with the create form.
type tenantsVM struct {
	Layout  layoutVM
	Rows    []tenantRow
	Name    string
	NameErr string
}

type tenantRow struct {
	ID      int64
	Name    string
	Created string
	URL     string
}

func (u *UI) tenantsPage(c *gin.Context) { u.renderTenants(c, http.StatusOK, "", "") }

func (u *UI) renderTenants(c *gin.Context, status int, name, nameErr string) {
	l, err := u.layout(c, "Tenants", "tenants")
	if err != nil {
		u.internalError(c, err)
		return
	}
	ts, err := u.tenants.ListTenants(c.Request.Context())
	if err != nil {
		u.internalError(c, err)
		return
	}
	vm := tenantsVM{Layout: l, Name: name, NameErr: nameErr}
	for _, t := range ts {
		vm.Rows = append(vm.Rows, tenantRow{ID: t.ID, Name: t.Name, Created: fmtTime(t.CreatedAt), URL: tenantPath(t.ID, "/limits")})
	}
	u.render(c, status, tenantsPage(vm))
}

func (u *UI) createTenant(c *gin.Context) {
	name := c.PostForm("name")
	t, err := u.tenants.CreateTenant(c.Request.Context(), name)
	switch {
	case errors.Is(err, tenants.ErrInvalid):
		u.renderTenants(c, http.StatusUnprocessableEntity, name, "Names are 1 to 128 letters, digits and _ . : -")
		return
	case errors.Is(err, tenants.ErrConflict):
		u.renderTenants(c, http.StatusUnprocessableEntity, name, "A tenant with this name exists.")
		return
	case err != nil:
		u.internalError(c, err)
		return
	}
	_ = u.tenants.Audit(c.Request.Context(), &t.ID, actor(c), "tenant.create", t.Name, "")
	redirect(c, tenantPath(t.ID, "/limits?msg=tenant-created"))
}

// switchTenant is the target of the operator's tenant switcher, a GET form that works without JS.
func (u *UI) switchTenant(c *gin.Context) {
	id, err := strconv.ParseInt(c.Query("tenant"), 10, 64)
	if err != nil || id <= 0 {
		redirect(c, "/tenants")
		return
	}
	redirect(c, tenantPath(id, "/limits"))
}

func (u *UI) tenantHome(c *gin.Context) { redirect(c, tenantPath(tenantOf(c).ID, "/limits")) }
