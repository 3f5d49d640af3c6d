package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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
		flushThresholdsAtOnce(t, d, s, tn, ms, ms, ms, ms)
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

// TestNearLimitEventsAreAtMostFivePerEndpointLimitAndMinuteAcrossFlushes: each flush passes only
// the near keys it saw, so three flushes of one minute with five other keys each (one instance
// after another, or several at once) still raise at most five key.near_limit events per endpoint
// and limit; the next minute has five again, and another limit or endpoint its own five.
func TestNearLimitEventsAreAtMostFivePerEndpointLimitAndMinuteAcrossFlushes(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := &clock{}
		c.advance(time.Hour)
		s := newService(t, d, c, true)
		ctx := context.Background()
		tn := newTenant(t, d, "acme")
		var eps []int64
		for _, path := range []string{"/a", "/b"} {
			ep, _, err := s.CreateEndpoint(ctx, tn, "http://127.0.0.1:9"+path, []string{EventKeyNearLimit})
			if err != nil {
				t.Fatal(err)
			}
			eps = append(eps, ep.ID)
		}
		keys := 0
		flush := func(name string, minute time.Time) []LimitMinute {
			var near []NearKey
			for range 5 {
				keys++
				near = append(near, NearKey{Key: fmt.Sprintf("key-%d", keys), Decisions: 1})
			}
			return []LimitMinute{{Name: name, Minute: minute, NearKeys: near}}
		}
		count := func(ep int64, minute time.Time, name string) int {
			var bodies []string
			if err := d.Gorm.Raw(`SELECT payload FROM webhook_deliveries WHERE endpoint_id = ? AND event = ?`, ep, EventKeyNearLimit).Scan(&bodies).Error; err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, b := range bodies {
				var p struct{ Data map[string]any }
				if err := json.Unmarshal([]byte(b), &p); err != nil {
					t.Fatal(err)
				}
				if p.Data["minute"] == minute.Format(time.RFC3339) && p.Data["limit"] == name {
					n++
				}
			}
			return n
		}
		first := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
		second, third := first.Add(time.Minute), first.Add(2*time.Minute)
		for _, minute := range []time.Time{first, second} {
			for range 3 {
				flushThresholds(t, d, s, tn, flush("api", minute))
			}
		}
		flushes := make([][]LimitMinute, 3)
		for i := range flushes {
			flushes[i] = append(flush("api", third), flush("search", third)...)
		}
		flushThresholdsAtOnce(t, d, s, tn, flushes...)
		for _, ep := range eps {
			for _, lm := range []struct {
				name   string
				minute time.Time
			}{{"api", first}, {"api", second}, {"api", third}, {"search", third}} {
				if n := count(ep, lm.minute, lm.name); n != maxNearKeysPerMinute {
					t.Errorf("endpoint %d, %s at %s: %d key.near_limit deliveries, want %d", ep, lm.name, lm.minute.Format(time.TimeOnly), n, maxNearKeysPerMinute)
				}
			}
		}
	})
}

// TestReadmeNamesEveryMemberOfTheThresholdEvents: README.md lists each threshold event's data
// members as (`{"a", "b"}`); the list must be the members the event really has.
func TestReadmeNamesEveryMemberOfTheThresholdEvents(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	d := testkit.Open(t, db.SQLite)
	c := &clock{}
	c.advance(time.Hour)
	s := newService(t, d, c, true)
	tn := newTenant(t, d, "acme")
	if _, _, err := s.CreateEndpoint(context.Background(), tn, "http://127.0.0.1:9/", []string{EventLimitRefusals, EventKeyNearLimit}, 1); err != nil {
		t.Fatal(err)
	}
	ms := []LimitMinute{{Name: "api", Minute: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC), Refused: 1, NearKeys: []NearKey{{Key: "alice", Decisions: 1}}}}
	if err := d.Serializable(context.Background(), func(tx *gorm.DB) error { return s.ThresholdEvents(tx, tn, ms) }); err != nil {
		t.Fatal(err)
	}
	for _, event := range []string{EventLimitRefusals, EventKeyNearLimit} {
		var body string
		if err := d.Gorm.Raw(`SELECT payload FROM webhook_deliveries WHERE event = ?`, event).Scan(&body).Error; err != nil {
			t.Fatal(err)
		}
		var p struct{ Data map[string]any }
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err)
		}
		want := slices.Sorted(maps.Keys(p.Data))
		m := regexp.MustCompile("`" + regexp.QuoteMeta(event) + "` \\(`\\{([^}]*)\\}`").FindSubmatch(readme)
		if m == nil {
			t.Fatalf("README.md does not list %s's members as (`{...}`)", event)
		}
		var named []string
		for _, member := range strings.Split(string(m[1]), ",") {
			named = append(named, strings.Trim(strings.TrimSpace(member), `"`))
		}
		if slices.Sort(named); !slices.Equal(named, want) {
			t.Errorf("README.md names %s's members %q; the event has %q", event, named, want)
		}
	}
}

