package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// LeaseResponse is an extended lease: its handle and its new expiry (ms since the epoch).
type LeaseResponse struct {
	LeaseID   string `json:"leaseId"`
	ExpiresAt int64  `json:"expiresAt"`
}

// releaseLease ends a concurrency lease (acquired by a limit decision); its slot is free at once.
func (s *Server) releaseLease(c *gin.Context) {
	if err := s.engine.ReleaseLease(c.Request.Context(), tenantOf(c).TenantID, c.Param("id")); err != nil {
		writeProblem(c, s.log, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// extendLease renews a lease by its limit's leaseTtl from now.
func (s *Server) extendLease(c *gin.Context) {
	id := c.Param("id")
	exp, err := s.engine.ExtendLease(c.Request.Context(), tenantOf(c).TenantID, id)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, LeaseResponse{LeaseID: id, ExpiresAt: exp})
}
