package api

import (
	"errors"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/tenants"
)

var (
	errPublishableKey = apperr.New(apperr.Forbidden, "publishable keys can only fetch captcha challenges; use a secret key")
	// errBadKey is every refusal of a secret key: which of the three it was is not said.
	errBadKey = apperr.New(apperr.Unauthorized, "missing, malformed or revoked API key")
)

// authenticate requires "Authorization: Bearer <secret key>", once, and stores the principal.
// Two Authorization headers are refused, not read as the first: they may name two tenants, and
// which one a proxy or a client library put first is nobody's guess.
func (s *Server) authenticate(c *gin.Context) {
	hs := c.Request.Header["Authorization"] // the canonical name: no lookup by textproto
	if len(hs) != 1 {
		writeProblem(c, s.log, errBadKey)
		return
	}
	scheme, secret, ok := strings.Cut(hs[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		writeProblem(c, s.log, errBadKey)
		return
	}
	secret = strings.TrimSpace(secret)
	p, err := s.auth.Authenticate(c.Request.Context(), secret, tenants.KindSecret)
	if err != nil {
		// Only on the refusal path: a valid publishable key is known but not allowed here (it can
		// only fetch captcha challenges), which deserves 403 rather than 401.
		// A publishable key of a suspended tenant is refused as every key of it is (403
		// tenant_suspended).
		if errors.Is(err, tenants.ErrUnauthorized) {
			err = errBadKey.Wrap(err)
			_, perr := s.auth.Authenticate(c.Request.Context(), secret, tenants.KindPublishable)
			switch {
			case perr == nil:
				err = errPublishableKey
			case errors.Is(perr, tenants.ErrTenantSuspended):
				err = perr
			}
		}
		writeProblem(c, s.log, err)
		return
	}
	c.Set(principalKey, p)
	c.Next()
}