// TestNearLimitSlotsGoToKeysNotYetAlertedThisHour: keys already alerted this hour take none of a
// minute's five places, however many of them a flush lists first. Minute 1: k1–k5 go near
// (five events). Minute 2: k1–k5 are still near, listed first, and k6 goes near: k6 hears it.
func TestNearLimitSlotsGoToKeysNotYetAlertedThisHour(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := &clock{}
		c.advance(time.Hour)
		s := newService(t, d, c, true)
		ctx := context.Background()
		tn := newTenant(t, d, "acme")
		ep, _, err := s.CreateEndpoint(ctx, tn, "http://127.0.0.1:9/near", []string{EventKeyNearLimit})
		if err != nil {
			t.Fatal(err)
		}
		near := func(keys ...string) []NearKey {
			var out []NearKey
			for _, k := range keys {
				out = append(out, NearKey{Key: k, Decisions: 1})
			}
			return out
		}
		first := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
		for _, m := range []LimitMinute{
			{Name: "api", Minute: first, NearKeys: near("k1", "k2", "k3", "k4", "k5")},
			{Name: "api", Minute: first.Add(time.Minute), NearKeys: near("k1", "k2", "k3", "k4", "k5", "k6")},
		} {
			flushThresholds(t, d, s, tn, []LimitMinute{m})
		}
		var bodies []string
		if err := d.Gorm.Raw(`SELECT payload FROM webhook_deliveries WHERE endpoint_id = ? AND event = ?`, ep.ID, EventKeyNearLimit).Scan(&bodies).Error; err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, b := range bodies {
			var p struct{ Data struct{ Key string } }
			if err := json.Unmarshal([]byte(b), &p); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, p.Data.Key)
		}
		slices.Sort(keys)
		if want := []string{"k1", "k2", "k3", "k4", "k5", "k6"}; !slices.Equal(keys, want) {
			t.Fatalf("key.near_limit events for %q, want one each for %q", keys, want)
		}
	})
}

