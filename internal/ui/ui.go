// Package ui is Sluice's admin dashboard: server-rendered templ pages, enhanced (never required)
// by htmx, served by Gin next to the JSON API.
//
// Layout: routes.go lists every route; auth.go holds the session cookie (a signed JWT naming an
// admin_sessions row), the login rate limit and the access checks; every page has its own file
// with its handler and view model, next to its .templ (compiled to a committed *_templ.go).
// Every tenant-scoped handler takes the tenant from the URL and answers 404 unless the logged-in
// user is an operator or a member of that tenant.
//
// Browsers must be able to use every page without JavaScript: forms post and redirect, confirm
// steps are pages of their own. htmx only refreshes live values in place. The CSP forbids inline
// scripts and styles, so the little JavaScript there is lives in web/static/app.js, the CSS in
// web/static/app.css, and no template may use a style attribute (the meters are SVG).
package ui

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a-h/templ"
	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/captcha"
	"github.com/sluice-dev/sluice/internal/httpserver"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/usage"
	"github.com/sluice-dev/sluice/internal/webhooks"
)

// UsageSource answers the usage charts' queries (usage.Aggregator in production).
type UsageSource interface {
	Series(ctx context.Context, tenantID int64, name string, span, step time.Duration) ([]usage.Point, error)
	TopKeys(ctx context.Context, tenantID int64, name string, kind usage.Kind, span time.Duration, n int) ([]usage.KeyCount, error)
}

// CaptchaSessions lists and revokes a tenant's authorized captcha sessions (captcha.Store in
// production). The dashboard knows sessions only by hash: raw session IDs are never stored.
type CaptchaSessions interface {
	ListSessions(ctx context.Context, tenantID int64, limit int) ([]captcha.SessionInfo, error)
	RevokeHash(ctx context.Context, tenantID int64, sessionHash string) error
}

// Deps are what New needs. Tenants, Engine, SessionKey, BaseURL and Static are required.
type Deps struct {
	Tenants *tenants.Service
	Engine  *limiter.Engine
	Usage   UsageSource     // nil: no charts and no analytics
	Captcha CaptchaSessions // the authorized sessions the captcha page lists and revokes
	// Webhooks owns the tenants' webhook endpoints and their delivery log.
	Webhooks *webhooks.Service
	Logger   *slog.Logger
	// Mailer, when set (SMTP_ADDR), emails new invite and password reset links to their users.
	Mailer LinkMailer
	// SessionKey signs session cookies (HS256). Derive it from the server secret; every instance
	// must use the same key.
	SessionKey []byte
	// BaseURL is the public URL. A plain-HTTP loopback base URL (http://localhost:…,
	// http://127.0.0.1:…) switches the session cookie to its development form; see cookieName.
	BaseURL string
	Static  fs.FS            // web/static
	Now     func() time.Time // clock for session tokens; time.Now when nil
	// SessionTTL is how long a login lasts; DefaultSessionTTL when zero.
	SessionTTL time.Duration
	// LoginPerAccountIP, LoginPerIP and LoginPerAccount limit login attempts (each pays a token
	// of all three before its password is checked; a right one refills the first) per account
	// and client address, per client address and per account (token buckets of tenant 0, the
	// system; see defaultLoginPerAccountIP); defaults when nil.
	LoginPerAccountIP, LoginPerIP, LoginPerAccount *limiter.Definition
}

// DefaultSessionTTL is how long a dashboard login lasts.
const DefaultSessionTTL = 12 * time.Hour

// UI is the dashboard surface; register it with httpserver.Options.Surfaces.
type UI struct {
	tenants    *tenants.Service
	engine     *limiter.Engine
	usage      UsageSource
	captcha    CaptchaSessions
	webhooks   *webhooks.Service
	log        *slog.Logger
	mailer     LinkMailer // nil: no email
	sessionKey []byte
	baseURL    *url.URL
	insecure   bool // development cookie: no __Host- prefix, no Secure flag
	now        func() time.Time
	ttl        time.Duration
	// login limits: see defaultLoginPerAccountIP
	loginAccountIP, loginIP, loginAccount limiter.Definition
	static                                *staticFiles
	csrf                                  *http.CrossOriginProtection

	setupMu    sync.Mutex
	setupToken string // one-time first-operator token; "" when setup is not offered

	// testAfterPasswordCheck, when set (tests only, export_test.go), runs in a login between the
	// password check and the session's creation.
	testAfterPasswordCheck func()
}

