package ui

import (
	"errors"
	"net/http"
	"net/url"
	"slices"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// keysVM is the API keys page. NewSecret is set only in the response to the create form: the
// secret is shown that once (the page is served with Cache-Control: no-store) and never again.
type keysVM struct {
	Layout    layoutVM
	CreateURL string
	Rows      []keyRow
	NewSecret string
	NewKeyID  string
	Label     string
	Kind      string
	LabelErr  string
	FormErr   string
}

type keyRow struct {
	ID        string
	Kind      string
	Label     string
	Hint      string
	Created   string
	LastUsed  string
	Revoked   string
	RevokeURL string
}

func (u *UI) renderKeys(c *gin.Context, status int, vm keysVM) {
	t := tenantOf(c)
	l, err := u.layout(c, "API keys · "+t.Name, "keys")
	if err != nil {
		u.internalError(c, err)
		return
	}
	keys, err := u.tenants.ListKeys(c.Request.Context(), t.ID)
	if err != nil {
		u.internalError(c, err)
		return
	}
	vm.Layout = l
	if !l.ReadOnly {
		vm.CreateURL = tenantPath(t.ID, "/keys")
	}
	for _, k := range keys {
		r := keyRow{ID: k.ID, Kind: string(k.Kind), Label: k.Label, Hint: k.Hint, Created: fmtTime(k.CreatedAt),
			LastUsed: fmtTimePtr(k.LastUsedAt, "never")}
		if !l.ReadOnly {
			r.RevokeURL = tenantPath(t.ID, "/keys/"+k.ID+"/revoke")
		}
		if k.RevokedAt != nil {
			r.Revoked = fmtTime(*k.RevokedAt)
		}
		vm.Rows = append(vm.Rows, r)
	}
	if vm.Kind == "" {
		vm.Kind = string(tenants.KindSecret)
	}
	u.render(c, status, keysPage(vm))
}

// keysPage lists the keys; right after the create form it shows the new key's secret, once
// (handed over by createKey through a one-time cookie: onetime.go).
func (u *UI) keysPage(c *gin.Context) {
	vm := keysVM{}
	if id := c.Query("created"); id != "" {
		if secret, ok := u.takeOneTime(c, tenantPath(tenantOf(c).ID, "/keys"), "key:"+id); ok {
			vm.NewSecret, vm.NewKeyID = secret, id
		}
	}
	u.renderKeys(c, http.StatusOK, vm)
}

func (u *UI) createKey(c *gin.Context) {
	kind := tenants.KeyKind(c.PostForm("kind"))
	label := c.PostForm("label")
	vm := keysVM{Label: label, Kind: string(kind)}
	if kind != tenants.KindSecret && kind != tenants.KindPublishable {
		vm.Kind, vm.LabelErr = string(tenants.KindSecret), "Choose a secret or a publishable key."
		u.renderKeys(c, http.StatusUnprocessableEntity, vm)
		return
	}
	k, secret, err := u.tenants.CreateKey(c.Request.Context(), tenantOf(c).ID, kind, label, actor(c))
	switch {
	case errors.Is(err, tenants.ErrInvalid):
		vm.LabelErr = apperr.From(err).Sentence()
		u.renderKeys(c, http.StatusUnprocessableEntity, vm)
		return
	case err != nil && apperr.From(err).Code == apperr.PlanQuotaReached:
		vm.FormErr = apperr.From(err).Sentence()
		u.renderKeys(c, http.StatusConflict, vm)
		return
	case err != nil:
		u.internalError(c, err)
		return
	}
	// POST-redirect-GET: reloading the page that shows the secret must not create another key.
	keys := tenantPath(tenantOf(c).ID, "/keys")
	u.putOneTime(c, keys, "key:"+k.ID, secret)
	redirect(c, keys+"?created="+url.QueryEscape(k.ID))
}

func (u *UI) revokeKey(c *gin.Context) {
	t := tenantOf(c)
	if c.PostForm("confirm") != "yes" { // a revoked key stops working at once, everywhere
		keys, err := u.tenants.ListKeys(c.Request.Context(), t.ID)
		switch {
		case err != nil:
			u.internalError(c, err)
		case !slices.ContainsFunc(keys, func(k tenants.APIKey) bool { return k.ID == c.Param("kid") }):
			u.NotFound(c) // another tenant's key, or none: the same answer, confirmed or not
		default:
			u.renderKeys(c, http.StatusUnprocessableEntity, keysVM{FormErr: "Tick the box beside Revoke to confirm: a revoked key stops working at once."})
		}
		return
	}
	revokedNow, err := u.tenants.RevokeKeyIfActive(c.Request.Context(), t.ID, c.Param("kid"), actor(c))
	if err != nil {
		u.fail(c, err)
		return
	}
	if !revokedNow { // revoked before: from another tab, or a form sent twice
		redirect(c, tenantPath(t.ID, "/keys?msg=key-already-revoked"))
		return
	}
	redirect(c, tenantPath(t.ID, "/keys?msg=key-revoked"))
}
