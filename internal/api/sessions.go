package api

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/captcha"
	"github.com/sluice-dev/sluice/internal/httpserver"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// Anonymous sessions (DESIGN §6): the captcha challenge a tenant's page fetches with its
// publishable key, the authorization its backend asks for with a secret key, reading and
// revoking sessions, and the JWK set that verifies session tokens offline.
//
// Their routes are in routes.go with every other route of the API.

// Defaults of the captcha's Deps.
const (
	// DefaultSessionTTL is how long a solved captcha authorizes a session: a day, so that a
	// visitor solves it about once per visit, and a leaked session ID is useful for one day at
	// most. Solving again renews it.
	DefaultSessionTTL = 24 * time.Hour
	// DefaultChallengeTTL is how long the widget has to solve a challenge and the tenant's
	// backend to submit it: a few minutes, so that solved challenges cannot be stockpiled.
	DefaultChallengeTTL = 5 * time.Minute

	// SystemTenantID is the tenant ID Sluice reserves for limits on its own endpoints; no real
	// tenant has it (IDs start at 1).
	SystemTenantID int64 = 0
	// ChallengeIPLimitName and ChallengeKeyLimitName are the system limits on challenges.
	ChallengeIPLimitName  = "system.captcha.ip"
	ChallengeKeyLimitName = "system.captcha.key"
)

// DefaultChallengeIPLimit admits a burst of 60 challenges per client IP and one per second after
// that: far more than a person reloading pages needs, far less than a challenge farm wants.
var DefaultChallengeIPLimit = limiter.Definition{Kind: limiter.TokenBucket, Rate: 60, Period: 60_000}

// DefaultChallengeKeyLimit admits 6000 challenges per minute per publishable key (a burst of
// 6000, 100 per second sustained), bounding what one key, public by design, can cost the
// server. The price (README): about a hundred addresses asking as fast as the per-IP limit lets
// them spend it, and the key's visitors get 429 until they stop.
var DefaultChallengeKeyLimit = limiter.Definition{Kind: limiter.TokenBucket, Rate: 6000, Period: 60_000}

// sessions serves the anonymous-session endpoints.
type sessions struct {
	d        Deps
	ipLimit  limiter.Definition
	keyLimit limiter.Definition
}

// newSessions checks the captcha part of d.
func newSessions(d Deps) (*sessions, error) {
	if d.Issuer == nil || d.Captcha == nil || d.Signer == nil || d.Auth == nil || d.Tenants == nil || d.Engine == nil {
		return nil, errors.New("api: sessions: missing dependency")
	}
	if d.SessionTTL == 0 {
		d.SessionTTL = DefaultSessionTTL
	}
	if d.ChallengeTTL == 0 {
		d.ChallengeTTL = DefaultChallengeTTL
	}
	if d.SessionTTL < 0 || d.SessionTTL > captcha.MaxSessionTTL {
		return nil, fmt.Errorf("api: sessions: session TTL %s outside (0, %s]", d.SessionTTL, captcha.MaxSessionTTL)
	}
	if d.ChallengeTTL < captcha.MinTTL || d.ChallengeTTL > captcha.MaxTTL {
		return nil, fmt.Errorf("api: sessions: challenge TTL %s outside [%s, %s]", d.ChallengeTTL, captcha.MinTTL, captcha.MaxTTL)
	}
	s := &sessions{d: d, ipLimit: DefaultChallengeIPLimit, keyLimit: DefaultChallengeKeyLimit}
	if d.ChallengeIPLimit != nil {
		s.ipLimit = *d.ChallengeIPLimit
	}
	if d.ChallengeKeyLimit != nil {
		s.keyLimit = *d.ChallengeKeyLimit
	}
	for _, def := range []limiter.Definition{s.ipLimit, s.keyLimit} {
		if err := def.Validate(); err != nil {
			return nil, fmt.Errorf("api: sessions: challenge limit: %w", err)
		}
	}
	return s, nil
}

// AuthorizeBody is the body of POST /v1/sessions/authorize.
type AuthorizeBody struct {
	SessionID *string `json:"sessionId"`
	Payload   *string `json:"payload"`
}

// AuthorizeResponse is the answer of a successful authorization.
type AuthorizeResponse struct {
	Authorized bool      `json:"authorized"`
	ExpiresAt  time.Time `json:"expiresAt"`
	// Token is an EdDSA JWT (iss = the server's base URL, aud = "sluice:tenant:<id>",
	// sub = SHA-256 hex of the session ID, exp = ExpiresAt), verifiable with the JWK set.
	Token string `json:"token"`
}

// SessionResponse describes an authorized session.
type SessionResponse struct {
	SessionID    string    `json:"sessionId"`
	Authorized   bool      `json:"authorized"`
	AuthorizedAt time.Time `json:"authorizedAt"`
	ExpiresAt    time.Time `json:"expiresAt"`
}

