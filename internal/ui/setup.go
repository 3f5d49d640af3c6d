package ui

import (
	"errors"
	"net/http"
	"strconv"

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
	if !u.validSetupToken(tok) {
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
	if u.setupToken == "" || tok != u.setupToken {
		u.NotFound(c)
		return
	}
	if password != c.PostForm("confirm") {
		vm.Error = "The two passwords differ."
		u.render(c, http.StatusUnprocessableEntity, setupPage(vm))
		return
	}
	ctx := c.Request.Context()
	user, err := u.tenants.CreateUser(ctx, vm.Email, password, true, nil)
	switch {
	case errors.Is(err, tenants.ErrInvalid):
		vm.Error = apperr.From(err).Sentence()
		u.render(c, http.StatusUnprocessableEntity, setupPage(vm))
		return
	case err != nil:
		u.internalError(c, err)
		return
	}
	u.setupToken = "" // used: the link is dead from now on
	_ = u.tenants.Audit(ctx, nil, "user:"+user.Email, "user.create", "user:"+strconv.FormatInt(user.ID, 10), "first operator, through the setup link")
	if err := u.startSession(c, user); err != nil {
		u.internalError(c, err)
		return
	}
	redirect(c, "/tenants?msg=welcome")
}
