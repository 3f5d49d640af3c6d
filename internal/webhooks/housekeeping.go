package webhooks

import (
	"context"
	"fmt"
	"time"
)

// The outbox's bounds, kept by housekeep (DeliverDue calls it every housekeepingEvery). Without
// them a tenant could grow webhook_deliveries without end: every limit change, test event and
// threshold event adds a delivery, and nothing removed the sent ones.
const (
	// KeepFinished is how long delivered and given-up deliveries stay in the delivery log
	// (and can be resent) before they are deleted.
	KeepFinished = 7 * 24 * time.Hour
	// MaxWaitingPerEndpoint bounds one endpoint's waiting deliveries (neither delivered nor given
	// up): beyond it the oldest are given up, marked "outbox full" in the delivery log (from
	// where they can still be resent). A receiver that is down or never answers then costs the
	// dispatcher at most this many events' retries, and keeps the newest events.
	MaxWaitingPerEndpoint = 1000
	housekeepingEvery     = time.Minute
	// housekeepingBatch is how many rows one statement deletes or gives up: short statements,
	// which leave the table to the dispatchers and the events' transactions in between.
	housekeepingBatch = 500
)

// outboxFull is the delivery log's last error of a delivery given up past MaxWaitingPerEndpoint.
var outboxFull = fmt.Sprintf("given up: the endpoint had %d newer deliveries waiting (the most it may have)", MaxWaitingPerEndpoint)

// pruneSQL deletes up to ? (the last argument) deliveries delivered or given up before ? (the
// four others). The outer WHERE says again that they finished long ago, for the reason of
// overflowSQL's: a delivery resent after the subquery's snapshot would otherwise be deleted
// although the resend reported it due again.
const pruneSQL = `DELETE FROM webhook_deliveries WHERE (delivered_at < ? OR given_up_at < ?) AND id IN (
	SELECT id FROM webhook_deliveries WHERE delivered_at < ? OR given_up_at < ? LIMIT ?)`

// overflowSQL gives up (at ?, with the error ?, next_attempt_at ? = finishedNextAttempt) up to ?
// waiting deliveries that have more than ? newer ones waiting for the same endpoint. The outer
// WHERE says again that they are waiting: on PostgreSQL the subquery reads the statement's
// snapshot, and a delivery recorded as delivered after it would otherwise still be given up
// (re-read when its row lock is free, a row is checked against the outer WHERE only), and so be
// both.
const overflowSQL = `UPDATE webhook_deliveries SET given_up_at = ?, last_error = ?, next_attempt_at = ?
	WHERE delivered_at IS NULL AND given_up_at IS NULL AND id IN (
	SELECT id FROM (
		SELECT id, ROW_NUMBER() OVER (PARTITION BY endpoint_id ORDER BY created_at DESC, id DESC) AS newest
		FROM webhook_deliveries WHERE delivered_at IS NULL AND given_up_at IS NULL) waiting
	WHERE newest > ? LIMIT ?)`

// housekeepIfDue runs housekeep if housekeepingEvery has passed since the service last did (or
// it never did). A failure is logged, not returned: the deliveries go on, and it is tried again
// housekeepingEvery later.
func (s *Service) housekeepIfDue(ctx context.Context) {
	now := s.wallClock().UnixMilli() // how often this process housekeeps: its own clock's business
	last := s.lastHousekeeping.Load()
	// Of concurrent passes of this service, the one that moves lastHousekeeping housekeeps.
	if now-last < housekeepingEvery.Milliseconds() || !s.lastHousekeeping.CompareAndSwap(last, now) {
		return
	}
	if err := s.housekeep(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("webhook outbox housekeeping", "err", err)
	}
}

// housekeep gives up the deliveries past each endpoint's MaxWaitingPerEndpoint and deletes those
// finished more than KeepFinished ago, a batch at a time. A delivery given up here while a
// dispatcher is sending it keeps that state: the attempt's outcome is not recorded over it.
func (s *Service) housekeep(ctx context.Context) error {
	now, err := s.nowIn(s.db.Gorm.WithContext(ctx))
	if err != nil {
		return err
	}
	gaveUp, err := s.inBatches(ctx, overflowSQL, now, outboxFull, finishedNextAttempt, MaxWaitingPerEndpoint, housekeepingBatch)
	if err != nil {
		return fmt.Errorf("webhooks: give up past the outbox's bound: %w", err)
	}
	if gaveUp > 0 {
		s.log.Warn("webhook deliveries given up: their endpoints had too many waiting", "deliveries", gaveUp, "max_per_endpoint", MaxWaitingPerEndpoint)
	}
	before := now - KeepFinished.Milliseconds()
	if _, err := s.inBatches(ctx, pruneSQL, before, before, before, before, housekeepingBatch); err != nil {
		return fmt.Errorf("webhooks: delete old deliveries: %w", err)
	}
	return nil
}

// inBatches runs statement (whose last argument is housekeepingBatch) until it affects fewer
// rows than a batch, and returns how many it affected in all.
func (s *Service) inBatches(ctx context.Context, statement string, args ...any) (int64, error) {
	var total int64
	for {
		res := s.db.Gorm.WithContext(ctx).Exec(statement, args...)
		if res.Error != nil {
			return total, res.Error
		}
		total += res.RowsAffected
		if res.RowsAffected < housekeepingBatch {
			return total, nil
		}
	}
}
