package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/loop"
)

// Retries: a failed delivery is tried again after 5 s, then 4× longer each time (20 s, 80 s,
// ~5 min, ~21 min, ~85 min, then every 4 h), until 24 hours after the event; then it is given up
// and stays in the delivery log, from where an admin may resend it.
const (
	firstRetry   = 5 * time.Second
	maxRetryWait = 4 * time.Hour
	retryWindow  = 24 * time.Hour
	// claimLease is how long a claimed delivery is hidden from other dispatchers. A delivery is
	// claimed just before it is sent, so the lease covers one request (at most requestTimeout)
	// with room to spare. A dispatcher that outlasts it all the same (a stalled process or
	// database) may be overtaken, and then its outcome is not recorded (see deliver): the worst
	// case is one more sending, never an outcome written over a newer one.
	claimLease = time.Minute
)

// finishedNextAttempt is the next_attempt_at of a delivered or given-up delivery: later than any
// due time, so that the due index (on next_attempt_at) holds, up to now, only waiting deliveries,
// and the dispatcher's look for due deliveries reads those rather than the week of finished ones
// the delivery log keeps.
const finishedNextAttempt int64 = math.MaxInt64

// retryWait is the wait after the attempt-th failed attempt (1-based).
func retryWait(attempt int) time.Duration {
	wait := firstRetry
	for i := 1; i < attempt && wait < maxRetryWait; i++ {
		wait *= 4
	}
	return min(wait, maxRetryWait)
}

// deliveryRow is one event for one endpoint, in the outbox until sent or given up.
type deliveryRow struct {
	ID            string `gorm:"primaryKey"`
	TenantID      int64
	EndpointID    int64
	Event         string
	Payload       string
	CreatedAt     int64
	Attempts      int
	NextAttemptAt int64
	DeliveredAt   *int64
	GivenUpAt     *int64
	LastStatus    *int
	LastError     string
}

func (deliveryRow) TableName() string { return "webhook_deliveries" }

// Delivery is one delivery as the delivery log shows it.
type Delivery struct {
	ID          string
	EndpointID  int64
	Event       string
	Payload     string
	CreatedAt   time.Time
	Attempts    int
	NextAttempt *time.Time // nil once delivered or given up
	DeliveredAt *time.Time
	GivenUpAt   *time.Time
	LastStatus  *int
	LastError   string
}

func msTime(ms *int64) *time.Time {
	if ms == nil {
		return nil
	}
	t := time.UnixMilli(*ms).UTC()
	return &t
}

func (r deliveryRow) toDomain() Delivery {
	d := Delivery{ID: r.ID, EndpointID: r.EndpointID, Event: r.Event, Payload: r.Payload, CreatedAt: time.UnixMilli(r.CreatedAt).UTC(),
		Attempts: r.Attempts, DeliveredAt: msTime(r.DeliveredAt), GivenUpAt: msTime(r.GivenUpAt), LastStatus: r.LastStatus, LastError: r.LastError}
	if r.DeliveredAt == nil && r.GivenUpAt == nil {
		d.NextAttempt = msTime(&r.NextAttemptAt)
	}
	return d
}

// Deliveries lists an endpoint's most recent deliveries (at most limit, newest first).
func (s *Service) Deliveries(ctx context.Context, tenantID, endpointID int64, limit int) ([]Delivery, error) {
	limit = min(max(limit, 1), 500)
	var rows []deliveryRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		return tx.Where("tenant_id = ? AND endpoint_id = ?", tenantID, endpointID).Order("created_at DESC, id").Limit(limit).Find(&rows).Error
	})
	if err != nil {
		return nil, fmt.Errorf("webhooks: deliveries: %w", err)
	}
	out := make([]Delivery, len(rows))
	for i, r := range rows {
		out[i] = r.toDomain()
	}
	return out, nil
}

// Resend makes a delivery due now again, whatever its state: the same event, with the same
// webhook-id (receivers deduplicate on it), and a fresh 24 hours of retries; unless that would
// pass the endpoint's MaxWaitingPerEndpoint (ErrOutboxFull). Callers on behalf of a client spend
// SpendManual first.
func (s *Service) Resend(ctx context.Context, tenantID, endpointID int64, deliveryID string) error {
	if !db.ComparableText(deliveryID) {
		// No delivery has such an ID, and PostgreSQL refuses it in a query (an error, where
		// there is only no such row).
		return fmt.Errorf("webhooks: resend: %w", ErrDeliveryNotFound)
	}
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		now, err := s.nowIn(tx)
		if err != nil {
			return err
		}
		var rows []deliveryRow
		where := tx.Model(&deliveryRow{}).Where("tenant_id = ? AND endpoint_id = ? AND id = ?", tenantID, endpointID, deliveryID)
		if err := where.Session(&gorm.Session{}).Select("delivered_at", "given_up_at").Find(&rows).Error; err != nil {
			return err
		}
		if len(rows) == 0 {
			return ErrDeliveryNotFound
		}
		// A delivery still waiting adds none to the outbox by being sent again at once, however
		// many wait beside it (ordinary events may take an endpoint past the bound until
		// housekeeping runs); one delivered or given up does.
		if rows[0].DeliveredAt != nil || rows[0].GivenUpAt != nil {
			if err := roomForManual(tx, tenantID, endpointID); err != nil {
				return err
			}
		}
		return where.Updates(map[string]any{"next_attempt_at": now, "delivered_at": nil, "given_up_at": nil, "attempts": 0, "created_at": now}).Error
	})
	if err != nil {
		return fmt.Errorf("webhooks: resend: %w", err)
	}
	return nil
}

