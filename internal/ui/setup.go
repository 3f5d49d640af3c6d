package ui

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// setupVM is the first-start page where the first operator chooses an email and password.
type setupVM struct {
	Layout layoutVM
	Token  string
	Email  string
	Error  string
}

func (u *UI) setupForm(c *gin.Context) {
	tok := c.Query("token")
	u.setupMu.Lock()
	open, err := u.setupOpen(c, tok)
	u.setupMu.Unlock()
	if err != nil {
		u.internalError(c, err)
		return
	}
	if !open {
		u.NotFound(c)
		return
	}
	u.render(c, http.StatusOK, setupPage(setupVM{Layout: u.bareLayout(c, "Set up Sluice"), Token: tok}))
}

// setup creates the first operator. The whole step runs under the setup lock, so two browsers
// racing with the same link create one operator.
func (u *UI) setup(c *gin.Context) {
	tok := c.PostForm("token")
	vm := setupVM{Layout: u.bareLayout(c, "Set up Sluice"), Token: tok, Email: c.PostForm("email")}
	password := c.PostForm("password")
	u.setupMu.Lock()
	defer u.setupMu.Unlock()
	if open, err := u.setupOpen(c, tok); err != nil {
		u.internalError(c, err)
		return
	} else if !open {
		u.NotFound(c)
		return
	}
	if password != c.PostForm("confirm") {
		vm.Error = "The two passwords differ."
		u.render(c, http.StatusUnprocessableEntity, setupPage(vm))
		return
	}
	ctx := c.Request.Context()
	// The new operator is the actor, named as the dashboard names its users (the address as
	// CreateUser stores it).
	self := "user:" + strings.ToLower(strings.TrimSpace(vm.Email))
	// CreateFirstOperator checks again, in its transaction, that no user exists: setupMu is this
	// instance's, and another instance's setup link may be in use at the same moment.
	user, err := u.tenants.CreateFirstOperator(ctx, vm.Email, password, self, "first operator, through the setup link")
	switch {
	case errors.Is(err, tenants.ErrInvalid):
		vm.Error = apperr.From(err).Sentence()
		u.render(c, http.StatusUnprocessableEntity, setupPage(vm))
		return
	case errors.Is(err, tenants.ErrConflict): // a user appeared since setupOpen counted
		u.setupToken = ""
		u.NotFound(c)
		return
	case err != nil:
		u.internalError(c, err)
		return
	}
	u.setupToken = "" // used: the link is dead from now on
	if err := u.startSession(c, user); err != nil {
		u.internalError(c, err)
		return
	}
	redirect(c, "/tenants?msg=welcome")
}

// setupOpen reports whether tok is the live setup link; the caller holds setupMu. A link is for a
// server without users: once any exists (made by `user create`, or by another instance on the
// database, through its own link or SLUICE_ADMIN_EMAIL), the link dies, so that it can neither
// make a second operator nor fail on an email that is taken.
func (u *UI) setupOpen(c *gin.Context, tok string) (bool, error) {
	if u.setupToken == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(u.setupToken)) != 1 {
		return false, nil
	}
	n, err := u.tenants.CountUsers(c.Request.Context())
	if err != nil {
		return false, fmt.Errorf("ui: setup: count users: %w", err)
	}
	if n > 0 {
		u.setupToken = ""
		return false, nil
	}
	return true, nil
}
