package ui

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// captchaVM is a tenant's captcha page (DESIGN §6): its publishable keys, allowed origins and
// difficulty, the snippet that embeds the widget, and the sessions it has authorized.
// NewSecret is set only on the page the create-key form redirects to, once, as on the API keys
// page.
type captchaVM struct {
	Layout layoutVM

	SettingsURL string
	Origins     string // the textarea: one origin per line
	Difficulty  string
	MinDiff     int
	MaxDiff     int
	Errors      map[string]string // "origins", "difficulty", "pk-label"

	KeyURL    string
	KeysURL   string // the API keys page, where keys are revoked
	Keys      []pkRow
	Label     string
	NewSecret string
	NewKeyID  string

	ScriptTag string
	WidgetTag string

	Sessions      []sessionRowVM
	SessionsLimit int
}

type pkRow struct {
	ID, Label, Hint, Created, Revoked string
	Value                             string // the key itself, for a key not revoked that can be shown again
}

type sessionRowVM struct {
	Hash       string
	HashPrefix string
	Authorized string
	Expires    string
	RevokeURL  string
}

// sessionsShown is how many authorized sessions the page lists, most recent first.
const sessionsShown = 100

// sessionHashShown is how much of a session hash the list shows: enough to tell sessions apart
// and to match one against HashSessionID of an ID the tenant holds.
const sessionHashShown = 16

// renderCaptcha completes vm and renders the page. With fromForm false the settings form shows
// the tenant's stored settings; otherwise it keeps what was submitted.
func (u *UI) renderCaptcha(c *gin.Context, status int, vm captchaVM, fromForm bool) {
	t := tenantOf(c)
	ctx := c.Request.Context()
	l, err := u.layout(c, "Captcha · "+t.Name, "captcha")
	if err != nil {
		u.internalError(c, err)
		return
	}
	keys, err := u.tenants.ListKeys(ctx, t.ID)
	if err != nil {
		u.internalError(c, err)
		return
	}
	vm.Layout = l
	vm.KeysURL = tenantPath(t.ID, "/keys")
	if !l.ReadOnly {
		vm.SettingsURL, vm.KeyURL = tenantPath(t.ID, "/captcha/settings"), tenantPath(t.ID, "/captcha/keys")
	}
	vm.MinDiff, vm.MaxDiff = tenants.MinCaptchaDifficulty, tenants.MaxCaptchaDifficulty
	if !fromForm {
		vm.Origins = strings.Join(t.AllowedOrigins, "\n")
		vm.Difficulty = strconv.Itoa(t.CaptchaDifficulty)
	}
	// The snippet carries the key just created, or else the newest one that can be shown.
	pk := "PUBLISHABLE_KEY"
	for _, k := range keys {
		if k.Kind != tenants.KindPublishable {
			continue
		}
		r := pkRow{ID: k.ID, Label: k.Label, Hint: k.Hint, Created: fmtTime(k.CreatedAt)}
		if k.RevokedAt != nil {
			r.Revoked = fmtTime(*k.RevokedAt)
		} else {
			switch v, err := u.tenants.PublishableKey(ctx, t.ID, k.ID); {
			case err == nil:
				r.Value, pk = v, v // oldest first: the last one kept is the newest
			case !errors.Is(err, tenants.ErrKeyNotShowable):
				u.internalError(c, err)
				return
			}
		}
		vm.Keys = append(vm.Keys, r)
	}
	if vm.NewSecret != "" {
		pk = vm.NewSecret
	}
	base := strings.TrimSuffix(u.baseURL.String(), "/")
	// Versioned like the dashboard's own assets: /static answers with year-long immutable
	// caching, so tenants' pages must name the widget of this binary, not of the one they first met.
	vm.ScriptTag = `<script type="module" src="` + base + u.static.url("altcha/altcha.min.js") + `"></script>`
	vm.WidgetTag = `<altcha-widget challenge="` + base + `/v1/captcha/challenge?pk=` + pk + `&sid=SESSION_ID"></altcha-widget>`

	vm.SessionsLimit = sessionsShown
	sessions, err := u.captcha.ListSessions(ctx, t.ID, sessionsShown)
	if err != nil {
		u.internalError(c, err)
		return
	}
	for _, s := range sessions {
		row := sessionRowVM{
			Hash: s.SessionHash, HashPrefix: s.SessionHash[:min(sessionHashShown, len(s.SessionHash))] + "…",
			Authorized: fmtTime(s.AuthorizedAt), Expires: fmtTime(s.ExpiresAt),
		}
		if !l.ReadOnly {
			row.RevokeURL = tenantPath(t.ID, "/captcha/sessions/"+s.SessionHash+"/revoke")
		}
		vm.Sessions = append(vm.Sessions, row)
	}
	u.render(c, status, captchaPage(vm))
}

