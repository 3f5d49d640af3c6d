package webhooks

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Refusal thresholds: an endpoint's own number, so that each receiver chooses how loud it wants
// limit.refusals to be (a pager wants few, a log sink many). Defaults and bounds:
const (
	DefaultRefusalThreshold = 100
	MaxRefusalThreshold     = 1_000_000_000
)

// maxNearKeysPerMinute bounds the key.near_limit events one limit's minute may raise per
// endpoint, across every flush of every instance (see nearSlot): each flush's near keys are
// considered in order (those most often near first) while the minute has slots left. Only a key
// that is sent an event takes a slot: one already alerted this hour is passed over and leaves
// its place to the next, so that keys still near from earlier minutes cannot crowd out a key
// that just went near. The keys passed over are at most those alerted in the hour's earlier
// minutes (5 a minute), so a flush's work stays bounded.
const maxNearKeysPerMinute = 5

// MaxThresholdEventsPerMinute bounds the threshold events (limit.refusals and key.near_limit
// together) one endpoint is sent per minute, counted by the deliveries made in the minute, across
// every limit, flush and instance. The bounds per limit above do not bound a tenant: inline
// configs make any number of limits (a thousand a bulk request), and each could raise its own
// events, which filled the outbox and held SQLite's writer for seconds inside the usage flush.
// Each flush sends its limit.refusals events first, then its key.near_limit; those past the bound
// are dropped (the flush that reaches it logs a warning), not deferred.
const MaxThresholdEventsPerMinute = 60

// LimitMinute is one limit's minute as the usage aggregator's flush reports it.
type LimitMinute struct {
	Name    string
	Minute  time.Time // the minute's start
	Refused int64     // refusals of the limit in the minute so far, across instances
	// NearKeys are the keys the flush saw left below 20 % of the limit's maximum, most first,
	// with how many of their decisions did.
	NearKeys []NearKey
}

// NearKey is a key near its limit and how many of its decisions in the minute left it there.
type NearKey struct {
	Key       string
	Decisions int64
}

type alertRow struct {
	TenantID   int64
	EndpointID int64
	Alert      string
	CreatedAt  int64
}

func (alertRow) TableName() string { return "webhook_alerts" }

// alertRetention is how long sent threshold events are remembered: longer than any window
// they are deduplicated over.
const alertRetention = 48 * time.Hour

// ThresholdEvents writes, inside tx (the usage flush's transaction), the threshold events that
// tenantID's minutes raise: limit.refusals to each enabled subscriber whose RefusalThreshold the
// minute's refusals reached, at most once per endpoint, limit and minute; key.near_limit to each
// enabled subscriber for each near key, at most once per endpoint, limit, key and hour, and for
// at most maxNearKeysPerMinute keys per endpoint, limit and minute (counting the events sent). "At most"
// holds across instances and flushes: the event's webhook_alerts rows and its delivery commit
// together, and a second insert of the row does nothing.
func (s *Service) ThresholdEvents(tx *gorm.DB, tenantID int64, minutes []LimitMinute) error {
	var eps []endpointRow
	if err := tx.Where("tenant_id = ? AND enabled", tenantID).Find(&eps).Error; err != nil {
		return err
	}
	eps = slices.DeleteFunc(eps, func(r endpointRow) bool {
		ev := strings.Split(r.Events, ",")
		return !slices.Contains(ev, EventLimitRefusals) && !slices.Contains(ev, EventKeyNearLimit)
	})
	if len(eps) == 0 {
		return nil
	}
	now, err := s.nowIn(tx)
	if err != nil {
		return err
	}
	for _, r := range eps {
		events := strings.Split(r.Events, ",")
		refusals, near := slices.Contains(events, EventLimitRefusals), slices.Contains(events, EventKeyNearLimit)
		if !slices.ContainsFunc(minutes, func(m LimitMinute) bool {
			return (refusals && m.Refused >= r.RefusalThreshold) || (near && len(m.NearKeys) > 0)
		}) {
			continue // nothing for it: no count of its deliveries (a read two instances' flushes would share)
		}
		budget, err := thresholdBudget(tx, r, now)
		if err != nil {
			return err
		}
		if budget == 0 {
			continue // spent by an earlier flush of the minute, which said so
		}
		passedOver := false // events this flush would have sent past the bound it reached
		if refusals {
			for _, m := range minutes {
				if m.Refused < r.RefusalThreshold {
					continue
				}
				if budget == 0 {
					passedOver = true
					break
				}
				minute := m.Minute.UTC()
				alert := "refusals " + m.Name + " " + strconv.FormatInt(minute.UnixMilli(), 10)
				data := map[string]any{"limit": m.Name, "minute": minute.Format(time.RFC3339), "refused": m.Refused, "threshold": r.RefusalThreshold}
				sent, err := s.alertOnce(tx, r, alert, now, EventLimitRefusals, data)
				if err != nil {
					return err
				}
				if sent {
					budget--
				}
			}
		}
		if near {
			for _, m := range minutes {
				if len(m.NearKeys) == 0 {
					continue
				}
				if budget == 0 {
					passedOver = true
					break
				}
				sent, err := s.nearEvents(tx, r, m, now, budget)
				if err != nil {
					return err
				}
				budget -= sent
			}
		}
		if passedOver {
			// Only the flush that spends the minute's last event gets here: at most once per
			// endpoint and minute (twice if its transaction is retried).
			s.log.Warn("webhooks: an endpoint reached its bound of threshold events for the minute; the minute's further ones are not sent",
				"tenant", r.TenantID, "endpoint", r.ID, "bound", MaxThresholdEventsPerMinute)
		}
	}
	return tx.Where("created_at < ?", now-alertRetention.Milliseconds()).Delete(&alertRow{}).Error
}

