package api

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// LeaseResponse is an extended lease: its handle and its new expiry (ms since the epoch).
type LeaseResponse struct {
	LeaseID   string `json:"leaseId"`
	ExpiresAt int64  `json:"expiresAt"`
}

// releaseLease ends a concurrency lease (acquired by a limit decision); its slot is free at once.
func (s *Server) releaseLease(c *gin.Context) {
	s.closeWithoutBody(c, func(ctx context.Context) (any, error) {
		return nil, s.engine.ReleaseLease(ctx, tenantOf(c).TenantID, c.Param("id"))
	})
}

// extendLease renews a lease by its limit's leaseTtl from now.
func (s *Server) extendLease(c *gin.Context) {
	idemKey, err := idempotencyKeyOf(c)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	id := c.Param("id")
	s.answerCall(c, idemKey, nil, func(r any) limiter.Answer {
		return jsonAnswer(http.StatusOK, LeaseResponse{LeaseID: id, ExpiresAt: r.(int64)}, map[string]string{})
	}, func(ctx context.Context) (any, error) {
		return s.engine.ExtendLease(ctx, tenantOf(c).TenantID, id)
	})
}