// captchaPage shows the tenant's captcha page; right after the create-key form it shows the new
// publishable key, once, as new (handed over by createPublishableKey through a one-time cookie:
// onetime.go). The key stays listed, since a publishable key can be shown again.
func (u *UI) captchaPage(c *gin.Context) {
	vm := captchaVM{}
	if id := c.Query("created"); id != "" {
		if pk, ok := u.takeOneTime(c, tenantPath(tenantOf(c).ID, "/captcha"), "pk:"+id); ok {
			vm.NewSecret, vm.NewKeyID = pk, id
		}
	}
	u.renderCaptcha(c, http.StatusOK, vm, false)
}

// saveCaptchaSettings validates each field on its own, so that both can show their error at
// once, then stores them with UpdateCaptchaSettings (which validates again, authoritatively).
func (u *UI) saveCaptchaSettings(c *gin.Context) {
	t := tenantOf(c)
	vm := captchaVM{Origins: c.PostForm("origins"), Difficulty: strings.TrimSpace(c.PostForm("difficulty")), Errors: map[string]string{}}
	var origins []string
	for line := range strings.Lines(vm.Origins) {
		if o := strings.TrimSpace(line); o != "" {
			origins = append(origins, o)
		}
	}
	if _, err := tenants.NormalizeOrigins(origins); err != nil {
		vm.Errors["origins"] = apperr.From(err).Sentence()
	}
	d, ok := parseWhole(vm.Difficulty)
	if !ok || d < tenants.MinCaptchaDifficulty || d > tenants.MaxCaptchaDifficulty {
		vm.Errors["difficulty"] = fmt.Sprintf("Difficulty must be a whole number between %d and %d.", tenants.MinCaptchaDifficulty, tenants.MaxCaptchaDifficulty)
	}
	difficulty := int(d) // within the bounds when it is used
	if len(vm.Errors) == 0 {
		err := u.tenants.UpdateCaptchaSettings(c.Request.Context(), t.ID, origins, difficulty, actor(c))
		switch {
		case errors.Is(err, tenants.ErrInvalid):
			vm.Errors["origins"] = apperr.From(err).Sentence()
		case errors.Is(err, tenants.ErrNotFound):
			u.NotFound(c)
			return
		case err != nil:
			u.internalError(c, err)
			return
		}
	}
	if len(vm.Errors) > 0 {
		u.renderCaptcha(c, http.StatusUnprocessableEntity, vm, true)
		return
	}
	redirect(c, tenantPath(t.ID, "/captcha?msg=captcha-saved"))
}

// createPublishableKey creates a pk_live_ key (CreateKey writes its audit entry) and redirects to
// the captcha page, which shows it as new once.
func (u *UI) createPublishableKey(c *gin.Context) {
	label := c.PostForm("label")
	k, secret, err := u.tenants.CreateKey(c.Request.Context(), tenantOf(c).ID, tenants.KindPublishable, label, actor(c))
	switch {
	case errors.Is(err, tenants.ErrInvalid):
		u.renderCaptcha(c, http.StatusUnprocessableEntity, captchaVM{Label: label, Errors: map[string]string{"pk-label": apperr.From(err).Sentence()}}, false)
		return
	case err != nil && apperr.From(err).Code == apperr.PlanQuotaReached:
		u.renderCaptcha(c, http.StatusConflict, captchaVM{Label: label, Errors: map[string]string{"pk-label": apperr.From(err).Sentence()}}, false)
		return
	case err != nil:
		u.internalError(c, err)
		return
	}
	// POST-redirect-GET, as for API keys: reloading the page that shows the new key must not
	// create another.
	page := tenantPath(tenantOf(c).ID, "/captcha")
	u.putOneTime(c, page, "pk:"+k.ID, secret)
	redirect(c, page+"?created="+url.QueryEscape(k.ID))
}

// revokeSession ends an authorized session, named by its hash. A session that is not active
// (unknown, another tenant's, already revoked or expired) is a 404.
func (u *UI) revokeSession(c *gin.Context) {
	t := tenantOf(c)
	hash := c.Param("hash")
	err := u.captcha.RevokeHash(c.Request.Context(), t.ID, hash)
	if err != nil {
		u.fail(c, err)
		return
	}
	u.auditRequest(c, &t.ID, actor(c), "session.revoke", "session:"+hash, "from the dashboard")
	redirect(c, tenantPath(t.ID, "/captcha?msg=session-revoked"))
}
