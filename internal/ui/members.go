package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/mail"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// Members and roles: a tenant's members page (its admins invite, change roles, disable and
// remove; its viewers only read: requireTenant refuses their POSTs), the operator's page of
// every user (operator invites, any role, password reset links), one's own account (password),
// and the two public pages a one-time link opens (accept an invite, reset a password).

// membersVM is a tenant's members page.
type membersVM struct {
	Layout    layoutVM
	CanChange bool
	Members   []memberRow
	Invites   []inviteRow
	InviteURL string
	// the invite form, kept with its errors
	Email, Role       string
	EmailErr, RoleErr string
	FormErr           string
	Emails            bool // SMTP is set: invites are emailed
	// NewLink is a new invite's link, shown once (handed over by a one-time cookie); NewLinkMail
	// what became of its email (mailOff, mailSent or mailFailed and why).
	NewLink, NewLinkEmail, NewLinkMail string
}

type memberRow struct {
	ID                             int64
	Email, Role, Tenant, Created   string
	Disabled                       string // when, or ""
	Self                           bool
	RoleURL, RemoveURL, DisableURL string
	ResetURL                       string // operators' page only
	TenantID                       int64  // operators' page: the member's tenant (0: none)
}

type inviteRow struct {
	Email, Role, Tenant, Expires string
	Expired                      bool
	RevokeURL                    string
}

func (u *UI) inviteLink(token string) string {
	return u.baseURL.Scheme + "://" + u.baseURL.Host + "/invite?token=" + url.QueryEscape(token)
}

func (u *UI) resetLink(token string) string {
	return u.baseURL.Scheme + "://" + u.baseURL.Host + "/reset?token=" + url.QueryEscape(token)
}

func (u *UI) renderMembers(c *gin.Context, status int, vm membersVM) {
	t, p := tenantOf(c), principalOf(c)
	l, err := u.layout(c, "Members · "+t.Name, "members")
	if err != nil {
		u.internalError(c, err)
		return
	}
	ctx := c.Request.Context()
	users, err := u.tenants.ListUsers(ctx, &t.ID)
	if err != nil {
		u.internalError(c, err)
		return
	}
	invites, err := u.tenants.ListInvites(ctx, &t.ID)
	if err != nil {
		u.internalError(c, err)
		return
	}
	base := tenantPath(t.ID, "/members")
	// A suspended tenant's members change nothing (requireTenant); operators still do.
	vm.Layout, vm.CanChange, vm.InviteURL, vm.Emails = l, !l.ReadOnly, base+"/invite", u.mailer != nil
	for _, m := range users {
		id := strconv.FormatInt(m.ID, 10)
		vm.Members = append(vm.Members, memberRow{ID: m.ID, Email: m.Email, Role: string(m.Role), Created: fmtTime(m.CreatedAt),
			Disabled: fmtTimePtr(m.DisabledAt, ""), Self: m.ID == p.user.ID,
			RoleURL: base + "/" + id + "/role", RemoveURL: base + "/" + id + "/remove", DisableURL: base + "/" + id + "/disable"})
	}
	for _, in := range invites {
		vm.Invites = append(vm.Invites, inviteRow{Email: in.Email, Role: string(in.Role), Expires: fmtTime(in.ExpiresAt),
			Expired: !u.now().Before(in.ExpiresAt), RevokeURL: tenantPath(t.ID, "/invites/"+strconv.FormatInt(in.ID, 10)+"/revoke")})
	}
	if vm.Role == "" {
		vm.Role = string(tenants.RoleViewer)
	}
	u.render(c, status, membersPage(vm))
}

// membersPage lists members and pending invites; right after an invite it shows its link once.
func (u *UI) membersPage(c *gin.Context) {
	vm := membersVM{}
	if id := c.Query("invited"); id != "" {
		if link, ok := u.takeOneTime(c, tenantPath(tenantOf(c).ID, "/members"), "invite:"+id); ok {
			vm.NewLinkEmail, vm.NewLink, vm.NewLinkMail = readOneTimeLink(link)
		}
	}
	u.renderMembers(c, http.StatusOK, vm)
}

// maxInvitesPerDay bounds the invites a tenant's members make, each of which is emailed when
// SMTP is set: without it one tenant's admin could have the operator's mail server send any
// number of messages to any addresses. A token bucket per tenant (a burst of that many, then one
// every 24h/maxInvitesPerDay: up to twice that in the first day, that many a day after) in the
// system tenant's key space, as the login limits; every invite asked for counts, one then
// refused for its input too. Operators' invites do not count.
const maxInvitesPerDay = 50

var inviteCapacity = float64(maxInvitesPerDay)

// inviteLimitName is the engine's limit of a tenant's invites, keyed by the tenant's ID.
const inviteLimitName = "dashboard.invites"