// fail answers err. The captcha package's errors carry their problem (code, field and a
// message that says which check failed, so that an integrator can fix it) as apperr data.
func (s *sessions) fail(c *gin.Context, err error) {
	if errors.Is(err, errAlreadyWritten) {
		return
	}
	writeProblem(c, s.d.Logger, err)
}

var (
	errNoPublishableKey   = apperr.New(apperr.Unauthorized, "pk must be the tenant's publishable key (pk_live_…); it is missing, malformed or revoked")
	errSecretKeyInBrowser = apperr.New(apperr.Forbidden, "secret keys must never reach a browser: use the tenant's publishable key (pk_live_…) here, and revoke this secret key if it was exposed")
	errOriginNotAllowed   = apperr.New(apperr.Forbidden, "this origin is not among the tenant's allowed origins for captcha challenges")
)

// challenge serves a challenge for one session of the tenant whose publishable key is pk.
// Requests without an Origin header (same-origin GETs, servers) are served: CORS protects
// browsers, the rate limits protect the server.
//
// A browser reads an answer only when it carries Access-Control-Allow-Origin, so every answer to
// an allowed origin carries it, refusals (400, 429, 503) included: the widget then shows the
// problem instead of an opaque network error. The exception is checkQuery's 400 for a malformed
// query, answered before the tenant, and so its origins, are known (a widget's bug, not a
// visitor's: it shows in the browser's developer tools). The per-IP refusal comes before the tenant is
// known (it spares the database a key lookup); it names no tenant, so any origin may read it.
func (s *sessions) challenge(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	c.Header("Vary", "Origin")
	t, _, err := s.challengeTenant(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	pk := c.Query("pk")
	if ok := s.spend(c, ChallengeKeyLimitName, s.keyLimit, "key:"+hashHex(pk), nil); !ok {
		return
	}
	if httpserver.AskedHead(c.Request) { // what GET would answer, without issuing a challenge
		c.Header("Content-Type", "application/json; charset=utf-8")
		c.Status(http.StatusOK)
		return
	}
	ch, err := s.d.Issuer.Create(t.ID, c.Query("sid"), clampDifficulty(t.CaptchaDifficulty), s.d.ChallengeTTL)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, ch)
}

