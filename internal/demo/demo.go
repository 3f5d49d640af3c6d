// Package demo serves /demo: a small example tenant page that runs the anonymous-session flow
// of DESIGN §6 in a browser, end to end, against the server it runs in.
//
// The page plays the tenant's website: it makes a random 128-bit session ID, renders the
// vendored ALTCHA widget pointing at GET /v1/captcha/challenge with the demo tenant's
// publishable key, and hands the solved payload to its "backend". The backend (this package's
// /demo/api/* routes) plays the tenant's server: it holds the demo tenant's secret key in memory
// and calls POST /v1/sessions/authorize and POST /v1/limits/demo.action/limit {"session"} with
// it — in process, through the same router a real tenant reaches over HTTP, so the demo
// exercises exactly the public API and nothing else.
//
// The demo is served only when SLUICE_DEMO=true. On first use it creates its own tenant, named
// "demo", and records in the settings that it did (so it never touches a tenant it did not
// create: an operator's tenant of that name makes the demo unavailable instead); it adds the
// server's own origins to the tenant's allowed origins (it never removes any), defines the limit
// "demo.action" (a token bucket of 3 per minute) unless the tenant already has one, and makes
// sure its two keys exist: a publishable one ("demo page") and a secret one ("demo backend"),
// derived from the server's root secret, so that every instance and every restart uses the same
// two keys and the database holds only their hashes. Every change it makes is audited as "demo"
// (the creation of its tenant in the tenant's log and in the server's security log, as the CLI
// and the dashboard audit theirs). Revoking either key from the dashboard switches the demo off
// until its tenant is deleted (or the root secret replaced). Deleting the demo tenant does not
// switch it off: the next request (in this process or after a restart) finds it gone, creates a
// new one, records that one as the demo's, and sets it up as on first use, with new keys (the
// tenant's ID is part of their derivation), so a revoked key never comes back.
package demo

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/httpserver"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// TenantName is the demo tenant; ActionLimit the limit its page spends.
const (
	TenantName  = "demo"
	ActionLimit = "demo.action"
)

// actionDefinition is ActionLimit's definition: small enough that a visitor sees a refusal
// after a few clicks.
var actionDefinition = map[string]any{"kind": "token bucket", "rate": 3, "period": 60_000}

// defaultDifficulty is used when the demo tenant's stored difficulty is out of bounds.
const defaultDifficulty = 50_000

// Tenants is what the demo needs of the tenant service.
type Tenants interface {
	Tenant(ctx context.Context, id int64) (tenants.Tenant, error)
	CreateTenant(ctx context.Context, name string) (tenants.Tenant, error)
	EnsureKey(ctx context.Context, tenantID int64, kind tenants.KeyKind, label, secret, actor string) (tenants.APIKey, error)
	HasKey(ctx context.Context, tenantID int64, secret string) (bool, error)
	KeysActive(ctx context.Context, tenantID int64, secrets ...string) (bool, error)
	UpdateCaptchaSettings(ctx context.Context, tenantID int64, origins []string, difficulty int, actor string) error
	Setting(ctx context.Context, key string) (string, error)
	SetSettingIfAbsent(ctx context.Context, key, value string) (string, error)
	DeleteSetting(ctx context.Context, key string) error
	Audit(ctx context.Context, tenantID *int64, actor, action, target, detail string) error
}

// actor names the demo in the audit log.
const actor = "demo"

// ownerSetting records the ID of the tenant the demo created.
const ownerSetting = "demo.tenant_id"

// ErrNotOurs is the demo's refusal to use a tenant named "demo" that it did not create.
var ErrNotOurs = errors.New(`demo: a tenant named "demo" exists that the demo did not create; the demo never touches it (rename that tenant, or turn SLUICE_DEMO off)`)

// Deps are what New needs.
type Deps struct {
	Tenants Tenants
	// KeySeed (32+ secret bytes, derived from the root secret) determines the demo's two keys.
	KeySeed []byte
	// Widget is the vendored web/static/altcha directory. The page uses its strict-CSP build
	// (external/altcha.min.js with external/altcha.css, and workers/sha.js as the
	// proof-of-work worker), because the self-contained build injects a <style> element and
	// starts its workers from blob: URLs, which the CSP refuses.
	Widget fs.FS
	// Origins the page is served from (BASE_URL); AddOrigin adds more once known.
	Origins []string
	Logger  *slog.Logger
}

