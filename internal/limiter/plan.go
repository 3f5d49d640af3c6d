package limiter

import (
	"context"
	"fmt"
	"strconv"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// Plans: a tenant's decision rate is a system limit (PlanRequest) that rides in each of the
// tenant's decisions; its counts of limits and overrides are checked in the transaction that
// creates one (countQuota), so that two concurrent creations cannot both take the last place.

// PlanLimitName is the system limit of tenants' decision rates, keyed by tenant ID.
const PlanLimitName = "plan.decisions"

// PlanRequest is the request that spends n of a tenant's plan decision rate (perSecond, with a
// burst of PlanBurst), to add to the tenant's own batch (Request.System); nil when the plan sets
// no rate. n must not exceed the burst, or the engine refuses the batch with
// count_exceeds_capacity: the caller answers such a batch itself.
func PlanRequest(tenantID int64, perSecond float64, n int) *Request {
	if perSecond <= 0 {
		return nil
	}
	burst := PlanBurst(perSecond)
	return &Request{Name: PlanLimitName, Key: strconv.FormatInt(tenantID, 10), Count: float64(n), System: true,
		Config: &Definition{Kind: TokenBucket, Rate: perSecond, Period: 1000, Capacity: &burst}}
}

// quotaMax looks up the tenant's max of quota before a creation (0: no limit, or no plans).
func (e *Engine) quotaMax(ctx context.Context, tenantID int64, quota string) (int64, error) {
	if e.quotas == nil {
		return 0, nil
	}
	return e.quotas.MaxCount(ctx, tenantID, quota)
}

// countQuota runs in the creating transaction: it refuses a creation past max (what names the
// quota in the message) and otherwise returns a func to call once the row is created.
func (e *Engine) countQuota(tx *gorm.DB, tenantID int64, quota, what string, max int64, count func() (int64, error)) (after func() error, err error) {
	if max <= 0 {
		return func() error { return nil }, nil
	}
	n, err := count()
	if err != nil {
		return nil, err
	}
	if n >= max {
		return nil, apperr.QuotaReached(what, max)
	}
	return func() error { return e.quotas.QuotaUsed(tx, tenantID, quota, n+1, max) }, nil
}

// CountDefinitions is the number of a tenant's stored limits (its use of the limits quota).
func (e *Engine) CountDefinitions(ctx context.Context, tenantID int64) (int64, error) {
	var n int64
	err := e.db.ReadOnly(ctx, func(tx *gorm.DB) error { return countDefinitions(tx, tenantID, &n) })
	return n, err
}

// CountOverrides is the number of a tenant's overrides over all its limits.
func (e *Engine) CountOverrides(ctx context.Context, tenantID int64) (int64, error) {
	var n int64
	err := e.db.ReadOnly(ctx, func(tx *gorm.DB) error { return countOverrides(tx, tenantID, &n) })
	return n, err
}

func countDefinitions(tx *gorm.DB, tenantID int64, n *int64) error {
	return tx.Model(&definitionRow{}).Where("tenant_id = ?", tenantID).Count(n).Error
}

func countOverrides(tx *gorm.DB, tenantID int64, n *int64) error {
	return tx.Model(&overrideRow{}).Where("tenant_id = ?", tenantID).Count(n).Error
}

// PlanBurst is how many decisions a plan of perSecond admits at once: one second's worth, and at
// least one (a plan below one per second, "one per minute", admits one, then one per 60 s).
func PlanBurst(perSecond float64) float64 { return max(perSecond, 1) }

// PlanAvailable is how many decisions a tenant's plan rate of perSecond admits right now (its
// bucket computed to now, nothing written); 0 when the plan sets no rate.
func (e *Engine) PlanAvailable(ctx context.Context, tenantID int64, perSecond float64) (float64, error) {
	req := PlanRequest(tenantID, perSecond, 1)
	if req == nil {
		return 0, nil
	}
	def := req.Config.Normalized()
	var v float64
	err := e.db.ReadOnly(db.WithPurpose(ctx, db.PurposeDecision), func(tx *gorm.DB) error {
		now, err := e.nowIn(tx)
		if err != nil {
			return err
		}
		states, err := loadStates(tx, SystemTenant, def, req.Name, req.Key, []int{0})
		if err != nil {
			return err
		}
		v, _ = algo.Peek(def, states[0], now, algo.Origin(def, SystemTenant, req.Name, req.Key))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("limiter: plan available: %w", err)
	}
	return v, nil
}