// afterPasswordCheck runs the tests' hook between a login's password check and its session.
func (u *UI) afterPasswordCheck() {
	if u.testAfterPasswordCheck != nil {
		u.testAfterPasswordCheck()
	}
}

// New builds the dashboard.
func New(d Deps) (*UI, error) {
	if d.Tenants == nil || d.Engine == nil || d.Captcha == nil || d.Webhooks == nil || d.Static == nil {
		return nil, errors.New("ui: Tenants, Engine, Captcha, Webhooks and Static are required")
	}
	if len(d.SessionKey) < 32 {
		return nil, errors.New("ui: the session key must be at least 32 bytes")
	}
	base, err := url.Parse(d.BaseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("ui: BaseURL %q is not an absolute http(s) URL", d.BaseURL)
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.SessionTTL <= 0 {
		d.SessionTTL = DefaultSessionTTL
	}
	u := &UI{
		tenants: d.Tenants, engine: d.Engine, usage: d.Usage, captcha: d.Captcha, webhooks: d.Webhooks, log: d.Logger, mailer: d.Mailer,
		sessionKey: append([]byte(nil), d.SessionKey...), baseURL: base,
		insecure: base.Scheme == "http" && isLoopback(base.Hostname()),
		now:      d.Now, ttl: d.SessionTTL,
		loginAccountIP: defaultLoginPerAccountIP, loginIP: defaultLoginPerIP, loginAccount: defaultLoginPerAccount,
	}
	for _, o := range []struct {
		set *limiter.Definition
		dst *limiter.Definition
	}{{d.LoginPerAccountIP, &u.loginAccountIP}, {d.LoginPerIP, &u.loginIP}, {d.LoginPerAccount, &u.loginAccount}} {
		if o.set != nil {
			*o.dst = *o.set
		}
	}
	for _, def := range []limiter.Definition{u.loginAccountIP, u.loginIP, u.loginAccount} {
		if err := def.Validate(); err != nil {
			return nil, fmt.Errorf("ui: login limit: %w", err)
		}
	}
	if base.Scheme == "http" && !u.insecure {
		d.Logger.Warn("dashboard: BASE_URL is plain HTTP on a non-loopback host; browsers will not send the Secure session cookie, so logins will not stick. Serve the dashboard over HTTPS.")
	}
	u.static, err = newStaticFiles(d.Static)
	if err != nil {
		return nil, err
	}
	u.csrf = http.NewCrossOriginProtection()
	// Behind a proxy that rewrites Host, the public origin is still same-origin.
	if err := u.csrf.AddTrustedOrigin(base.Scheme + "://" + base.Host); err != nil {
		return nil, fmt.Errorf("ui: trusted origin: %w", err)
	}
	return u, nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Bootstrap prepares a first start. When users exist it does nothing and returns "". Otherwise,
// with adminEmail and adminPassword set, it creates that operator; without them it makes a
// one-time setup token, kept in memory, and returns the path of the setup link
// ("/setup?token=…") for the caller to print with the base URL. The token is valid once, and
// only while the database has no users. Instances starting at once on one database with the same
// adminEmail all succeed: the one whose creation finds the operator made by another takes it.
func (u *UI) Bootstrap(ctx context.Context, adminEmail, adminPassword string) (string, error) {
	n, err := u.tenants.CountUsers(ctx)
	if err != nil {
		return "", fmt.Errorf("ui: bootstrap: %w", err)
	}
	if n > 0 {
		return "", nil
	}
	if adminEmail != "" {
		_, err := u.tenants.CreateUser(ctx, adminEmail, adminPassword, true, nil, "system", "from SLUICE_ADMIN_EMAIL")
		if errors.Is(err, tenants.ErrConflict) {
			// Another instance starting on the same database with the same SLUICE_ADMIN_EMAIL
			// created the operator since the count: that is what this start wanted too.
			if existing, lookErr := u.tenants.UserByEmail(ctx, adminEmail); lookErr == nil && existing.IsOperator {
				return "", nil
			}
		}
		if err != nil {
			return "", fmt.Errorf("ui: bootstrap: create operator from SLUICE_ADMIN_EMAIL: %w", err)
		}
		return "", nil
	}
	u.setupMu.Lock()
	defer u.setupMu.Unlock()
	u.setupToken = rand.Text()
	return "/setup?token=" + url.QueryEscape(u.setupToken), nil
}

// render writes a full page or fragment. It renders into a buffer first so that a template
// failure becomes a clean error page rather than half a page.
func (u *UI) render(c *gin.Context, status int, comp templ.Component) {
	var buf bytes.Buffer
	if err := comp.Render(c.Request.Context(), &buf); err != nil {
		u.internalError(c, fmt.Errorf("render: %w", err))
		return
	}
	// Pages carry tenant data and one-time secrets: never cache them.
	c.Header("Cache-Control", "no-store")
	c.Data(status, "text/html; charset=utf-8", buf.Bytes())
}

// fail is the dashboard's renderer of an error that ends the request, read through apperr: the
// not-found page for a 404 (a missing object, or another tenant's: the same page, so nothing is
// revealed), an error page with the problem's sentence for any other 4xx (a stored definition
// that today's rules refuse, for one), and the internal-error page, logged with the request ID,
// for anything else. Errors a form can correct are shown inline instead, with
// apperr.From(err).Sentence().
func (u *UI) fail(c *gin.Context, err error) {
	e := apperr.From(err)
	switch status := e.Status(); {
	case status == http.StatusNotFound:
		u.NotFound(c)
	case status >= 400 && status < 500:
		if e.RetryAfterMs != nil { // a refusal that says when to try again (a 429)
			c.Header("Retry-After", strconv.FormatInt(limiter.HeaderSeconds(float64(*e.RetryAfterMs)), 10))
		}
		u.render(c, status, errorPage(u.bareLayout(c, "Error"), status, "This cannot be done", e.Sentence()))
	default:
		u.internalError(c, err)
	}
}

// audit records what a dashboard request changed, after the change was committed in a
// transaction of its own (holds, webhooks, sessions, tenants; definitions, overrides and resets
// audit inside their own transaction: limiter.AuditTx). The change
// stands if the entry cannot be written, so that failure is logged at error level, naming the
// entry, and never dropped silently; it reports whether the entry was written. ctx is the
// request's, or the bootstrap's for an operator created at start (requestID ""); a client that
// hangs up after the change was made does not cancel its entry.
func (u *UI) audit(ctx context.Context, requestID string, tenantID *int64, actor, action, target, detail string) bool {
	err := u.tenants.Audit(context.WithoutCancel(ctx), tenantID, actor, action, target, detail)
	if err != nil {
		u.log.ErrorContext(ctx, "audit log write failed", "request_id", requestID,
			"action", action, "target", target, "actor", actor, "err", err)
	}
	return err == nil
}

// auditRequest is audit for the change c made.
func (u *UI) auditRequest(c *gin.Context, tenantID *int64, actor, action, target, detail string) bool {
	return u.audit(c.Request.Context(), c.GetString(httpserver.RequestIDKey), tenantID, actor, action, target, detail)
}

// internalError logs the cause with the request ID and shows a page that says nothing more: 503
// with Retry-After when the cause is the database out of reach (apperr.Unavailable, as the API
// answers it), so that health checks and alerts tell an outage from a defect; 500 otherwise.
func (u *UI) internalError(c *gin.Context, err error) {
	id := c.GetString(httpserver.RequestIDKey)
	status, title, detail := http.StatusInternalServerError, "Something went wrong", "An internal error occurred (request "+id+"). It has been logged."
	level := slog.LevelError
	if apperr.From(err).Code == apperr.Unavailable {
		// The database out of reach, or the request's time spent waiting for it.
		status, title, detail = http.StatusServiceUnavailable, "Service unavailable",
			"Sluice could not reach its database in time (request "+id+"). Try again shortly."
		c.Header("Retry-After", "5")
	}
	if errors.Is(err, context.Canceled) && c.Request.Context().Err() != nil {
		level = slog.LevelInfo // the browser went away: no one reads this answer, and nothing is wrong
	}
	u.log.Log(c.Request.Context(), level, "dashboard error", "request_id", id, "path", c.FullPath(), "status", status, "err", err)
	var buf bytes.Buffer
	_ = errorPage(u.bareLayout(c, "Error"), status, title, detail).Render(c.Request.Context(), &buf)
	c.Header("Cache-Control", "no-store")
	c.Data(status, "text/html; charset=utf-8", buf.Bytes())
	c.Abort()
}

// NotFound renders the dashboard's 404 page; pass it to httpserver.Options.NotFound.
func (u *UI) NotFound(c *gin.Context) {
	u.render(c, http.StatusNotFound, errorPage(u.bareLayout(c, "Not found"), http.StatusNotFound, "Not found",
		"There is nothing here, or you are not allowed to see it."))
	c.Abort()
}

func (u *UI) forbidden(c *gin.Context, detail string) {
	u.render(c, http.StatusForbidden, errorPage(u.bareLayout(c, "Forbidden"), http.StatusForbidden, "Forbidden", detail))
	c.Abort()
}

// redirect answers a form post (303 See Other, so the browser follows with a GET).
func redirect(c *gin.Context, to string) {
	c.Redirect(http.StatusSeeOther, to)
	c.Abort()
}

// flashes are the fixed messages a redirect may ask the next page to show (?msg=…), so a URL
// can never inject arbitrary text into a page.
var flashes = map[string]string{
	"tenant-created":      "Tenant created.",
	"limit-saved":         "Limit saved.",
	"key-reset":           "Key reset: it is full again.",
	"all-reset":           "Every key of this limit was reset.",
	"limit-enforced":      "The limit is enforced now.",
	"override-saved":      "Override saved. It applies from the next decision.",
	"override-deleted":    "Override deleted.",
	"key-revoked":         "API key revoked. It stops working immediately.",
	"key-already-revoked": "That API key was revoked before: nothing changed.",
	"limit-deleted":       "Limit deleted.",
	"hold-released":       "Hold released: everything it held was given back.",
	"lease-released":      "Lease released: its slot is free.",
	"welcome":             "Welcome to Sluice. Create a tenant to get started.",
	"logged-out":          "You are logged out.",
	"captcha-saved":       "Captcha settings saved.",
	"session-revoked":     "Session revoked. It is no longer authorized.",
	"tenant-renamed":      "Tenant renamed.",
	"plan-saved":          "Plan saved: it applies at once.",
	"tenant-suspended":    "Tenant suspended: its API keys are refused and its members' dashboard is read-only.",
	"tenant-resumed":      "Tenant resumed: its API keys work again.",
	"webhook-deleted":     "Webhook endpoint deleted, with its delivery log.",
	"webhook-test":        "Test event queued: it appears below within seconds.",
	"webhook-resent":      "Delivery queued again.",
	"role-changed":        "Role changed. It applies from the member's next request.",
	"member-removed":      "User removed. Their sessions have ended.",
	"member-disabled":     "User disabled: they cannot log in, and their sessions have ended.",
	"member-enabled":      "User enabled: they can log in again.",
	"invite-revoked":      "Invitation revoked: its link no longer works.",
	"password-changed":    "Password changed. Your other sessions have ended.",
	"tenant-deleted":      "Tenant deleted, with every row it owned.",
}

func flash(c *gin.Context) string { return flashes[c.Query("msg")] }
