package tenants

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/sluice-dev/sluice/internal/apperr"
)

// A plan bounds what one tenant may use of a shared instance (noisy neighbours): its decision
// rate, enforced by the engine with a system limit in each of the tenant's decisions, and how
// many limits, API keys and overrides it may hold, each checked in the transaction that creates
// one (so two concurrent creations cannot both take the last place).

// The quotas of a plan, by the names the engine, the audit log and the webhook event use.
const (
	QuotaDecisions = "decisions"
	QuotaLimits    = "limits"
	QuotaKeys      = "keys"
	QuotaOverrides = "overrides"
)

// EventQuotaNear is the webhook event of a tenant whose use of a count quota has just reached
// NearQuotaPercent of its plan, or whose decisions left less than 100 - NearQuotaPercent percent
// of its plan's burst (RateUsed).
const EventQuotaNear = "tenant.quota_near"

// NearQuotaPercent is the share of a count quota past which a tenant is told it is near it.
const NearQuotaPercent = 80

// maxPlanValue bounds every number of a plan.
const maxPlanValue = 1_000_000_000

// Plan is what a tenant may use; 0 is no limit.
type Plan struct {
	DecisionsPerSecond float64
	MaxLimits          int64
	MaxKeys            int64
	MaxOverrides       int64
}

// PlanSettings is a tenant's own plan as an operator set it: a nil field takes the server's
// default plan.
type PlanSettings struct {
	DecisionsPerSecond *float64
	MaxLimits          *int64
	MaxKeys            *int64
	MaxOverrides       *int64
}

// TenantPlan is a tenant's plan: the one in force, and the settings it comes from.
type TenantPlan struct {
	Plan      Plan
	Own       PlanSettings
	UpdatedAt *time.Time // when an operator last set it; nil for the default plan
}

// QuotaNearEvent is the data of EventQuotaNear.
type QuotaNearEvent struct {
	Quota string `json:"quota"` // limits, keys, overrides or decisions
	Used  int64  `json:"used"`
	Max   int64  `json:"max"`
}

type planRow struct {
	TenantID           int64     `gorm:"column:tenant_id;primaryKey"`
	DecisionsPerSecond *float64  `gorm:"column:decisions_per_second"`
	MaxLimits          *int64    `gorm:"column:max_limits"`
	MaxKeys            *int64    `gorm:"column:max_keys"`
	MaxOverrides       *int64    `gorm:"column:max_overrides"`
	UpdatedAt          time.Time `gorm:"column:updated_at;autoUpdateTime:false"`
}

func (planRow) TableName() string { return "tenant_plans" }

type cachedPlan struct {
	plan    Plan
	expires time.Time
}

// WithDefaultPlan sets the plan of every tenant whose operator set no other (the zero Plan,
// without this option: no limits).
func WithDefaultPlan(p Plan) Option {
	return func(s *Service) { s.defaultPlan = p }
}

// DefaultPlan is the server's default plan.
func (s *Service) DefaultPlan() Plan { return s.defaultPlan }

func (s *Service) resolvePlan(own PlanSettings) Plan {
	p := s.defaultPlan
	if own.DecisionsPerSecond != nil {
		p.DecisionsPerSecond = *own.DecisionsPerSecond
	}
	if own.MaxLimits != nil {
		p.MaxLimits = *own.MaxLimits
	}
	if own.MaxKeys != nil {
		p.MaxKeys = *own.MaxKeys
	}
	if own.MaxOverrides != nil {
		p.MaxOverrides = *own.MaxOverrides
	}
	return p
}

func (r planRow) settings() PlanSettings {
	return PlanSettings{DecisionsPerSecond: r.DecisionsPerSecond, MaxLimits: r.MaxLimits, MaxKeys: r.MaxKeys, MaxOverrides: r.MaxOverrides}
}

// readPlan reads a tenant's plan in tx.
func (s *Service) readPlan(tx *gorm.DB, tenantID int64) (TenantPlan, error) {
	var rows []planRow
	if err := tx.Where("tenant_id = ?", tenantID).Limit(1).Find(&rows).Error; err != nil {
		return TenantPlan{}, err
	}
	if len(rows) == 0 {
		return TenantPlan{Plan: s.defaultPlan}, nil
	}
	at := utc(rows[0].UpdatedAt)
	return TenantPlan{Plan: s.resolvePlan(rows[0].settings()), Own: rows[0].settings(), UpdatedAt: &at}, nil
}

// TenantPlan returns a tenant's plan as stored now (the dashboard's view); ErrNotFound for an
// unknown tenant.
func (s *Service) TenantPlan(ctx context.Context, tenantID int64) (TenantPlan, error) {
	var out TenantPlan
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		if err := first(tx, &tenantRow{}, "id = ?", tenantID); err != nil {
			return err
		}
		var err error
		out, err = s.readPlan(tx, tenantID)
		return err
	})
	return out, wrap("tenant plan", err)
}

