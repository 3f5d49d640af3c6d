package ui

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/mail"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// usersVM is the operators' page of every user.
type usersVM struct {
	Layout  layoutVM
	Users   []memberRow
	Invites []inviteRow
	Tenants []tenantRef
	SelfID  int64
	// the invite form, kept with its errors
	Email, Role, Tenant        string
	EmailErr, RoleErr, FormErr string
	NewLink, NewLinkFor        string
	NewLinkKind                string // "invite" or "reset"
	NewLinkMail                string // what became of its email: mailOff, mailSent or mailFailed and why
}

func (u *UI) renderUsers(c *gin.Context, status int, vm usersVM) {
	l, err := u.layout(c, "Users", "users")
	if err != nil {
		u.internalError(c, err)
		return
	}
	ctx := c.Request.Context()
	users, err := u.tenants.ListUsers(ctx, nil)
	if err != nil {
		u.internalError(c, err)
		return
	}
	invites, err := u.tenants.ListInvites(ctx, nil)
	if err != nil {
		u.internalError(c, err)
		return
	}
	names := map[int64]string{}
	for _, t := range l.Tenants {
		names[t.ID] = t.Name
	}
	vm.Layout, vm.Tenants, vm.SelfID = l, l.Tenants, principalOf(c).user.ID
	for _, m := range users {
		base := "/users/" + strconv.FormatInt(m.ID, 10)
		r := memberRow{ID: m.ID, Email: m.Email, Role: string(m.Role), Created: fmtTime(m.CreatedAt), Disabled: fmtTimePtr(m.DisabledAt, ""),
			Self: m.ID == vm.SelfID, RoleURL: base + "/role", RemoveURL: base + "/remove", DisableURL: base + "/disable", ResetURL: base + "/reset-link"}
		if m.TenantID != nil {
			r.TenantID, r.Tenant = *m.TenantID, names[*m.TenantID]
		}
		vm.Users = append(vm.Users, r)
	}
	for _, in := range invites {
		vm.Invites = append(vm.Invites, inviteRow{Email: in.Email, Role: string(in.Role), Expires: fmtTime(in.ExpiresAt),
			Expired: !u.now().Before(in.ExpiresAt), RevokeURL: "/users/invites/" + strconv.FormatInt(in.ID, 10) + "/revoke"})
	}
	if vm.Role == "" {
		vm.Role = string(tenants.RoleOperator)
	}
	u.render(c, status, usersPage(vm))
}

// usersPage lists every user and the operator invites; after an invite or a reset link it shows
// the link once.
func (u *UI) usersPage(c *gin.Context) {
	vm := usersVM{}
	for _, kind := range []string{"invite", "reset"} {
		if id := c.Query(kind); id != "" {
			if link, ok := u.takeOneTime(c, "/users", kind+":"+id); ok {
				vm.NewLinkFor, vm.NewLink, vm.NewLinkMail = readOneTimeLink(link)
				vm.NewLinkKind = kind
			}
		}
	}
	u.renderUsers(c, http.StatusOK, vm)
}

// tenantChoice reads the role form's tenant: nil for an operator, else the chosen tenant (0 when
// none or malformed, which the service refuses as not found).
func tenantChoice(c *gin.Context, role tenants.Role) *int64 {
	if role == tenants.RoleOperator {
		return nil
	}
	id, _ := strconv.ParseInt(c.PostForm("tenant"), 10, 64)
	return &id
}

// inviteUser invites an operator, or a member of any tenant.
func (u *UI) inviteUser(c *gin.Context) {
	email, role := c.PostForm("email"), tenants.Role(c.PostForm("role"))
	tid := tenantChoice(c, role)
	vm := usersVM{Email: email, Role: string(role), Tenant: c.PostForm("tenant")}
	inv, token, err := u.tenants.CreateInvite(c.Request.Context(), tid, email, role, 0, actor(c))
	if err != nil {
		if !formError(err) && apperr.From(err).Status() != http.StatusNotFound {
			u.internalError(c, err)
			return
		}
		if apperr.From(err).Status() == http.StatusNotFound || (tid != nil && *tid <= 0) {
			vm.RoleErr = "Choose an existing tenant for an admin or a viewer."
		}
		f := apperr.Fields(err)
		vm.EmailErr = f["email"]
		if f["role"] != "" {
			vm.RoleErr = f["role"]
		}
		u.renderUsers(c, http.StatusUnprocessableEntity, vm)
		return
	}
	id := strconv.FormatInt(inv.ID, 10)
	link := u.inviteLink(token)
	mailed := u.emailLink(c, mail.LinkInvite, inv, "invite:"+id, link)
	u.putOneTime(c, "/users", "invite:"+id, oneTimeLink(inv.Email, link, mailed))
	redirect(c, "/users?invite="+id)
}

func (u *UI) setUserRole(c *gin.Context) {
	role := tenants.Role(c.PostForm("role"))
	tenant := tenantChoice(c, role)
	err := u.tenants.SetRole(c.Request.Context(), nil, memberID(c), role, tenant, actor(c))
	if err == nil && tenant != nil && memberID(c) == principalOf(c).user.ID {
		// An operator who made themself a tenant's member may no longer see the users page.
		redirect(c, tenantPath(*tenant, "/members?msg=role-changed"))
		return
	}
	u.userDone(c, err, "role-changed")
}

func (u *UI) removeUser(c *gin.Context) {
	if c.PostForm("confirm") != "yes" {
		u.userDone(c, u.confirmFirst(c, nil), "")
		return
	}
	u.userDone(c, u.tenants.RemoveUser(c.Request.Context(), nil, memberID(c), actor(c)), "member-removed")
}

func (u *UI) disableUser(c *gin.Context) {
	disable := c.PostForm("disable") == "true"
	err := u.tenants.SetDisabled(c.Request.Context(), nil, memberID(c), disable, actor(c))
	u.userDone(c, err, map[bool]string{true: "member-disabled", false: "member-enabled"}[disable])
}

func (u *UI) revokeOperatorInvite(c *gin.Context) {
	id, _ := strconv.ParseInt(c.Param("iid"), 10, 64)
	u.userDone(c, u.tenants.RevokeInvite(c.Request.Context(), nil, id, actor(c)), "invite-revoked")
}

// createResetLink makes a one-time password reset link for a user and shows it once.
func (u *UI) createResetLink(c *gin.Context) {
	id := memberID(c)
	link, token, err := u.tenants.NewResetLink(c.Request.Context(), id, 0, actor(c))
	if err != nil {
		u.fail(c, err)
		return
	}
	uid := strconv.FormatInt(id, 10)
	url := u.resetLink(token)
	mailed := u.emailLink(c, mail.LinkReset, link, userTargetOf(id), url)
	u.putOneTime(c, "/users", "reset:"+uid, oneTimeLink(link.Email, url, mailed))
	redirect(c, "/users?reset="+uid)
}

func (u *UI) userDone(c *gin.Context, err error, msg string) {
	switch {
	case err == nil:
		redirect(c, "/users?msg="+msg)
	case formError(err):
		u.renderUsers(c, http.StatusUnprocessableEntity, usersVM{FormErr: apperr.From(err).Sentence()})
	default:
		u.fail(c, err)
	}
}

// userTargetOf is a user as the audit log names it.
func userTargetOf(id int64) string { return "user:" + strconv.FormatInt(id, 10) }
