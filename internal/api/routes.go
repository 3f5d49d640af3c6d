package api

import (
	"errors"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
)

// Register mounts every route of the API. This is the complete list; the OpenAPI document is
// checked against it by a test.
func (s *Server) Register(r *gin.Engine) {
	v1 := r.Group("/v1", s.checkQuery)
	v1.GET("/openapi.json", s.openAPI) // public: the contract holds no tenant data
	// Public, authenticated by a publishable key in the query; CORS for the tenant's origins.
	v1.GET("/captcha/challenge", s.anon.challenge)
	v1.OPTIONS("/captcha/challenge", s.anon.preflight)

	authed := v1.Group("", s.authenticate) // secret keys
	authed.GET("/limits", s.listDefinitions)
	authed.PUT("/limits/:name", s.putDefinition)
	authed.GET("/limits/:name", s.getDefinition)
	authed.DELETE("/limits/:name", s.deleteDefinition)
	authed.POST("/limits/:name/limit", s.limitOne)
	authed.POST("/limits/:name/check", s.checkOne)
	authed.POST("/limits/:name/reset", s.reset)
	authed.POST("/limits/:name/refund", s.refund)
	authed.GET("/limits/:name/value", s.value)
	authed.PUT("/limits/:name/overrides", s.putOverride)
	authed.GET("/limits/:name/overrides", s.listOverrides)
	authed.DELETE("/limits/:name/overrides", s.deleteOverride)
	authed.POST("/limit", s.limitBatch)
	authed.POST("/check", s.checkBatch)
	authed.POST("/decisions", s.decideBulk)
	authed.POST("/holds", s.hold)
	authed.POST("/holds/:id/settle", s.settleHold)
	authed.DELETE("/holds/:id", s.releaseHold)
	authed.POST("/leases/:id/release", s.releaseLease)
	authed.POST("/leases/:id/extend", s.extendLease)
	authed.POST("/sessions/authorize", s.anon.authorize)
	authed.GET("/sessions/:sessionId", s.anon.session)
	authed.DELETE("/sessions/:sessionId", s.anon.revoke)
	authed.POST("/webhooks", s.createWebhook)
	authed.GET("/webhooks", s.listWebhooks)
	authed.DELETE("/webhooks/:id", s.deleteWebhook)
	authed.POST("/webhooks/:id/test", s.testWebhook)
	authed.GET("/webhooks/:id/deliveries", s.webhookDeliveries)
	authed.POST("/webhooks/:id/deliveries/:deliveryId/resend", s.resendWebhookDelivery)

	// Public, outside /v1 where JWK sets are looked for: verifies session tokens offline.
	r.GET(jwksPath, s.anon.jwks)
	// Public: the OpenAPI document as a readable page.
	r.GET("/docs", s.docs)
}

// DecisionRoutes are the route patterns whose latency is a decision's latency (the metrics
// time them).
func DecisionRoutes() []string {
	return []string{"/v1/limits/:name/limit", "/v1/limits/:name/check", "/v1/limit", "/v1/check", "/v1/decisions"}
}

// jwksPath is where the session tokens' public keys are served (RFC 8615's well-known place).
const jwksPath = "/.well-known/jwks.json"

// IsAPIPath reports whether path belongs to the API.
func IsAPIPath(path string) bool { return path == "/v1" || strings.HasPrefix(path, "/v1/") }

// Owns reports whether path belongs to the API, whose errors are problems (httpserver.ErrorRenderer):
// /v1 and the JWK set beside it, which the OpenAPI document describes too.
func (s *Server) Owns(path string) bool { return IsAPIPath(path) || path == jwksPath }

// NotFound renders an unknown /v1 path as a problem.
func (s *Server) NotFound(c *gin.Context) {
	writeProblem(c, s.log, apperr.New(apperr.NotFound, "no such route"))
}

// MethodNotAllowed renders a known /v1 path asked with another method (gin has set Allow).
func (s *Server) MethodNotAllowed(c *gin.Context) {
	writeProblem(c, s.log, apperr.New(apperr.MethodNotAllowed, "this route does not answer "+c.Request.Method+"; see the Allow header"))
}

// InternalError renders a recovered panic on an API path (its stack is logged where it is
// recovered).
func (s *Server) InternalError(c *gin.Context) { writeProblem(c, s.log, errPanic) }

var errPanic = errors.New("recovered a panic")

// TooLarge renders a body over the server-wide cap on an API path.
func (s *Server) TooLarge(c *gin.Context) {
	writeProblem(c, s.log, apperr.New(apperr.PayloadTooLarge, "the request body is too large"))
}