// thresholdBudget is how many more threshold events endpoint r may be sent in now's minute:
// MaxThresholdEventsPerMinute less the deliveries of them made since the minute began (read in
// the flush's serializable transaction, so two instances' flushes cannot both spend the last).
func thresholdBudget(tx *gorm.DB, r endpointRow, now int64) (int, error) {
	minute := now - now%time.Minute.Milliseconds()
	var made int64
	err := tx.Model(&deliveryRow{}).
		Where("tenant_id = ? AND endpoint_id = ? AND created_at >= ? AND event IN ?", r.TenantID, r.ID, minute,
			[]string{EventLimitRefusals, EventKeyNearLimit}).
		Count(&made).Error
	return max(0, MaxThresholdEventsPerMinute-int(made)), err
}

// nearEvents sends endpoint r the key.near_limit events of m's near keys, at most budget of them
// and within the minute's free slots, and returns how many it sent.
func (s *Service) nearEvents(tx *gorm.DB, r endpointRow, m LimitMinute, now int64, budget int) (int, error) {
	minute := m.Minute.UTC()
	free, err := freeNearSlots(tx, r, m.Name, minute)
	if err != nil {
		return 0, err
	}
	hour := minute.Truncate(time.Hour)
	sent := 0
	for _, k := range m.NearKeys {
		if len(free) == 0 || sent == budget {
			break
		}
		data := map[string]any{"limit": m.Name, "key": k.Key, "minute": minute.Format(time.RFC3339), "decisions": k.Decisions,
			"remainingBelow": "20% of the limit's maximum"}
		alert := "near " + m.Name + " " + strconv.FormatInt(hour.UnixMilli(), 10) + " " + k.Key
		ok, err := s.alertOnceNear(tx, r, alert, free[0], now, data)
		if err != nil {
			return sent, err
		}
		if ok {
			free = free[1:]
			sent++
		}
	}
	return sent, nil
}

// alertOnce enqueues event to endpoint r unless alert was already sent to it; sent is whether
// it did.
func (s *Service) alertOnce(tx *gorm.DB, r endpointRow, alert string, now int64, event string, data any) (sent bool, err error) {
	res := tx.Exec(`INSERT INTO webhook_alerts (tenant_id, endpoint_id, alert, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (endpoint_id, alert) DO NOTHING`,
		r.TenantID, r.ID, alert, now)
	if res.Error != nil || res.RowsAffected == 0 {
		return false, res.Error
	}
	return true, s.insertDelivery(tx, r, event, data, now)
}

// The key.near_limit events of one endpoint, limit and minute are at most maxNearKeysPerMinute
// across every flush of every instance, not per flush (each flush passes only the keys it saw):
// each one sent takes one of the minute's slots, a webhook_alerts row nearSlot names, in the
// transaction that enqueues it. Two flushes that take the same slot at once conflict on the
// row's key: one commits, the other is retried (and finds the slot taken) or fails.

// nearSlot is the webhook_alerts alert of the slot-th (1-based) key.near_limit event sent to an
// endpoint for limit's minute. The name comes last, so that no two (minute, slot, name) give
// the same text.
func nearSlot(limit string, minute time.Time, slot int) string {
	return "near-slot " + strconv.FormatInt(minute.UnixMilli(), 10) + " " + strconv.Itoa(slot) + " " + limit
}

// freeNearSlots lists the slots of endpoint r's key.near_limit events for limit's minute that
// are not yet taken, in order.
func freeNearSlots(tx *gorm.DB, r endpointRow, limit string, minute time.Time) ([]string, error) {
	all := make([]string, maxNearKeysPerMinute)
	for i := range all {
		all[i] = nearSlot(limit, minute, i+1)
	}
	var taken []string
	if err := tx.Model(&alertRow{}).Where("endpoint_id = ? AND alert IN ?", r.ID, all).Pluck("alert", &taken).Error; err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(a string) bool { return slices.Contains(taken, a) }), nil
}

// alertOnceNear enqueues a key.near_limit event to endpoint r unless alert (its key and hour)
// was already sent to it, taking the minute's free slot when it does; sent is whether it did.
func (s *Service) alertOnceNear(tx *gorm.DB, r endpointRow, alert, slot string, now int64, data any) (sent bool, err error) {
	sent, err = s.alertOnce(tx, r, alert, now, EventKeyNearLimit, data)
	if err != nil || !sent {
		return false, err
	}
	// No ON CONFLICT: a slot another flush took meanwhile must fail this transaction (PostgreSQL
	// reports a serialization failure, which is retried), never be shared.
	return true, tx.Exec(`INSERT INTO webhook_alerts (tenant_id, endpoint_id, alert, created_at) VALUES (?, ?, ?, ?)`,
		r.TenantID, r.ID, slot, now).Error
}