// Run sends due deliveries every interval, and keeps the outbox's bounds (see DeliverDue), until
// ctx ends.
func (s *Service) Run(ctx context.Context) error {
	loop.Every(ctx, s.interval, 0.1, func(ctx context.Context) {
		if _, err := s.DeliverDue(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("webhook deliveries", "err", err)
		}
	})
	return nil
}

// dueSQL lists every tenant's most overdue delivery due at ?, the most overdue first: the
// candidates for the next sending, of which DeliverDue takes the tenant whose turn it is. It
// runs before every sending, and reads through the due index the waiting deliveries that are due
// (at most MaxWaitingPerEndpoint per endpoint), never the finished ones (finishedNextAttempt).
const dueSQL = `SELECT id, tenant_id FROM (
		SELECT id, tenant_id, next_attempt_at, ROW_NUMBER() OVER (PARTITION BY tenant_id ORDER BY next_attempt_at, id) AS turn
		FROM webhook_deliveries
		WHERE delivered_at IS NULL AND given_up_at IS NULL AND next_attempt_at <= ?) due
	WHERE turn = 1
	ORDER BY next_attempt_at, id`

// dueDelivery is one of dueSQL's candidates.
type dueDelivery struct {
	ID       string
	TenantID int64
}

// claimSQL claims one delivery if it is still due: counts the attempt and hides it from other
// dispatchers for claimLease. Of dispatchers that list the same delivery, one claims it (the
// others' UPDATE finds it no longer due). The returned attempts, next_attempt_at and created_at
// identify the claim: a later claim or a resend changes them.
const claimSQL = `UPDATE webhook_deliveries SET next_attempt_at = ?, attempts = attempts + 1
	WHERE id = ? AND delivered_at IS NULL AND given_up_at IS NULL AND next_attempt_at <= ?
	RETURNING id, tenant_id, endpoint_id, event, payload, created_at, attempts, next_attempt_at`

// DeliverDue sends every delivery that is due now, one at a time, and returns how many it sent
// successfully. The tenants with deliveries due take turns: before each sending it looks again
// at every tenant's most overdue delivery and sends the one of the tenant served longest ago in
// this pass (tenants not yet served first, the most overdue of those first), claiming it just
// before. A tenant's backlog, or its receivers that never answer (each costing the request
// timeout), then delays another tenant's delivery by one request per turn, not by its whole
// queue, also when that delivery falls due during the pass (a retry, an event written meanwhile).
//
// Before each look it also keeps the outbox's bounds if housekeepingEvery has passed since they
// were last kept: a pass lasts as long as deliveries keep falling due, which is when the bounds
// matter most (a receiver that never answers, events coming faster than one instance sends).
func (s *Service) DeliverDue(ctx context.Context) (int, error) {
	sent := 0
	servedAt := map[int64]int{} // tenant → the number of the sending that last served it (none: 0)
	for sending := 1; ; sending++ {
		s.housekeepIfDue(ctx)
		// The due look and the claim's lease take the database's time on PostgreSQL (nowIn):
		// by its own clock, an instance running a minute ahead would claim a delivery whose
		// lease another instance, still sending it, took a moment ago.
		now, err := s.nowIn(s.db.Gorm.WithContext(ctx))
		if err != nil {
			return sent, err
		}
		var due []dueDelivery
		if err := s.db.Gorm.WithContext(ctx).Raw(dueSQL, now).Scan(&due).Error; err != nil {
			return sent, fmt.Errorf("webhooks: due deliveries: %w", err)
		}
		if len(due) == 0 {
			return sent, nil
		}
		next := due[0]
		for _, d := range due[1:] {
			if servedAt[d.TenantID] < servedAt[next.TenantID] {
				next = d
			}
		}
		var claimed []deliveryRow
		if err := s.db.Gorm.WithContext(ctx).Raw(claimSQL, now+claimLease.Milliseconds(), next.ID, now).Scan(&claimed).Error; err != nil {
			return sent, fmt.Errorf("webhooks: claim: %w", err)
		}
		if len(claimed) == 0 {
			continue // another dispatcher took it, or it was delivered, given up or deleted: look again
		}
		servedAt[next.TenantID] = sending
		ok, err := s.deliver(ctx, claimed[0])
		if err != nil {
			return sent, err
		}
		if ok {
			sent++
		}
	}
}

