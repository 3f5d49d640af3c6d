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
// endpoint: the keys most often near their limit go first.
const maxNearKeysPerMinute = 5

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
// enabled subscriber for each of the first few near keys, at most once per endpoint, limit, key
// and hour. "At most once" holds across instances and flushes: the event's webhook_alerts row
// and its delivery commit together, and a second insert of the row does nothing.
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
	now := s.now().UnixMilli()
	for _, r := range eps {
		events := strings.Split(r.Events, ",")
		for _, m := range minutes {
			minute := m.Minute.UTC()
			if slices.Contains(events, EventLimitRefusals) && m.Refused >= r.RefusalThreshold {
				data := map[string]any{"limit": m.Name, "minute": minute.Format(time.RFC3339), "refused": m.Refused, "threshold": r.RefusalThreshold}
				alert := "refusals " + m.Name + " " + strconv.FormatInt(minute.UnixMilli(), 10)
				if err := s.alertOnce(tx, r, alert, now, EventLimitRefusals, data); err != nil {
					return err
				}
			}
			if !slices.Contains(events, EventKeyNearLimit) {
				continue
			}
			hour := minute.Truncate(time.Hour)
			for i, k := range m.NearKeys {
				if i == maxNearKeysPerMinute {
					break
				}
				data := map[string]any{"limit": m.Name, "key": k.Key, "minute": minute.Format(time.RFC3339), "decisions": k.Decisions,
					"remainingBelow": "20% of the limit's maximum"}
				alert := "near " + m.Name + " " + strconv.FormatInt(hour.UnixMilli(), 10) + " " + k.Key
				if err := s.alertOnce(tx, r, alert, now, EventKeyNearLimit, data); err != nil {
					return err
				}
			}
		}
	}
	return tx.Where("created_at < ?", now-alertRetention.Milliseconds()).Delete(&alertRow{}).Error
}

// alertOnce enqueues event to endpoint r unless alert was already sent to it.
func (s *Service) alertOnce(tx *gorm.DB, r endpointRow, alert string, now int64, event string, data any) error {
	res := tx.Exec(`INSERT INTO webhook_alerts (tenant_id, endpoint_id, alert, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (endpoint_id, alert) DO NOTHING`,
		r.TenantID, r.ID, alert, now)
	if res.Error != nil || res.RowsAffected == 0 {
		return res.Error
	}
	return s.insertDelivery(tx, r, event, data)
}