// preflight answers the CORS preflight of a challenge request from an allowed origin.
func (s *sessions) preflight(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	c.Header("Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
	_, origin, err := s.challengeTenant(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	if origin == "" {
		s.fail(c, badRequest("", "a CORS preflight needs an Origin header"))
		return
	}
	h := c.Writer.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Methods", "GET, OPTIONS")
	// No credentials are ever allowed, so the usual request headers are safe to accept.
	h.Set("Access-Control-Allow-Headers", "Accept, Accept-Language, Content-Language, Content-Type")
	h.Set("Access-Control-Max-Age", "600")
	c.Status(http.StatusNoContent)
}

// challengeTenant checks what challenge and preflight share: the session ID, the client's IP
// budget, the publishable key and the Origin. It returns the tenant and the Origin to echo
// ("" when the request has none).
func (s *sessions) challengeTenant(c *gin.Context) (tenants.Tenant, string, error) {
	ctx := c.Request.Context()
	pk := c.Query("pk")
	// Syntax first, without the database: garbage costs nothing, and a secret key pasted into a
	// page is refused loudly whether or not it is valid, without revealing which.
	kind, err := tenants.ParseKey(pk)
	switch {
	case err == nil && kind == tenants.KindSecret:
		return tenants.Tenant{}, "", errSecretKeyInBrowser
	case err != nil:
		return tenants.Tenant{}, "", errNoPublishableKey
	}
	origin := c.GetHeader("Origin")
	if !s.spend(c, ChallengeIPLimitName, s.ipLimit, limiter.IPKeyPrefix+hashHex(clientIPKey(c.ClientIP())), func() {
		if origin != "" {
			c.Header("Access-Control-Allow-Origin", origin)
		}
	}) {
		return tenants.Tenant{}, "", errAlreadyWritten
	}
	p, err := s.d.Auth.Authenticate(ctx, pk, tenants.KindPublishable)
	if err != nil {
		if errors.Is(err, tenants.ErrUnauthorized) {
			return tenants.Tenant{}, "", errNoPublishableKey
		}
		return tenants.Tenant{}, "", err
	}
	t, err := s.d.Tenants.Tenant(ctx, p.TenantID)
	if err != nil {
		if errors.Is(err, tenants.ErrNotFound) {
			return tenants.Tenant{}, "", errNoPublishableKey
		}
		return tenants.Tenant{}, "", err
	}
	if origin != "" && !tenants.OriginAllowed(t.AllowedOrigins, origin) {
		return tenants.Tenant{}, "", errOriginNotAllowed
	}
	if origin != "" {
		c.Header("Access-Control-Allow-Origin", origin) // an allowed origin reads every answer from here on
	}
	// The preflight too: a browser sends it to the challenge's own URL, sid included, and the
	// document requires it of both.
	if err := captcha.ValidateSessionID(c.Query("sid")); err != nil {
		return tenants.Tenant{}, "", badRequest("sid", "sid must be the session ID: 16 to 128 characters of [A-Za-z0-9_-]")
	}
	return t, origin, nil
}

// errAlreadyWritten tells a caller that the response (a 429) has been written.
var errAlreadyWritten = errors.New("response written")

// spend takes one token of a system limit for key and reports whether the request may go on;
// otherwise it has written the 429 (or the 503 when the decision could not be made: the
// challenge endpoint fails closed like every decision).
// refused, when not nil, is called before a refusal is written (to set headers).
func (s *sessions) spend(c *gin.Context, name string, def limiter.Definition, key string, refused func()) bool {
	if refused == nil {
		refused = func() {}
	}
	decide := s.d.Engine.Limit
	if httpserver.AskedHead(c.Request) { // HEAD is safe: it asks what GET would be told, and spends nothing
		decide = s.d.Engine.Check
	}
	d, err := decide(c.Request.Context(), SystemTenantID, limiter.Request{Name: name, Key: key, Count: 1, Config: &def})
	if err != nil {
		refused()
		s.fail(c, err)
		return false
	}
	if d.OK {
		return true
	}
	refused()
	s.fail(c, &apperr.Error{Code: apperr.RateLimited, Message: "too many captcha challenges; retry later", Name: name, RetryAfterMs: d.RetryAfter})
	return false
}

// clientIPKey is what the per-IP challenge limit counts: the address for IPv4, the /64 for IPv6
// (one subscriber usually holds a whole /64).
func clientIPKey(ip string) string {
	parsed := net.ParseIP(ip)
	if parsed == nil || parsed.To4() != nil {
		return ip
	}
	return parsed.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// hashHex keeps client IPs and keys out of the limit state table.
func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

// clampDifficulty maps the stored difficulty into what the issuer accepts.
func clampDifficulty(d int) int {
	switch {
	case d < 1:
		return captcha.DefaultMaxNumber
	case d > captcha.MaxMaxNumber:
		return captcha.MaxMaxNumber
	}
	return d
}

// authorize verifies a solved challenge and authorizes the session it was issued for; each
// challenge authorizes exactly once.
func (s *sessions) authorize(c *gin.Context) {
	var body AuthorizeBody
	if err := decodeJSON(c, &body); err != nil {
		s.fail(c, err)
		return
	}
	switch {
	case body.SessionID == nil:
		s.fail(c, badRequest("sessionId", "sessionId is required"))
		return
	case body.Payload == nil || *body.Payload == "":
		s.fail(c, badRequest("payload", "payload is required: the widget's solved challenge"))
		return
	}
	ctx := c.Request.Context()
	tenantID := tenantOf(c).TenantID
	t, err := s.d.Tenants.Tenant(ctx, tenantID)
	if err != nil {
		s.fail(c, err)
		return
	}
	solved, err := s.d.Issuer.Verify(*body.Payload, tenantID, *body.SessionID, clampDifficulty(t.CaptchaDifficulty))
	if err != nil {
		s.fail(c, err)
		return
	}
	expiresAt, err := s.d.Captcha.Authorize(ctx, tenantID, *body.SessionID, solved, s.d.SessionTTL)
	if err != nil {
		s.fail(c, err)
		return
	}
	token, err := s.d.Signer.Token(tenantID, solved.SessionHash, expiresAt)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, AuthorizeResponse{Authorized: true, ExpiresAt: expiresAt.UTC(), Token: token})
}

// session returns the session's active authorization; an impossible ID is simply not found.
func (s *sessions) session(c *gin.Context) {
	id := c.Param("sessionId")
	info, err := s.d.Captcha.Session(c.Request.Context(), tenantOf(c).TenantID, id)
	if errors.Is(err, captcha.ErrInvalidSessionID) {
		err = captcha.ErrNotFound
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, SessionResponse{SessionID: id, Authorized: true, AuthorizedAt: info.AuthorizedAt.UTC(), ExpiresAt: info.ExpiresAt.UTC()})
}

// revoke ends the session's authorization: its decisions are refused (or fall back to the IP
// key) from the next request on.
func (s *sessions) revoke(c *gin.Context) {
	err := s.d.Captcha.Revoke(c.Request.Context(), tenantOf(c).TenantID, c.Param("sessionId"))
	if errors.Is(err, captcha.ErrInvalidSessionID) {
		err = captcha.ErrNotFound
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// jwks serves the public key set; it changes only when SECRET_KEY does, so caches may keep it
// for an hour.
func (s *sessions) jwks(c *gin.Context) {
	c.Header("Cache-Control", "public, max-age=3600")
	c.Header("Access-Control-Allow-Origin", "*")
	c.Data(http.StatusOK, "application/json", s.d.Signer.JWKS())
}