// deliver sends one claimed delivery and records the outcome; ok is whether the receiver took it.
// The outcome is recorded only while d's claim stands: if the delivery was resent meanwhile,
// claimed again by another dispatcher after this one outlasted its lease, or given up by
// housekeeping, the newer state wins.
func (s *Service) deliver(ctx context.Context, d deliveryRow) (ok bool, err error) {
	var ep endpointRow
	res := s.db.Gorm.WithContext(ctx).Where("tenant_id = ? AND id = ?", d.TenantID, d.EndpointID).Limit(1).Find(&ep)
	if res.Error != nil {
		return false, fmt.Errorf("webhooks: endpoint: %w", res.Error)
	}
	var status int
	var sendErr error
	switch {
	case res.RowsAffected == 0:
		return false, nil // deleted with its endpoint
	case !ep.Enabled:
		sendErr = fmt.Errorf("the endpoint is disabled")
	default:
		status, sendErr = s.send(ctx, ep, d)
	}
	nowMS, err := s.nowIn(s.db.Gorm.WithContext(ctx))
	if err != nil {
		return false, err
	}
	now := time.UnixMilli(nowMS)
	// last_status and last_error describe this attempt alone: one that got no answer has no
	// status (NULL), not the status an earlier attempt got.
	update := map[string]any{"last_error": "", "last_status": nil}
	if status != 0 {
		update["last_status"] = status
	}
	ok = sendErr == nil && status >= 200 && status < 300
	outcome := "delivered"
	switch {
	case ok:
		update["delivered_at"] = now.UnixMilli()
		update["next_attempt_at"] = finishedNextAttempt
	default:
		if sendErr != nil {
			update["last_error"] = truncate(deliveryError(sendErr, s.allowPrivate))
		} else {
			update["last_error"] = "HTTP " + strconv.Itoa(status)
		}
		next := now.Add(retryWait(d.Attempts))
		if next.After(time.UnixMilli(d.CreatedAt).Add(retryWindow)) {
			update["given_up_at"] = now.UnixMilli()
			update["next_attempt_at"] = finishedNextAttempt
			outcome = "given_up"
		} else {
			update["next_attempt_at"] = next.UnixMilli()
			outcome = "failed"
		}
	}
	res = s.db.Gorm.WithContext(ctx).Model(&deliveryRow{}).
		Where("id = ? AND attempts = ? AND next_attempt_at = ? AND created_at = ? AND delivered_at IS NULL AND given_up_at IS NULL",
			d.ID, d.Attempts, d.NextAttemptAt, d.CreatedAt).
		Updates(update)
	if res.Error != nil {
		return ok, fmt.Errorf("webhooks: record delivery: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		s.log.Info("webhook delivery: outcome not recorded, the delivery was resent or claimed again meanwhile", "delivery", d.ID, "delivered", ok)
	} else {
		s.onAttempt(outcome)
	}
	return ok, nil
}

// send POSTs the delivery, signed, and returns the receiver's status.
func (s *Service) send(ctx context.Context, ep endpointRow, d deliveryRow) (int, error) {
	secret, err := s.sealer.open(ep.SecretSealed)
	if err != nil {
		return 0, err
	}
	ts := s.wallClock().Unix() // compared by the receiver with its own clock
	body := []byte(d.Payload)
	sig, err := Sign(secret, d.ID, ts, body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Sluice-Webhooks/1")
	req.Header.Set("webhook-id", d.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
	return resp.StatusCode, nil
}

// noPublicAddress is the delivery log's one answer, while private receivers are refused, for a
// receiver's name that does not resolve and for one that resolves only to addresses that are not
// public (a literal one is refused when the endpoint is made).
const noPublicAddress = "no public address for the receiver's name (it does not resolve, or only to addresses that are not public; WEBHOOK_ALLOW_PRIVATE=true allows private receivers)"

// deliveryError is what the tenant's delivery log says of a delivery that got no answer. The log
// must not map the network Sluice runs in for a tenant, whose URLs can name anything: it never
// names Sluice's own address (a connection reset or broken after it was made names both ends),
// an address a name resolved to that was refused, or the resolver asked; and while private
// receivers are refused (allowPrivate false) it answers alike for a name that does not resolve
// and one that resolves only to private addresses.
func deliveryError(err error, allowPrivate bool) string {
	prefix := ""
	var ue *url.Error
	if errors.As(err, &ue) {
		prefix = ue.Op + " " + strconv.Quote(ue.URL) + ": "
	}
	var dnsErr *net.DNSError
	var opErr *net.OpError
	switch {
	case errors.Is(err, errPrivateAddress), !allowPrivate && errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return prefix + noPublicAddress
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return prefix + "the receiver's name does not resolve"
	case errors.As(err, &dnsErr) && dnsErr.IsTimeout:
		return prefix + "the lookup of the receiver's name timed out"
	case errors.As(err, &dnsErr):
		return prefix + "the lookup of the receiver's name failed"
	case errors.As(err, &opErr) && opErr.Source != nil:
		msg := opErr.Op + " " + opErr.Net
		if opErr.Addr != nil {
			msg += " " + opErr.Addr.String() // the receiver's, which the tenant named
		}
		return prefix + msg + ": " + opErr.Err.Error()
	}
	return err.Error()
}

func truncate(s string) string {
	if len(s) > 500 {
		s = s[:500]
	}
	return strings.ToValidUTF8(s, "")
}