// PlanOf returns the plan in force for a tenant, from a cache kept as long as API keys are
// (a change through this Service applies at once; through another instance within that time),
// so that the decision path reads no plan from the database. The concurrent misses of one tenant
// share one read, as keys' lookups do (lookupShared): when a busy tenant's entry expires, every
// request in flight misses at once.
func (s *Service) PlanOf(ctx context.Context, tenantID int64) (Plan, error) {
	s.planMu.RLock()
	c, ok := s.planCache[tenantID]
	gen := s.planGen
	s.planMu.RUnlock()
	if ok && time.Now().Before(c.expires) {
		return c.plan, nil
	}
	p, err := shared(ctx, &s.planFlight, strconv.FormatUint(gen, 10)+":"+strconv.FormatInt(tenantID, 10), func(ctx context.Context) (Plan, error) {
		return s.readPlanOf(ctx, gen, tenantID)
	})
	if err != nil {
		return Plan{}, wrap("plan", err)
	}
	return p, nil
}

// readPlanOf reads a tenant's plan in force and caches it, unless a plan change was made here
// since gen, the change count read before the read began.
func (s *Service) readPlanOf(ctx context.Context, gen uint64, tenantID int64) (Plan, error) {
	now := time.Now()
	var tp TenantPlan
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		var err error
		tp, err = s.readPlan(tx, tenantID)
		return err
	})
	if err != nil {
		return Plan{}, err
	}
	ttl := s.authCacheTTL
	if ttl > 0 {
		s.planMu.Lock()
		defer s.planMu.Unlock()
		if s.planGen != gen { // a change here since the read: it is not what this read saw
			return tp.Plan, nil
		}
		if s.planCache == nil || len(s.planCache) >= maxCachedKeys {
			s.planCache = map[int64]cachedPlan{}
		}
		s.planCache[tenantID] = cachedPlan{plan: tp.Plan, expires: now.Add(ttl)}
	}
	return tp.Plan, nil
}

// ValidatePlan checks a tenant's own plan, naming each bad field (decisionsPerSecond, maxLimits,
// maxKeys, maxOverrides).
func ValidatePlan(p PlanSettings) error {
	var fields []apperr.FieldError
	if v := p.DecisionsPerSecond; v != nil && (math.IsNaN(*v) || *v < 0 || *v > maxPlanValue) {
		fields = append(fields, apperr.FieldError{Field: "decisionsPerSecond", Message: "decisions per second must be a number from 0 (no limit) to 1000000000"})
	}
	for _, c := range []struct {
		field string
		v     *int64
	}{{"maxLimits", p.MaxLimits}, {"maxKeys", p.MaxKeys}, {"maxOverrides", p.MaxOverrides}} {
		if c.v != nil && (*c.v < 0 || *c.v > maxPlanValue) {
			fields = append(fields, apperr.FieldError{Field: c.field, Message: "must be a whole number from 0 (no limit) to 1000000000"})
		}
	}
	if len(fields) == 0 {
		return nil
	}
	e := ErrInvalid.WithField(fields[0].Field)
	e.Message, e.Fields = fields[0].Message, fields
	return e
}

// SetPlan sets a tenant's own plan (all fields nil: back to the default plan), audited in the
// tenant's log and the server's with the values before and after. An unknown tenant is
// ErrNotFound; a bad value ErrInvalid. It applies at once on this instance, and on the others
// within the plan cache's time.
func (s *Service) SetPlan(ctx context.Context, tenantID int64, own PlanSettings, actor string) error {
	if err := ValidatePlan(own); err != nil {
		return wrap("set plan", err)
	}
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		if _, err := changeableTenant(tx, tenantID); err != nil {
			return err
		}
		old, err := s.readPlan(tx, tenantID)
		if err != nil {
			return err
		}
		if own == (PlanSettings{}) {
			if err := tx.Where("tenant_id = ?", tenantID).Delete(&planRow{}).Error; err != nil {
				return err
			}
		} else {
			row := planRow{TenantID: tenantID, DecisionsPerSecond: own.DecisionsPerSecond, MaxLimits: own.MaxLimits,
				MaxKeys: own.MaxKeys, MaxOverrides: own.MaxOverrides, UpdatedAt: s.clock()}
			if err := tx.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "tenant_id"}}, UpdateAll: true}).Create(&row).Error; err != nil {
				return err
			}
		}
		return s.auditTenantAndServer(tx, tenantID, actor, "plan.update", DescribePlan(old.Plan)+" → "+DescribePlan(s.resolvePlan(own)))
	})
	if err == nil {
		s.planMu.Lock()
		delete(s.planCache, tenantID)
		s.planGen++ // the reads under way must not cache what they read (PlanOf)
		s.planMu.Unlock()
	}
	return wrap("set plan", err)
}

// DescribePlan is a plan in words, for the audit log.
func DescribePlan(p Plan) string {
	n := func(v int64) string {
		if v == 0 {
			return "no limit"
		}
		return strconv.FormatInt(v, 10)
	}
	rate := "no limit"
	if p.DecisionsPerSecond > 0 {
		rate = RateText(p.DecisionsPerSecond) + "/s"
	}
	return fmt.Sprintf("decisions %s, limits %s, keys %s, overrides %s", rate, n(p.MaxLimits), n(p.MaxKeys), n(p.MaxOverrides))
}

