// Package api is Sluice's JSON API /v1 on Gin: tenants authenticate with secret keys and define,
// consume, check and reset limits. Handlers are thin: decode, validate, call one service method,
// render; errors become RFC 9457 problems in ProblemFor.
package api

import (
	"context"
	"log/slog"
	"time"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/captcha"
	"github.com/sluice-dev/sluice/internal/httpserver"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/webhooks"
)

// RequestIDKey is where the request ID lives in the gin context.
const RequestIDKey = httpserver.RequestIDKey

// Authenticator resolves a secret API key to its tenant.
type Authenticator interface {
	Authenticate(ctx context.Context, secret string, kind tenants.KeyKind) (tenants.Principal, error)
}

// Auditor records changes in the tenant's audit log: Audit in a transaction of its own, AuditTx
// inside the transaction that makes the change (definitions: the entry and its webhook event
// commit with the change or not at all).
type Auditor interface {
	Audit(ctx context.Context, tenantID *int64, actor, action, target, detail string) error
	AuditTx(tx *gorm.DB, tenantID *int64, actor, action, target, detail string) error
}

// SessionChecker tells whether an anonymous session has solved the captcha.
type SessionChecker interface {
	IsAuthorized(ctx context.Context, tenantID int64, sessionID string) (bool, error)
}

// TenantSource looks up a tenant's captcha settings.
type TenantSource interface {
	Tenant(ctx context.Context, id int64) (tenants.Tenant, error)
}

// Server holds the API's dependencies.
type Server struct {
	plans    PlanSource
	engine   *limiter.Engine
	auth     Authenticator
	audit    Auditor
	sessions SessionChecker
	anon     *sessions // the captcha and anonymous-session routes
	webhooks *webhooks.Service
	log      *slog.Logger
}

// Deps are what New needs; every field but the TTLs, the challenge limits and Logger is required.
type Deps struct {
	Engine  *limiter.Engine
	Auth    Authenticator // secret and publishable keys
	Audit   Auditor
	Tenants TenantSource
	// Plans gives each tenant's plan; nil: no plan bounds decisions.
	Plans PlanSource
	// Captcha stores authorized sessions; decisions by anonymous session ask it.
	Captcha *captcha.Store
	Issuer  *captcha.Issuer // makes and verifies challenges
	Signer  *captcha.Signer // signs session tokens
	// Webhooks owns the tenants' webhook endpoints and their delivery log.
	Webhooks *webhooks.Service
	Logger   *slog.Logger
	// SessionTTL is how long an authorization lasts (DefaultSessionTTL when 0).
	SessionTTL time.Duration
	// ChallengeTTL is how long a challenge stays valid (DefaultChallengeTTL when 0).
	ChallengeTTL time.Duration
	// ChallengeIPLimit and ChallengeKeyLimit override the defaults (tests use small ones).
	ChallengeIPLimit  *limiter.Definition
	ChallengeKeyLimit *limiter.Definition
}

// New checks d and returns the API server.
func New(d Deps) (*Server, error) {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	anon, err := newSessions(d)
	if err != nil {
		return nil, err
	}
	return &Server{engine: d.Engine, auth: d.Auth, audit: d.Audit, sessions: d.Captcha, anon: anon, webhooks: d.Webhooks, plans: d.Plans, log: d.Logger}, nil
}

// tenantOf is the authenticated tenant; the tenant never comes from the request itself.
func tenantOf(c *gin.Context) tenants.Principal {
	p, _ := c.Get(principalKey)
	pr, _ := p.(tenants.Principal)
	return pr
}

const principalKey = "principal"