// spendInvite takes one of tenant tenantID's invites. When none is left, it answers the members
// page with 429, Retry-After and why, and returns false.
func (u *UI) spendInvite(c *gin.Context, tenantID int64, vm membersVM) bool {
	if principalOf(c).user.IsOperator {
		return true
	}
	def := limiter.Definition{Kind: limiter.TokenBucket, Rate: maxInvitesPerDay, Period: (24 * time.Hour).Milliseconds(), Capacity: &inviteCapacity}
	d, err := u.engine.Limit(c.Request.Context(), systemTenant, limiter.Request{Name: inviteLimitName, Key: strconv.FormatInt(tenantID, 10), Count: 1, Config: &def})
	if err != nil {
		u.fail(c, err)
		return false
	}
	if d.OK {
		return true
	}
	wait := limiter.WaitSeconds(d.RetryAfter)
	c.Header("Retry-After", strconv.FormatInt(wait, 10))
	vm.FormErr = fmt.Sprintf("A tenant's members may invite %d people at once, then one every %s; try again in %s.", maxInvitesPerDay,
		waitText(int64((24 * time.Hour / maxInvitesPerDay).Seconds())), waitText(wait))
	u.renderMembers(c, http.StatusTooManyRequests, vm)
	return false
}

// waitText says a wait of seconds in the largest whole unit that does not round it down.
func waitText(seconds int64) string {
	switch {
	case seconds < 120:
		return strconv.FormatInt(seconds, 10) + " seconds"
	case seconds < 2*3600:
		return strconv.FormatInt((seconds+59)/60, 10) + " minutes"
	default:
		return strconv.FormatInt((seconds+3599)/3600, 10) + " hours"
	}
}

func (u *UI) inviteMember(c *gin.Context) {
	t := tenantOf(c)
	email, role := c.PostForm("email"), c.PostForm("role")
	if !u.spendInvite(c, t.ID, membersVM{Email: email, Role: role}) {
		return
	}
	inv, token, err := u.tenants.CreateInvite(c.Request.Context(), &t.ID, email, tenants.Role(role), 0, actor(c))
	if err != nil {
		if !formError(err) {
			u.fail(c, err)
			return
		}
		f := apperr.Fields(err)
		u.renderMembers(c, http.StatusUnprocessableEntity, membersVM{Email: email, Role: role, EmailErr: f["email"], RoleErr: f["role"]})
		return
	}
	// POST-redirect-GET, the link handed over like a new API key's secret (onetime.go).
	path := tenantPath(t.ID, "/members")
	id := strconv.FormatInt(inv.ID, 10)
	link := u.inviteLink(token)
	mailed := u.emailLink(c, mail.LinkInvite, inv, "invite:"+id, link)
	u.putOneTime(c, path, "invite:"+id, oneTimeLink(inv.Email, link, mailed))
	redirect(c, path+"?invited="+id)
}

// formError reports whether err is one a form shows inline (bad input, a taken name, the last
// operator) rather than a page-ending error.
func formError(err error) bool {
	if err == nil {
		return false
	}
	code := apperr.From(err).Code
	return code == apperr.InvalidRequest || code == apperr.Conflict
}

// memberID reads :uid (0 when malformed: no user has it, so the service answers not found).
func memberID(c *gin.Context) int64 {
	id, err := strconv.ParseInt(c.Param("uid"), 10, 64)
	if err != nil || id <= 0 {
		return 0
	}
	return id
}

func (u *UI) setMemberRole(c *gin.Context) {
	t := tenantOf(c)
	err := u.tenants.SetRole(c.Request.Context(), &t.ID, memberID(c), tenants.Role(c.PostForm("role")), &t.ID, actor(c))
	u.memberDone(c, err, "role-changed")
}

func (u *UI) removeMember(c *gin.Context) {
	t := tenantOf(c)
	if c.PostForm("confirm") != "yes" {
		u.memberDone(c, u.confirmFirst(c, &t.ID), "")
		return
	}
	u.memberDone(c, u.tenants.RemoveUser(c.Request.Context(), &t.ID, memberID(c), actor(c)), "member-removed")
}

func (u *UI) disableMember(c *gin.Context) {
	t := tenantOf(c)
	disable := c.PostForm("disable") == "true"
	err := u.tenants.SetDisabled(c.Request.Context(), &t.ID, memberID(c), disable, actor(c))
	u.memberDone(c, err, map[bool]string{true: "member-disabled", false: "member-enabled"}[disable])
}

func (u *UI) revokeInvite(c *gin.Context) {
	t := tenantOf(c)
	id, _ := strconv.ParseInt(c.Param("iid"), 10, 64)
	u.memberDone(c, u.tenants.RevokeInvite(c.Request.Context(), &t.ID, id, actor(c)), "invite-revoked")
}

// confirmFirst is the error of a removal without its confirmation: not found for a user out of
// scope (as a confirmed removal would say), else an inline request to confirm.
func (u *UI) confirmFirst(c *gin.Context, scope *int64) error {
	users, err := u.tenants.ListUsers(c.Request.Context(), scope)
	if err != nil {
		return err
	}
	for _, m := range users {
		if m.ID == memberID(c) {
			return apperr.Invalid("confirm", "tick the box beside Remove to confirm: a removed user's sessions end at once")
		}
	}
	return tenants.ErrNotFound
}

// memberDone ends a members-page action: back to the page with msg, the page with the problem
// inline, or the not-found page for a member of another tenant.
func (u *UI) memberDone(c *gin.Context, err error, msg string) {
	switch {
	case err == nil:
		redirect(c, tenantPath(tenantOf(c).ID, "/members?msg="+msg))
	case formError(err):
		u.renderMembers(c, http.StatusUnprocessableEntity, membersVM{FormErr: apperr.From(err).Sentence()})
	default:
		u.fail(c, err)
	}
}
