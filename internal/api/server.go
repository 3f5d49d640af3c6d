// Package api is Sluice's JSON API /v1 on Gin: tenants authenticate with secret keys and define,
// consume, check and reset limits. Handlers are thin: decode, validate, call one service method,
// render; errors become RFC 9457 problems in ProblemFor.
package api

import (
	"context"
	"log/slog"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/httpx"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// RequestIDKey is where the request ID lives in the gin context.
const RequestIDKey = httpx.RequestIDKey

// Authenticator resolves a secret API key to its tenant.
type Authenticator interface {
	Authenticate(ctx context.Context, secret string, kind tenants.KeyKind) (tenants.Principal, error)
}

// Auditor records changes in the tenant's audit log.
type Auditor interface {
	Audit(ctx context.Context, tenantID *int64, actor, action, target, detail string) error
}

// SessionChecker tells whether an anonymous session has solved the captcha.
type SessionChecker interface {
	IsAuthorized(ctx context.Context, tenantID int64, sessionID string) (bool, error)
}

// Server holds the API's dependencies.
type Server struct {
	engine   *limiter.Engine
	auth     Authenticator
	audit    Auditor
	sessions SessionChecker
	log      *slog.Logger
	extra    []func(public, authed *gin.RouterGroup)
}

// Deps are what New needs. Sessions may be nil: then every session is unauthorized.
type Deps struct {
	Engine   *limiter.Engine
	Auth     Authenticator
	Audit    Auditor
	Sessions SessionChecker
	Logger   *slog.Logger
	// Extra registers routes owned by other packages (the captcha) under /v1, public or authed.
	Extra []func(public, authed *gin.RouterGroup)
}

// New returns the API server.
func New(d Deps) *Server {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{engine: d.Engine, auth: d.Auth, audit: d.Audit, sessions: d.Sessions, log: d.Logger, extra: d.Extra}
}

// tenantOf is the authenticated tenant; the tenant never comes from the request itself.
func tenantOf(c *gin.Context) tenants.Principal {
	p, _ := c.Get(principalKey)
	pr, _ := p.(tenants.Principal)
	return pr
}

const principalKey = "principal"

// Principal returns the authenticated principal, for routes other packages register.
func Principal(c *gin.Context) tenants.Principal { return tenantOf(c) }

// Fail renders err as a problem, for routes other packages register.
func (s *Server) Fail(c *gin.Context, err error) { writeProblem(c, s.log, err) }
