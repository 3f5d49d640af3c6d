package webhooks

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/limiter"
)

// Manual sendings, a test event (SendTest) or a resend (Resend), are asked for at will by any API
// key or dashboard user, so they are bounded twice: without that, one key could queue a thousand
// test events a second, past the endpoint's MaxWaitingPerEndpoint until housekeeping next runs,
// and each kept in the delivery log for KeepFinished once sent.
//   - None is queued while the endpoint already has MaxWaitingPerEndpoint deliveries waiting
//     (ErrOutboxFull): manual sendings never take it past the bound (ordinary events may, until
//     housekeeping next runs). A resend of a delivery still waiting adds none, and goes.
//   - At most MaxManualPerMinute per endpoint (SpendManual), so that sent ones cannot pile up in
//     the delivery log either.
const MaxManualPerMinute = 10

// ErrOutboxFull refuses a manual sending to an endpoint that has the most deliveries waiting.
var ErrOutboxFull = apperr.New(apperr.Conflict, fmt.Sprintf(
	"the endpoint already has %d deliveries waiting, the most it may have; send or resend once some are delivered or given up", MaxWaitingPerEndpoint))

// manualLimitName is the engine's limit of manual sendings, one key per endpoint, in the system
// tenant's key space (as the dashboard's login limits and the captcha's challenge limits).
const manualLimitName = "webhooks.manual"

var manualCapacity = float64(MaxManualPerMinute)

// SpendManual takes one of endpoint endpointID's manual sendings from engine's limit
// (MaxManualPerMinute a minute, a token bucket, so a burst of that many and then one every
// 60/MaxManualPerMinute seconds). When none is left it returns a rate_limited error with when to
// try again. Call it for an endpoint known to be the tenant's (state is kept per key, and a
// caller must not make keys for endpoints that do not exist), before SendTest or Resend.
func SpendManual(ctx context.Context, engine *limiter.Engine, endpointID int64) error {
	def := limiter.Definition{Kind: limiter.TokenBucket, Rate: MaxManualPerMinute, Period: time.Minute.Milliseconds(), Capacity: &manualCapacity}
	d, err := engine.Limit(ctx, limiter.SystemTenant, limiter.Request{Name: manualLimitName, Key: strconv.FormatInt(endpointID, 10), Count: 1, Config: &def})
	if err != nil {
		return fmt.Errorf("webhooks: manual sendings' limit: %w", err)
	}
	if d.OK {
		return nil
	}
	wait := limiter.WaitSeconds(d.RetryAfter)
	return &apperr.Error{Code: apperr.RateLimited, Name: manualLimitName, RetryAfterMs: d.RetryAfter, Message: fmt.Sprintf(
		"at most %d test events and resends a minute per endpoint; try again in %d seconds", MaxManualPerMinute, wait)}
}

// roomForManual returns ErrOutboxFull when tenantID's endpoint endpointID has
// MaxWaitingPerEndpoint deliveries waiting (or more: ordinary events are bounded by housekeeping).
func roomForManual(tx *gorm.DB, tenantID, endpointID int64) error {
	var n int64
	err := tx.Model(&deliveryRow{}).Where("tenant_id = ? AND endpoint_id = ? AND delivered_at IS NULL AND given_up_at IS NULL",
		tenantID, endpointID).
		Count(&n).Error
	if err != nil {
		return err
	}
	if n >= MaxWaitingPerEndpoint {
		return ErrOutboxFull
	}
	return nil
}