// TestThresholdEventsAreAtMostABoundPerEndpointAndMinuteAcrossLimits: the bounds per limit do
// not bound a tenant, whose inline configs make any number of limits; an endpoint is sent at most
// MaxThresholdEventsPerMinute threshold events a minute whatever the number of limits, flushes
// and instances (four flushes at once here), limit.refusals first; the next minute has its own.
func TestThresholdEventsAreAtMostABoundPerEndpointAndMinuteAcrossLimits(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		c.advance(time.Minute - time.Duration(c.ms.Load()%60_000)*time.Millisecond + time.Second) // 1 s into a minute
		s := newService(t, d, c, true)
		ctx := context.Background()
		tn := newTenant(t, d, "acme")
		ep, _, err := s.CreateEndpoint(ctx, tn, "http://127.0.0.1:9/all", []string{EventLimitRefusals, EventKeyNearLimit}, 1)
		if err != nil {
			t.Fatal(err)
		}
		limits := 0
		flush := func(n int) []LimitMinute {
			ms := make([]LimitMinute, n)
			for i := range ms {
				limits++
				ms[i] = LimitMinute{Name: fmt.Sprintf("inline-%d", limits), Minute: c.now().Truncate(time.Minute), Refused: 1,
					NearKeys: []NearKey{{Key: "k", Decisions: 1}}}
			}
			return ms
		}
		count := func(event string) int {
			var n int
			if err := d.Gorm.Raw(`SELECT COUNT(*) FROM webhook_deliveries WHERE endpoint_id = ? AND event = ?`, ep.ID, event).Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			return n
		}
		// Each flush its own 40 limits: 160 refusals and 160 near keys in all.
		flushThresholdsAtOnce(t, d, s, tn, flush(40), flush(40), flush(40), flush(40))
		refusals, near := count(EventLimitRefusals), count(EventKeyNearLimit)
		if refusals+near != MaxThresholdEventsPerMinute {
			t.Fatalf("one minute of 160 limits: %d limit.refusals + %d key.near_limit events, want %d in all", refusals, near, MaxThresholdEventsPerMinute)
		}
		// One flush alone sends its refusals before its near keys.
		c.advance(time.Minute)
		flushThresholds(t, d, s, tn, flush(45))
		if r, n := count(EventLimitRefusals)-refusals, count(EventKeyNearLimit)-near; r != 45 || n != MaxThresholdEventsPerMinute-45 {
			t.Fatalf("the next minute's flush of 45 limits: %d limit.refusals + %d key.near_limit events, want 45 + %d", r, n, MaxThresholdEventsPerMinute-45)
		}
	})
}

// TestTheBoundsWarningComesOnlyFromTheFlushThatReachesIt: the warning that a minute's threshold
// events went unsent comes from the flush that spends the last of the bound with more left to
// send; flushes of the minute after it, sending nothing new (the same limits again), say nothing.
func TestTheBoundsWarningComesOnlyFromTheFlushThatReachesIt(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		var logs testkit.SyncBuffer
		s, err := NewService(d, sealKey, Options{AllowPrivate: true, Now: c.now, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		tn := newTenant(t, d, "acme")
		if _, _, err := s.CreateEndpoint(ctx, tn, "http://127.0.0.1:9/all", []string{EventLimitRefusals}, 1); err != nil {
			t.Fatal(err)
		}
		limits := func(n int) []LimitMinute {
			ms := make([]LimitMinute, n)
			for i := range ms {
				ms[i] = LimitMinute{Name: fmt.Sprintf("inline-%d", i), Minute: c.now().Truncate(time.Minute), Refused: 5}
			}
			return ms
		}
		flush := func(ms []LimitMinute) { t.Helper(); flushThresholds(t, d, s, tn, ms) }
		const warning = "reached its bound of threshold events"
		flush(limits(MaxThresholdEventsPerMinute)) // exactly the bound: nothing passed over
		flush(limits(MaxThresholdEventsPerMinute)) // the same again: all sent already
		if strings.Contains(logs.String(), warning) {
			t.Fatalf("a warning with nothing passed over:\n%s", logs.String())
		}
		c.advance(time.Minute)
		flush(limits(MaxThresholdEventsPerMinute + 1))
		flush(limits(MaxThresholdEventsPerMinute + 1))
		if n := strings.Count(logs.String(), warning); n != 1 {
			t.Fatalf("%d warnings after a flush past the bound and one more; want 1:\n%s", n, logs.String())
		}
	})
}

// flushThresholds writes the threshold events minutes raise for tenantID in a serializable
// transaction of their own, as a usage flush does.
func flushThresholds(t *testing.T, d *db.DB, s *Service, tenantID int64, minutes []LimitMinute) {
	t.Helper()
	if err := d.Serializable(context.Background(), func(tx *gorm.DB) error { return s.ThresholdEvents(tx, tenantID, minutes) }); err != nil {
		t.Fatal(err)
	}
}

// flushThresholdsAtOnce runs flushThresholds for each of flushes at once, as instances whose
// flushes of the same minutes meet.
func flushThresholdsAtOnce(t *testing.T, d *db.DB, s *Service, tenantID int64, flushes ...[]LimitMinute) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(flushes))
	for i, minutes := range flushes {
		wg.Go(func() {
			errs[i] = d.Serializable(context.Background(), func(tx *gorm.DB) error { return s.ThresholdEvents(tx, tenantID, minutes) })
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