//go:embed templates/page.html
var pageHTML string

//go:embed static
var staticFiles embed.FS

// Demo is the /demo surface.
type Demo struct {
	deps   Deps
	page   *template.Template
	assets map[string]asset
	cop    *http.CrossOriginProtection
	api    http.Handler // the router Register mounted the demo on

	mu       sync.Mutex
	origins  []string
	tenantID int64 // the demo tenant that pk, sk and synced are about (0: none yet)
	synced   bool  // origins are among the tenant's allowed origins
	pk, sk   string
}

type asset struct {
	content []byte
	etag    string
}

// New returns the demo; nothing touches the database before the first request.
func New(d Deps) (*Demo, error) {
	if d.Tenants == nil || d.Widget == nil || len(d.KeySeed) < 32 {
		return nil, errors.New("demo: missing dependency")
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	page, err := template.New("page").Parse(pageHTML)
	if err != nil {
		return nil, fmt.Errorf("demo: page template: %w", err)
	}
	x := &Demo{deps: d, page: page, assets: map[string]asset{}, cop: http.NewCrossOriginProtection()}
	for name, src := range map[string]struct {
		fsys fs.FS
		path string
	}{
		"demo.js":       {staticFiles, "static/demo.js"},
		"demo.css":      {staticFiles, "static/demo.css"},
		"altcha.min.js": {d.Widget, "external/altcha.min.js"},
		"altcha.css":    {d.Widget, "external/altcha.css"},
		"altcha-sha.js": {d.Widget, "workers/sha.js"},
	} {
		b, err := fs.ReadFile(src.fsys, src.path)
		if err != nil {
			return nil, fmt.Errorf("demo: asset %s: %w", name, err)
		}
		sum := sha256.Sum256(b)
		x.assets[name] = asset{content: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	for _, o := range d.Origins {
		x.AddOrigin(o)
	}
	return x, nil
}

// AddOrigin adds an origin the page is served from (e.g. the real address when listening on
// port 0); invalid ones are ignored. The tenant's allowed origins are updated on next use.
func (x *Demo) AddOrigin(origin string) {
	canon, err := tenants.NormalizeOrigins([]string{origin})
	if err != nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if !slices.Contains(x.origins, canon[0]) {
		x.origins = append(x.origins, canon[0])
		x.synced = false
	}
}

// Register mounts the demo's routes on r and keeps r to call the API in process. It makes Demo
// an httpserver.Surface.
func (x *Demo) Register(r *gin.Engine) {
	x.api = r
	r.GET("/demo", x.index)
	r.GET("/demo/static/:file", x.static)
	r.POST("/demo/api/authorize", x.authorize)
	r.POST("/demo/api/action", x.action)
}

type pageData struct {
	PublishableKey string
	ChallengePath  string
	Action         string
}

func (x *Demo) index(c *gin.Context) {
	if httpserver.AskedHead(c.Request) && !x.prepared(c.Request.Context()) {
		// HEAD changes nothing: it does not set the demo up (a link checker or a probe would
		// create its tenant, or create it again after an operator deleted it). What GET would
		// answer then is not known without doing so; the page's headers are.
		c.Header("Cache-Control", "no-store")
		c.Header("Content-Type", "text/html; charset=utf-8")
		c.Status(http.StatusOK)
		return
	}
	pk, _, err := x.ensure(c.Request.Context())
	if err != nil {
		x.unavailable(c, err)
		return
	}
	var b bytes.Buffer
	if err := x.page.Execute(&b, pageData{PublishableKey: pk, ChallengePath: "/v1/captcha/challenge", Action: ActionLimit}); err != nil {
		x.unavailable(c, err)
		return
	}
	c.Header("Cache-Control", "no-store") // the page carries this process's publishable key
	c.Data(http.StatusOK, "text/html; charset=utf-8", b.Bytes())
}

func (x *Demo) static(c *gin.Context) {
	a, ok := x.assets[c.Param("file")]
	if !ok {
		c.String(http.StatusNotFound, "404 page not found")
		return
	}
	c.Header("Cache-Control", "no-cache")
	c.Header("ETag", a.etag)
	http.ServeContent(c.Writer, c.Request, c.Param("file"), time.Time{}, bytes.NewReader(a.content))
}

func (x *Demo) unavailable(c *gin.Context, err error) {
	x.deps.Logger.ErrorContext(c.Request.Context(), "demo unavailable", "request_id", c.GetString(httpserver.RequestIDKey), "err", err)
	c.String(http.StatusServiceUnavailable, "the demo is unavailable right now; see the server log")
}

// prepared reports whether ensure would change nothing: the demo's tenant is set up and exists.
func (x *Demo) prepared(ctx context.Context) bool {
	x.mu.Lock()
	id, ready := x.tenantID, x.sk != "" && x.synced
	x.mu.Unlock()
	if !ready {
		return false
	}
	_, err := x.deps.Tenants.Tenant(ctx, id)
	return err == nil
}

// ensure prepares the demo tenant (see the package documentation) and returns the keys.
//
// Once prepared, each call still checks that the tenant exists and its keys are not revoked
// (reads outside the lock): a deleted tenant took the keys with it, so the demo drops what it
// knew and prepares a new tenant, instead of handing out keys that no longer exist; a revoked key
// switches the demo off, as it does before the demo is prepared (EnsureKey refuses it).
func (x *Demo) ensure(ctx context.Context) (pk, sk string, err error) {
	x.mu.Lock()
	id, pk, sk, ready := x.tenantID, x.pk, x.sk, x.sk != "" && x.synced
	x.mu.Unlock()
	if ready {
		_, err := x.deps.Tenants.Tenant(ctx, id)
		if err == nil {
			switch active, err := x.deps.Tenants.KeysActive(ctx, id, pk, sk); {
			case err != nil:
				return "", "", fmt.Errorf("demo: keys: %w", err)
			case !active:
				return "", "", fmt.Errorf("demo: a key of the demo was revoked: %w", tenants.ErrKeyRevoked)
			}
			return pk, sk, nil
		}
		if !errors.Is(err, tenants.ErrNotFound) {
			return "", "", fmt.Errorf("demo: tenant: %w", err)
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.api == nil {
		return "", "", errors.New("demo: not registered on a router")
	}
	t, err := x.tenant(ctx)
	if err != nil {
		return "", "", err
	}
	if t.ID != x.tenantID { // first use, or the tenant was deleted (and its keys with it)
		x.tenantID, x.pk, x.sk, x.synced = t.ID, "", "", false
	}
	if x.sk == "" {
		pk, sk, err := x.keys(ctx, t.ID)
		if err != nil {
			return "", "", err
		}
		if _, err := x.deps.Tenants.EnsureKey(ctx, t.ID, tenants.KindPublishable, "demo page", pk, actor); err != nil {
			return "", "", fmt.Errorf("demo: publishable key: %w", err)
		}
		if _, err := x.deps.Tenants.EnsureKey(ctx, t.ID, tenants.KindSecret, "demo backend", sk, actor); err != nil {
			return "", "", fmt.Errorf("demo: secret key: %w", err)
		}
		if err := x.defineAction(ctx, sk); err != nil {
			return "", "", err
		}
		x.pk, x.sk = pk, sk
	}
	if !x.synced {
		origins := slices.Clone(t.AllowedOrigins)
		for _, o := range x.origins {
			if !slices.Contains(origins, o) {
				origins = append(origins, o)
			}
		}
		difficulty := t.CaptchaDifficulty
		if difficulty < tenants.MinCaptchaDifficulty || difficulty > tenants.MaxCaptchaDifficulty {
			difficulty = defaultDifficulty
		}
		if len(origins) != len(t.AllowedOrigins) || difficulty != t.CaptchaDifficulty {
			if err := x.deps.Tenants.UpdateCaptchaSettings(ctx, t.ID, origins, difficulty, actor); err != nil {
				return "", "", fmt.Errorf("demo: captcha settings: %w", err)
			}
		}
		x.synced = true
	}
	return x.pk, x.sk, nil
}

// tenant returns the tenant the demo created, creating it on first use and after that tenant was
// deleted. Two instances starting at once agree: only one creation of the name succeeds, and the
// other reads its record.
func (x *Demo) tenant(ctx context.Context) (tenants.Tenant, error) {
	owned := func() (tenants.Tenant, error) {
		v, err := x.deps.Tenants.Setting(ctx, ownerSetting)
		if err != nil {
			return tenants.Tenant{}, err
		}
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return tenants.Tenant{}, fmt.Errorf("demo: setting %s = %q: %w", ownerSetting, v, err)
		}
		return x.deps.Tenants.Tenant(ctx, id)
	}
	t, err := owned()
	if !errors.Is(err, tenants.ErrNotFound) {
		return t, err
	}
	t, err = x.deps.Tenants.CreateTenant(ctx, TenantName)
	if errors.Is(err, tenants.ErrConflict) {
		if t, err := owned(); err == nil { // another instance created it a moment ago
			return t, nil
		}
		return tenants.Tenant{}, ErrNotOurs
	}
	if err != nil {
		return tenants.Tenant{}, fmt.Errorf("demo: tenant: %w", err)
	}
	id := strconv.FormatInt(t.ID, 10)
	if err := x.recordOwner(ctx, id); err != nil {
		return tenants.Tenant{}, fmt.Errorf("demo: record its tenant: %w", err)
	}
	// In the tenant's log and in the security log, as the CLI and the dashboard audit a creation.
	for _, in := range []*int64{&t.ID, nil} {
		if err := x.deps.Tenants.Audit(ctx, in, actor, "tenant.create", "tenant:"+id, "created by the demo (SLUICE_DEMO=true)"); err != nil {
			return tenants.Tenant{}, fmt.Errorf("demo: audit: %w", err)
		}
	}
	return t, nil
}

// recordOwner records id, the tenant the demo has just created, as the demo's. A record already
// there names a tenant that no longer exists (tenant found none under it just before creating
// one, and no other tenant of the name can have been created since): it is replaced, or the demo
// would read it on its next start, find no tenant, fail to create the name it holds, and refuse
// its own tenant as not its own.
func (x *Demo) recordOwner(ctx context.Context, id string) error {
	got, err := x.deps.Tenants.SetSettingIfAbsent(ctx, ownerSetting, id)
	if err != nil || got == id {
		return err
	}
	if err := x.deps.Tenants.DeleteSetting(ctx, ownerSetting); err != nil {
		return err
	}
	if got, err = x.deps.Tenants.SetSettingIfAbsent(ctx, ownerSetting, id); err == nil && got != id {
		err = fmt.Errorf("%s is %s meanwhile, not %s", ownerSetting, got, id)
	}
	return err
}

// keys are the demo's publishable and secret keys for its tenant tenantID. They derive from the
// root secret and the tenant's ID, so that a tenant created after the deletion of the last one
// (tenant IDs are never reused) has keys of its own: a key the operator revoked, and deleted
// with its tenant, never comes back. A tenant that has the keys of the builds before (derived
// from the root secret alone) keeps them, revoked or not: the revocation that switched its demo
// off still does.
func (x *Demo) keys(ctx context.Context, tenantID int64) (pk, sk string, err error) {
	legacy := tenants.DeriveKey(tenants.KindSecret, x.seed("secret"))
	switch had, err := x.deps.Tenants.HasKey(ctx, tenantID, legacy); {
	case err != nil:
		return "", "", fmt.Errorf("demo: keys: %w", err)
	case had:
		return tenants.DeriveKey(tenants.KindPublishable, x.seed("publishable")), legacy, nil
	}
	of := " of tenant " + strconv.FormatInt(tenantID, 10)
	return tenants.DeriveKey(tenants.KindPublishable, x.seed("publishable"+of)),
		tenants.DeriveKey(tenants.KindSecret, x.seed("secret"+of)), nil
}

// seed is the secret that determines one of the demo's keys.
func (x *Demo) seed(purpose string) []byte {
	m := hmac.New(sha256.New, x.deps.KeySeed)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// defineAction creates ActionLimit unless the tenant has it (an operator may have tuned it).
func (x *Demo) defineAction(ctx context.Context, sk string) error {
	res := x.call(ctx, nil, http.MethodGet, "/v1/limits/"+ActionLimit, sk, nil)
	switch res.status {
	case http.StatusOK:
		return nil
	case http.StatusNotFound:
	default:
		return fmt.Errorf("demo: read %s: HTTP %d: %s", ActionLimit, res.status, res.body.Bytes())
	}
	body, _ := json.Marshal(actionDefinition)
	if res := x.call(ctx, nil, http.MethodPut, "/v1/limits/"+ActionLimit, sk, body); res.status != http.StatusOK {
		return fmt.Errorf("demo: define %s: HTTP %d: %s", ActionLimit, res.status, res.body.Bytes())
	}
	return nil
}

// sessionBody is what the page posts to the demo backend.
type sessionBody struct {
	SessionID string `json:"sessionId"`
	Payload   string `json:"payload,omitempty"`
}

// authorize is the tenant backend's half of the captcha: hand the solved payload to Sluice.
func (x *Demo) authorize(c *gin.Context) {
	body, sk, ok := x.backend(c)
	if !ok {
		return
	}
	raw, _ := json.Marshal(map[string]string{"sessionId": body.SessionID, "payload": body.Payload})
	x.relay(c, x.call(c.Request.Context(), c.Request, http.MethodPost, "/v1/sessions/authorize", sk, raw))
}

// action is a rate-limited operation keyed by the anonymous session.
func (x *Demo) action(c *gin.Context) {
	body, sk, ok := x.backend(c)
	if !ok {
		return
	}
	raw, _ := json.Marshal(map[string]string{"session": body.SessionID})
	x.relay(c, x.call(c.Request.Context(), c.Request, http.MethodPost, "/v1/limits/"+ActionLimit+"/limit", sk, raw))
}

// backend checks a page request (same origin only, a small JSON body) and returns the keys.
func (x *Demo) backend(c *gin.Context) (sessionBody, string, bool) {
	var body sessionBody
	if err := x.cop.Check(c.Request); err != nil {
		c.JSON(http.StatusForbidden, gin.H{"code": "forbidden", "detail": "cross-origin request refused"})
		return body, "", false
	}
	dec := json.NewDecoder(http.MaxBytesReader(c.Writer, c.Request.Body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		if tooLarge := new(http.MaxBytesError); errors.As(err, &tooLarge) {
			c.JSON(http.StatusRequestEntityTooLarge, gin.H{"code": "payload_too_large", "detail": "the body is over 16 KiB"})
			return body, "", false
		}
		c.JSON(http.StatusBadRequest, gin.H{"code": "invalid_request", "detail": "the body must be {\"sessionId\", \"payload\"?}"})
		return body, "", false
	}
	_, sk, err := x.ensure(c.Request.Context())
	if err != nil {
		x.unavailable(c, err)
		return body, "", false
	}
	return body, sk, true
}

// result is a recorded in-process API response.
type result struct {
	status int
	header http.Header
	body   bytes.Buffer
}

func (r *result) Header() http.Header { return r.header }
func (r *result) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
func (r *result) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

// call sends one request to the API in process, with the demo's secret key, on behalf of the
// browser request from (when not nil) so that the API sees the same client address.
func (x *Demo) call(ctx context.Context, from *http.Request, method, path, sk string, body []byte) *result {
	res := &result{header: http.Header{}}
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		res.status = http.StatusInternalServerError
		return res
	}
	req.Header.Set("Authorization", "Bearer "+sk)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if from != nil {
		req.RemoteAddr = from.RemoteAddr
		req.Host = from.Host
		for _, h := range []string{"X-Forwarded-For", "X-Real-Ip"} {
			if v := from.Header.Values(h); len(v) > 0 {
				req.Header[h] = v
			}
		}
	}
	x.api.ServeHTTP(res, req)
	if res.status == 0 {
		res.status = http.StatusOK
	}
	return res
}

// relay answers the page with the API's response, as a tenant's backend might pass it on.
func (x *Demo) relay(c *gin.Context, res *result) {
	for _, h := range []string{"Retry-After", "RateLimit", "RateLimit-Policy"} {
		if v := res.header.Get(h); v != "" {
			c.Header(h, v)
		}
	}
	c.Header("Cache-Control", "no-store")
	ct := res.header.Get("Content-Type")
	if ct == "" {
		ct = "application/json"
	}
	c.Data(res.status, ct, res.body.Bytes())
}
