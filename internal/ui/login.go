package ui

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/tenants"
)

// loginVM is the login page.
type loginVM struct {
	Layout layoutVM
	Email  string
	Next   string
	Error  string
}

// home sends each visitor to where they belong.
func (u *UI) home(c *gin.Context) {
	p, err := u.currentUser(c)
	switch {
	case err != nil:
		redirect(c, "/login")
	case p.user.IsOperator:
		redirect(c, "/tenants")
	case p.user.TenantID != nil:
		redirect(c, tenantPath(*p.user.TenantID, "/limits"))
	default:
		redirect(c, "/login")
	}
}

func (u *UI) loginForm(c *gin.Context) {
	if _, err := u.currentUser(c); err == nil {
		redirect(c, "/")
		return
	}
	vm := loginVM{Layout: u.bareLayout(c, "Log in"), Next: safeNext(c.Query("next"))}
	u.render(c, http.StatusOK, loginPage(vm))
}

// login spends the rate limits' tokens first (so a refused attempt costs no argon2 work, and
// concurrent attempts check no more passwords than the limits allow), then checks the password,
// then starts a session. A right password resets its account's limit at its address. The session
// starts only if the password checked is still the user's (a change or reset committed between
// the check and the session is a failed login, not a session that outlives the change). The
// login is audited ("login") by the transaction that stores its session, so a login that starts
// none is audited only as failed.
func (u *UI) login(c *gin.Context) {
	email, password := c.PostForm("email"), c.PostForm("password")
	vm := loginVM{Layout: u.bareLayout(c, "Log in"), Email: email, Next: safeNext(c.PostForm("next"))}
	if len(email) > 320 {
		vm.Email = ""
	}
	addr := clientAddress(c)
	attempt, wait, err := u.payPasswordAttempt(c, email, addr)
	if err != nil {
		u.internalError(c, err)
		return
	}
	if wait > 0 {
		vm.Error = tooManyAttempts(c, wait)
		u.render(c, http.StatusTooManyRequests, loginPage(vm))
		return
	}
	user, err := u.tenants.Login(c.Request.Context(), email, password, addr)
	if errors.Is(err, tenants.ErrUnauthorized) {
		if err := u.passwordWrong(c, attempt); err != nil {
			u.internalError(c, err)
			return
		}
		vm.Error = "Email or password is wrong."
		u.render(c, http.StatusUnauthorized, loginPage(vm))
		return
	}
	if err != nil {
		u.internalError(c, err)
		return
	}
	if err := u.passwordRight(c, attempt); err != nil {
		u.internalError(c, err)
		return
	}
	u.afterPasswordCheck()
	err = u.startSession(c, user)
	if errors.Is(err, tenants.ErrUnauthorized) || errors.Is(err, tenants.ErrNotFound) {
		// The password was changed or reset, or the user disabled or removed, after it was
		// checked: the change ended every session, and this one must not start after it.
		u.auditRequest(c, user.TenantID, user.Email, "login.failed", "user:"+strconv.FormatInt(user.ID, 10),
			"client "+addr+"; the password or the account changed during the login")
		vm.Error = "Email or password is wrong."
		u.render(c, http.StatusUnauthorized, loginPage(vm))
		return
	}
	if err != nil {
		u.internalError(c, err)
		return
	}
	if vm.Next != "" {
		redirect(c, vm.Next)
		return
	}
	redirect(c, "/")
}

// logout revokes the session server-side (so a copied cookie dies too) and clears the cookie.
func (u *UI) logout(c *gin.Context) {
	if p, err := u.currentUser(c); err == nil {
		if err := u.tenants.RevokeAdminSession(c.Request.Context(), p.sessionID); err != nil {
			u.internalError(c, err)
			return
		}
		u.auditRequest(c, p.user.TenantID, "user:"+p.user.Email, "logout", "user:"+strconv.FormatInt(p.user.ID, 10), "")
	}
	u.setCookie(c, "", -1)
	redirect(c, "/login?msg=logged-out")
}
