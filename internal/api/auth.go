package api

import (
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/tenants"
)

// authenticate requires "Authorization: Bearer <secret key>" and stores the principal.
func (s *Server) authenticate(c *gin.Context) {
	h := c.GetHeader("Authorization")
	scheme, secret, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		writeProblem(c, s.log, tenants.ErrUnauthorized)
		return
	}
	p, err := s.auth.Authenticate(c.Request.Context(), strings.TrimSpace(secret), tenants.KindSecret)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	c.Set(principalKey, p)
	c.Next()
}
