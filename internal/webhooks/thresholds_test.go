package webhooks

import (
	"context"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestThresholdEventsGoOnceWhenInstancesFlushTheSameMinuteAtOnce: several flushes (instances)
// raising the same minute's events concurrently leave exactly one delivery per endpoint and
// event, whichever commits first; an endpoint disabled or not subscribed gets none, and a minute
// below an endpoint's threshold raises nothing for it.
func TestThresholdEventsGoOnceWhenInstancesFlushTheSameMinuteAtOnce(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := &clock{}
		c.advance(time.Hour)
		s := newService(t, d, c, true)
		ctx := context.Background()
		tn := newTenant(t, d, "acme")
		low, _, err := s.CreateEndpoint(ctx, tn, "http://127.0.0.1:9/low", []string{EventLimitRefusals, EventKeyNearLimit}, 3)
		if err != nil {
			t.Fatal(err)
		}
		high, _, err := s.CreateEndpoint(ctx, tn, "http://127.0.0.1:9/high", []string{EventLimitRefusals}, 1000)
		if err != nil {
			t.Fatal(err)
		}
		other, _, err := s.CreateEndpoint(ctx, tn, "http://127.0.0.1:9/other", []string{EventKeyCreated}, 1)
		if err != nil {
			t.Fatal(err)
		}
		minute := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
		ms := []LimitMinute{{Name: "api", Minute: minute, Refused: 10, NearKeys: []NearKey{{Key: "alice", Decisions: 2}}}}
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() {
				errs[i] = d.Serializable(ctx, func(tx *gorm.DB) error { return s.ThresholdEvents(tx, tn, ms) })
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		count := func(ep int64, event string) int64 {
			var n int64
			if err := d.Gorm.Raw(`SELECT COUNT(*) FROM webhook_deliveries WHERE endpoint_id = ? AND event = ?`, ep, event).Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := count(low.ID, EventLimitRefusals); n != 1 {
			t.Fatalf("low: %d limit.refusals deliveries, want 1", n)
		}
		if n := count(low.ID, EventKeyNearLimit); n != 1 {
			t.Fatalf("low: %d key.near_limit deliveries, want 1", n)
		}
		if n := count(high.ID, EventLimitRefusals) + count(other.ID, EventLimitRefusals) + count(other.ID, EventKeyNearLimit); n != 0 {
			t.Fatalf("%d deliveries to endpoints below their threshold or not subscribed", n)
		}
	})
}
