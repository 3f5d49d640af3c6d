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
	ID        int64
	Name      string
	Created   string
	URL       string
	Suspended string // when, or "" for an active tenant
	Deleting  bool   // its deletion began (and was perhaps cut short)
	ManageURL string
}

// tenantVM is the operator's page of one tenant: rename, suspend or resume.
type tenantVM struct {
	Layout    layoutVM
	ID        int64
	Name      string
	Suspended string
	// Deleting: the tenant's deletion began and was cut short (or still runs): nothing can be
	// changed in it, so the page offers only to delete it again, which finishes it.
	Deleting  bool
	RenameURL string
	StateURL  string
	NewName   string
	NameErr   string
	StateErr  string
	// The tenant's plan and its form (plans.go); PlanValues and PlanErrors keep what was typed.
	Plan       planVM
	PlanValues map[string]string
	PlanErrors map[string]string
	DeleteURL  string
	DeleteErr  string
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
		vm.Rows = append(vm.Rows, tenantRow{ID: t.ID, Name: t.Name, Created: fmtTime(t.CreatedAt), URL: tenantPath(t.ID, "/limits"),
			Suspended: fmtTimePtr(t.SuspendedAt, ""), Deleting: t.Deleting, ManageURL: "/tenants/" + strconv.FormatInt(t.ID, 10) + "/manage"})
	}
	u.render(c, status, tenantsPage(vm))
}

func (u *UI) createTenant(c *gin.Context) {
	name := c.PostForm("name")
	t, err := u.tenants.CreateTenantBy(c.Request.Context(), name, actor(c)) // audited in its log and the security log
	switch {
	case errors.Is(err, tenants.ErrInvalid):
		u.renderTenants(c, http.StatusUnprocessableEntity, name, "Names are 1 to 128 letters, digits and _ . : -")
		return
	case errors.Is(err, tenants.ErrConflict):
		u.renderTenants(c, http.StatusUnprocessableEntity, name, "A tenant with this name exists (names are compared ignoring case).")
		return
	case err != nil:
		u.internalError(c, err)
		return
	}
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

// manageTenantOf reads the {tid} tenant of an operator's management route (404 when missing).
func (u *UI) manageTenantOf(c *gin.Context) (tenants.Tenant, bool) {
	id, err := strconv.ParseInt(c.Param("tid"), 10, 64)
	if err != nil || id <= 0 {
		u.NotFound(c)
		return tenants.Tenant{}, false
	}
	t, err := u.tenants.Tenant(c.Request.Context(), id)
	if err != nil {
		u.fail(c, err)
		return tenants.Tenant{}, false
	}
	return t, true
}

func (u *UI) renderManageTenant(c *gin.Context, status int, t tenants.Tenant, vm tenantVM) {
	l, err := u.layout(c, "Manage "+t.Name, "tenants")
	if err != nil {
		u.internalError(c, err)
		return
	}
	base := "/tenants/" + strconv.FormatInt(t.ID, 10) + "/manage"
	vm.Layout, vm.ID, vm.Name, vm.Suspended, vm.Deleting = l, t.ID, t.Name, fmtTimePtr(t.SuspendedAt, ""), t.Deleting
	vm.RenameURL, vm.StateURL, vm.DeleteURL = base+"/rename", base+"/state", base+"/delete"
	if vm.NewName == "" && vm.NameErr == "" {
		vm.NewName = t.Name
	}
	plan, err := u.planView(c.Request.Context(), t.ID)
	if err != nil {
		u.internalError(c, err)
		return
	}
	plan.FormURL, plan.Errors = base+"/plan", vm.PlanErrors
	if vm.PlanValues != nil {
		plan.Values = vm.PlanValues
	}
	vm.Plan = plan
	u.render(c, status, manageTenantPage(vm))
}

func (u *UI) manageTenant(c *gin.Context) {
	if t, ok := u.manageTenantOf(c); ok {
		u.renderManageTenant(c, http.StatusOK, t, tenantVM{})
	}
}

func (u *UI) renameTenant(c *gin.Context) {
	t, ok := u.manageTenantOf(c)
	if !ok {
		return
	}
	name := c.PostForm("name")
	err := u.tenants.RenameTenant(c.Request.Context(), t.ID, name, actor(c))
	switch {
	case errors.Is(err, tenants.ErrInvalid):
		u.renderManageTenant(c, http.StatusUnprocessableEntity, t, tenantVM{NewName: name, NameErr: "Names are 1 to 128 letters, digits and _ . : -"})
		return
	case errors.Is(err, tenants.ErrConflict):
		u.renderManageTenant(c, http.StatusUnprocessableEntity, t, tenantVM{NewName: name, NameErr: "A tenant with this name exists (names are compared ignoring case)."})
		return
	case err != nil:
		u.fail(c, err)
		return
	}
	redirect(c, "/tenants/"+strconv.FormatInt(t.ID, 10)+"/manage?msg=tenant-renamed")
}

// setTenantState suspends or resumes a tenant; the form must carry the tenant's name typed out
// (confirm), since a suspension stops every API key of the tenant at once.
func (u *UI) setTenantState(c *gin.Context) {
	t, ok := u.manageTenantOf(c)
	if !ok {
		return
	}
	suspend := c.PostForm("suspend") == "true"
	if suspend && c.PostForm("confirm") != t.Name {
		u.renderManageTenant(c, http.StatusUnprocessableEntity, t, tenantVM{StateErr: "Type the tenant's name to confirm the suspension."})
		return
	}
	if err := u.tenants.SetSuspended(c.Request.Context(), t.ID, suspend, actor(c)); err != nil {
		u.fail(c, err)
		return
	}
	msg := "tenant-resumed"
	if suspend {
		msg = "tenant-suspended"
	}
	redirect(c, "/tenants/"+strconv.FormatInt(t.ID, 10)+"/manage?msg="+msg)
}

// deleteTenant deletes a tenant and every row it owns (tenants.Service.DeleteTenant: its keys
// suspended first, then its rows in batches); the form must carry the tenant's name typed out.
// An unknown tenant is the not-found page.
func (u *UI) deleteTenant(c *gin.Context) {
	t, ok := u.manageTenantOf(c)
	if !ok {
		return
	}
	if c.PostForm("confirm") != t.Name {
		u.renderManageTenant(c, http.StatusUnprocessableEntity, t, tenantVM{DeleteErr: "Type the tenant's name to confirm the deletion."})
		return
	}
	// ErrNotFound now, after the tenant was read above, is another deletion of it that finished
	// first (two operators, or "delete again" while one ran): the tenant is gone, as asked.
	if err := u.tenants.DeleteTenant(c.Request.Context(), t.ID, actor(c)); err != nil && !errors.Is(err, tenants.ErrNotFound) {
		u.fail(c, err)
		return
	}
	redirect(c, "/tenants?msg=tenant-deleted")
}
