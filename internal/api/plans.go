package api

import (
	"context"
	"fmt"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// PlanSource gives the plan in force for a tenant, cached: it is asked on every decision.
type PlanSource interface {
	PlanOf(ctx context.Context, tenantID int64) (tenants.Plan, error)
	// RateUsed is told what the plan's rate still admits after an admitted decision (it tells the
	// tenant's webhooks when that is little).
	RateUsed(ctx context.Context, tenantID int64, remaining, burst float64) error
}

// planUsed tells the plans what an admitted decision left of the plan's rate. A failure to tell
// is logged, never the decision's failure.
func (s *Server) planUsed(c *gin.Context, plan *limiter.Request, d limiter.Decision) {
	if plan == nil || !d.OK {
		return
	}
	if err := s.plans.RateUsed(c.Request.Context(), tenantOf(c).TenantID, d.Remaining, *plan.Config.Capacity); err != nil {
		s.log.WarnContext(c.Request.Context(), "plan: near-quota event not recorded", "err", err)
	}
}

// planGuard is the request that spends n decisions of the caller's plan decision rate, to add to
// the tenant's own batch so that both are decided in one transaction, all or nothing (a refusal by
// the plan consumes none of the tenant's limits, and a refusal by them none of the plan): nil when
// the plan sets no rate. A batch larger than the plan's burst can never pass, whatever it waits:
// that is 400 count_exceeds_capacity about its limits, as a count no limit can take is (a 429 with
// a Retry-After would have clients retry it for ever).
func (s *Server) planGuard(c *gin.Context, n int) (*limiter.Request, error) {
	if s.plans == nil {
		return nil, nil
	}
	tenantID := tenantOf(c).TenantID
	p, err := s.plans.PlanOf(c.Request.Context(), tenantID)
	if err != nil {
		return nil, err
	}
	if p.DecisionsPerSecond > 0 && float64(n) > limiter.PlanBurst(p.DecisionsPerSecond) {
		return nil, &apperr.Error{Code: apperr.CountExceedsCapacity, Field: "limits",
			Message: fmt.Sprintf("%d decisions in one request are more than this tenant's plan admits at once (%s per second), so no wait admits them: send fewer limits in one request, or have the plan raised",
				n, perSecondText(p.DecisionsPerSecond))}
	}
	return limiter.PlanRequest(tenantID, p.DecisionsPerSecond, n), nil
}

// planRefusal is tenant_quota_exceeded (429, with Retry-After) for a decision the plan refused
// (d), beside the tenant's own decisions in the same request (own): its wait is the longest of
// the plan's and of own's refusals, as a batch's is, since retrying sooner is refused again.
func planRefusal(plan *limiter.Request, d limiter.Decision, own []limiter.Decision) error {
	wait := d.RetryAfter
	for _, o := range own {
		if !o.OK && o.RetryAfter != nil && (wait == nil || *o.RetryAfter > *wait) {
			wait = o.RetryAfter
		}
	}
	return &apperr.Error{Code: apperr.TenantQuotaExceeded, RetryAfterMs: wait,
		Message: fmt.Sprintf("this tenant is over its plan's decision rate (%s per second); no limit of the tenant was consumed; retry later", perSecondText(plan.Config.Rate))}
}

// perSecondText is a plan's rate as every surface writes it (tenants.RateText).
func perSecondText(v float64) string { return tenants.RateText(v) }
