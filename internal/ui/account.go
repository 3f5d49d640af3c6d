package ui

import (
	"context"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// passwordVM is a form that sets a password: one's own account (with the current password), or
// the page a one-time link opens (an invite's, a reset's: with the token).
type passwordVM struct {
	Layout   layoutVM
	Heading  string
	Intro    string
	Action   string // where the form posts
	Token    string // a link's token ("" on the account page)
	Email    string
	Role     string
	Current  bool // ask for the current password
	Errs     map[string]string
	Disabled bool // the link is dead: no form
}

func (u *UI) renderAccount(c *gin.Context, status int, errs map[string]string) {
	l, err := u.layout(c, "Account", "account")
	if err != nil {
		u.internalError(c, err)
		return
	}
	p := principalOf(c)
	u.render(c, status, passwordPage(passwordVM{Layout: l, Heading: "Your account", Action: "/account/password",
		Intro: "Changing your password ends your other sessions.", Email: p.user.Email, Role: string(p.user.Role), Current: true, Errs: errs}))
}

func (u *UI) accountPage(c *gin.Context) { u.renderAccount(c, http.StatusOK, nil) }

// changePassword changes the logged-in user's password: the current one required, the new one
// typed twice; every other session of theirs ends. Checking the current password spends the
// login limits' tokens first, as a login does, so a stolen session cannot guess the password any
// faster than a stranger at the login form.
func (u *UI) changePassword(c *gin.Context) {
	p := principalOf(c)
	// The confirmation first: a mistyped new password must change nothing.
	if errs := confirmationErrors(c, "The two new passwords differ."); errs != nil {
		u.renderAccount(c, http.StatusUnprocessableEntity, errs)
		return
	}
	addr := clientAddress(c)
	attempt, wait, err := u.payPasswordAttempt(c, p.user.Email, addr)
	if err != nil {
		u.internalError(c, err)
		return
	}
	if wait > 0 {
		u.renderAccount(c, http.StatusTooManyRequests, map[string]string{"current": tooManyAttempts(c, wait)})
		return
	}
	err = u.tenants.ChangePassword(c.Request.Context(), p.user.ID, c.PostForm("current"), c.PostForm("password"), p.sessionID, addr)
	var settled error
	switch {
	case apperr.Fields(err)["current"] != "":
		settled = u.passwordWrong(c, attempt)
	case err == nil || formError(err): // the current password was right
		settled = u.passwordRight(c, attempt)
	}
	if settled != nil {
		u.internalError(c, settled)
		return
	}
	if err != nil {
		if !formError(err) {
			u.fail(c, err)
			return
		}
		u.renderAccount(c, http.StatusUnprocessableEntity, apperr.Fields(err))
		return
	}
	redirect(c, "/account?msg=password-changed")
}

// linkPage renders the page of a one-time link: its form when the link is live, a plain "this
// link is invalid or has expired" (404) otherwise.
func (u *UI) linkPage(c *gin.Context, status int, vm passwordVM) {
	vm.Layout = u.bareLayout(c, vm.Heading)
	if vm.Disabled {
		status = http.StatusNotFound
	}
	u.render(c, status, passwordPage(vm))
}

// tenantClosed is what an invitation's page says once its tenant is being deleted: the invitee
// needs no more than that (the operators' message says how to finish the deletion).
const tenantClosed = "This invitation's tenant no longer accepts members."

// linkFlow is a page one-time links open (an invitation's, a password reset's): its text, whose
// link a token is, and what choosing the password does with the token.
type linkFlow struct {
	heading, action, intro string
	dead                   string // the intro when the token is invalid, used or expired
	holder                 func(ctx context.Context, token string) (email string, role tenants.Role, err error)
	complete               func(ctx context.Context, token, password string) (tenants.User, error)
}

// form is the page for token: a disabled form, not an error, when the link is dead.
func (l linkFlow) form(ctx context.Context, token string) (passwordVM, error) {
	vm := passwordVM{Heading: l.heading, Action: l.action, Token: token, Intro: l.intro}
	email, role, err := l.holder(ctx, token)
	switch {
	case errors.Is(err, tenants.ErrNotFound):
		vm.Disabled, vm.Intro = true, l.dead
		return vm, nil
	case errors.Is(err, tenants.ErrTenantBeingDeleted):
		vm.Disabled, vm.Intro = true, tenantClosed
		return vm, nil
	}
	vm.Email, vm.Role = email, string(role)
	return vm, err
}

// invitation is the link an invitation sends: accepting it creates the user.
func (u *UI) invitation() linkFlow {
	return linkFlow{heading: "Join Sluice", action: "/invite",
		intro: "Choose a password to accept the invitation; you are logged in at once.",
		dead:  "This invitation link is invalid, used or expired. Ask for a new one.",
		holder: func(ctx context.Context, token string) (string, tenants.Role, error) {
			inv, err := u.tenants.InviteByToken(ctx, token)
			return inv.Email, inv.Role, err
		},
		complete: u.tenants.AcceptInvite}
}

// passwordReset is the link an operator makes for a user who lost their password.
func (u *UI) passwordReset() linkFlow {
	return linkFlow{heading: "Reset your password", action: "/reset",
		intro: "Choose a new password; every session of yours ends and you are logged in here.",
		dead:  "This reset link is invalid, used or expired. Ask an operator for a new one.",
		holder: func(ctx context.Context, token string) (string, tenants.Role, error) {
			user, err := u.tenants.ResetUser(ctx, token)
			return user.Email, user.Role, err
		},
		complete: u.tenants.ResetPassword}
}

// showLink renders the page a one-time link opens.
func (u *UI) showLink(l linkFlow) gin.HandlerFunc {
	return func(c *gin.Context) {
		vm, err := l.form(c.Request.Context(), c.Query("token"))
		if err != nil {
			u.internalError(c, err)
			return
		}
		u.linkPage(c, http.StatusOK, vm)
	}
}

// submitLink sets the password a one-time link's form chose and logs the user in.
func (u *UI) submitLink(l linkFlow) gin.HandlerFunc {
	return func(c *gin.Context) {
		token := c.PostForm("token")
		vm, err := l.form(c.Request.Context(), token)
		if err != nil || vm.Disabled {
			if err != nil {
				u.internalError(c, err)
			} else {
				u.linkPage(c, http.StatusNotFound, vm)
			}
			return
		}
		if vm.Errs = confirmationErrors(c, "The two passwords differ."); vm.Errs != nil {
			u.linkPage(c, http.StatusUnprocessableEntity, vm)
			return
		}
		user, err := l.complete(c.Request.Context(), token, c.PostForm("password"))
		u.linkDone(c, vm, user, err)
	}
}

// confirmationErrors are a password form's errors when its confirmation differs from the new
// password (differ says so; the password's length is checked too, so that one answer names both),
// and nil when they match: a form whose confirmation differs changes nothing.
func confirmationErrors(c *gin.Context, differ string) map[string]string {
	if c.PostForm("password") == c.PostForm("confirm") {
		return nil
	}
	errs := map[string]string{"confirm": differ}
	if err := tenants.CheckPassword(c.PostForm("password")); err != nil {
		errs["password"] = apperr.From(err).Sentence()
	}
	return errs
}

// linkDone logs in the user a one-time link has just set up, or shows the form's problems.
func (u *UI) linkDone(c *gin.Context, vm passwordVM, user tenants.User, err error) {
	switch {
	case errors.Is(err, tenants.ErrNotFound) || errors.Is(err, tenants.ErrConflict):
		vm.Disabled, vm.Intro = true, "This link was used meanwhile, or its account exists already."
		u.linkPage(c, http.StatusNotFound, vm)
	case errors.Is(err, tenants.ErrTenantBeingDeleted): // marked since the form was read
		vm.Disabled, vm.Intro = true, tenantClosed
		u.linkPage(c, http.StatusNotFound, vm)
	case formError(err):
		vm.Errs = apperr.Fields(err)
		u.linkPage(c, http.StatusUnprocessableEntity, vm)
	case err != nil:
		u.internalError(c, err)
	default:
		err := u.startSession(c, user)
		if errors.Is(err, tenants.ErrUnauthorized) || errors.Is(err, tenants.ErrNotFound) {
			// The password is set, but the user was disabled or removed, or the password changed
			// again, meanwhile: no session; the login page says whether the new password works.
			redirect(c, "/login")
			return
		}
		if err != nil {
			u.internalError(c, err)
			return
		}
		redirect(c, "/")
	}
}