// MaxCount is the most of quota (QuotaLimits, QuotaKeys, QuotaOverrides) a tenant's plan allows,
// 0 for no limit. It is what the engine asks before creating a limit or an override.
func (s *Service) MaxCount(ctx context.Context, tenantID int64, quota string) (int64, error) {
	p, err := s.PlanOf(ctx, tenantID)
	if err != nil {
		return 0, err
	}
	switch quota {
	case QuotaLimits:
		return p.MaxLimits, nil
	case QuotaKeys:
		return p.MaxKeys, nil
	case QuotaOverrides:
		return p.MaxOverrides, nil
	}
	return 0, fmt.Errorf("tenants: unknown quota %q", quota)
}

// QuotaUsed is told, inside the transaction that created one more of quota, how many the tenant
// now holds. When that is the first count to reach NearQuotaPercent of the plan's max (it is
// again after a deletion took the count below; nothing remembers an earlier crossing), it audits
// "plan.quota_near" and queues the EventQuotaNear webhook event in the same transaction.
func (s *Service) QuotaUsed(tx *gorm.DB, tenantID int64, quota string, used, max int64) error {
	if max <= 0 || !crossesNear(used, max) {
		return nil
	}
	detail := fmt.Sprintf("%d of %d %s (%d%%)", used, max, quotaWords(quota), used*100/max)
	if err := s.audit(tx, &tenantID, "sluice", "plan.quota_near", quota, detail); err != nil {
		return err
	}
	if s.events == nil {
		return nil
	}
	return s.events.Enqueue(tx, tenantID, EventQuotaNear, QuotaNearEvent{Quota: quota, Used: used, Max: max})
}

// rateNearEvery is how often one instance tells a tenant that its decisions are near the plan's
// rate, at most: a tenant that stays near it is not told on every decision.
const rateNearEvery = time.Hour

// RateUsed is told, after a decision the plan admitted, how many decisions its rate still admits
// at once (remaining) of its burst. When that is under 100 - NearQuotaPercent percent, it audits
// "plan.quota_near" and queues EventQuotaNear (quota "decisions", used and max in decisions of the
// burst), at most once per rateNearEvery per tenant on this instance (so with several instances a
// tenant may hear it once per instance). Otherwise it costs one comparison.
func (s *Service) RateUsed(ctx context.Context, tenantID int64, remaining, burst float64) error {
	if burst <= 0 || remaining*100 >= burst*(100-NearQuotaPercent) {
		return nil
	}
	now := time.Now()
	s.planMu.Lock()
	if last, ok := s.rateNear[tenantID]; ok && now.Sub(last) < rateNearEvery {
		s.planMu.Unlock()
		return nil
	}
	if s.rateNear == nil || len(s.rateNear) >= maxCachedKeys {
		s.rateNear = map[int64]time.Time{}
	}
	s.rateNear[tenantID] = now
	s.planMu.Unlock()
	used, max := int64(math.Ceil(burst-remaining)), int64(math.Ceil(burst))
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		detail := fmt.Sprintf("%d of the %d decisions the plan admits at once", used, max)
		if err := s.audit(tx, &tenantID, "sluice", "plan.quota_near", QuotaDecisions, detail); err != nil {
			return err
		}
		if s.events == nil {
			return nil
		}
		return s.events.Enqueue(tx, tenantID, EventQuotaNear, QuotaNearEvent{Quota: QuotaDecisions, Used: used, Max: max})
	})
	if err != nil { // nothing was recorded: the next decision near the plan tries again
		s.planMu.Lock()
		if last, ok := s.rateNear[tenantID]; ok && last.Equal(now) {
			delete(s.rateNear, tenantID)
		}
		s.planMu.Unlock()
	}
	return wrap("rate used", err)
}

// crossesNear reports whether used is the first count at or past NearQuotaPercent of max.
func crossesNear(used, max int64) bool {
	threshold := (max*NearQuotaPercent + 99) / 100 // the smallest count at or past the share
	return used == threshold
}

// quotaWords names a quota in sentences.
func quotaWords(quota string) string {
	if quota == QuotaKeys {
		return "API keys"
	}
	return strings.ToLower(quota)
}

// countKeys is the number of a tenant's API keys not revoked.
func countKeys(tx *gorm.DB, tenantID int64) (int64, error) {
	var n int64
	err := tx.Model(&apiKeyRow{}).Where("tenant_id = ? AND revoked_at IS NULL", tenantID).Count(&n).Error
	return n, err
}

// KeyCount is the number of a tenant's API keys not revoked (its use of the keys quota).
func (s *Service) KeyCount(ctx context.Context, tenantID int64) (int64, error) {
	var n int64
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		var err error
		n, err = countKeys(tx, tenantID)
		return err
	})
	return n, wrap("key count", err)
}

// RateText writes a plan's decision rate per second as a person reads it, the surfaces alike:
// plainly ("2.5", "123456789.123"), or in exponent form when that would take more than twenty
// characters (1e-300, which plainly is about 300 zeros), never rounded.
func RateText(v float64) string {
	if s := strconv.FormatFloat(v, 'f', -1, 64); len(s) <= 20 {
		return s
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
