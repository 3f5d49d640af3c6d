package usage_test

import (
	"context"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
	"github.com/sluice-dev/sluice/internal/usage"
)

func refuse(a *usage.Aggregator, tenant int64, name, key string, n int) {
	for range n {
		a.Observe(tenant, usage.Observation{Name: name, Key: key, OK: false, Max: 10})
	}
}

// TestTopKeysComeFromFlushedSketchesAndSurviveARestart: refused, near-limit and shadow keys are
// ranked per kind, per limit or across the tenant's limits, from what two instances flushed and
// what is still in memory; a new aggregator on the same database (a restart) still sees what
// was flushed; the range excludes older minutes and other tenants' keys never show.
func TestTopKeysComeFromFlushedSketchesAndSurviveARestart(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		tenants(t, d, 1, 2)
		ctx := context.Background()
		c := newClock()
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now})
		b := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now})
		refuse(a, 1, "api", "old", 50) // 10:00, outside the last hour once the clock moves on
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		c.Advance(2 * time.Hour)
		refuse(a, 1, "api", "alice", 7)
		refuse(b, 1, "api", "alice", 5)
		refuse(a, 1, "api", "bob", 9)
		refuse(a, 1, "search", "carol", 4)
		refuse(a, 2, "api", "mallory", 100)                                                        // another tenant
		a.Observe(1, usage.Observation{Name: "api", Key: "dave", OK: true, Remaining: 1, Max: 10}) // near: 10 %
		a.Observe(1, usage.Observation{Name: "api", Key: "erin", OK: true, Remaining: 2, Max: 10}) // exactly 20 %: not near
		a.Observe(1, usage.Observation{Name: "beta", Key: "frank", OK: true, ShadowRefused: true}) // shadow would-be refusal
		for _, agg := range []*usage.Aggregator{a, b} {
			if err := agg.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		refuse(a, 1, "api", "bob", 4) // still in memory: 13 in all

		top := func(agg *usage.Aggregator, name string, kind usage.Kind, span time.Duration) []usage.KeyCount {
			t.Helper()
			got, err := agg.TopKeys(ctx, 1, name, kind, span, 10)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		want := []usage.KeyCount{{Name: "api", Key: "bob", Hits: 13}, {Name: "api", Key: "alice", Hits: 12}}
		if got := top(a, "api", usage.KindRefused, time.Hour); !equalKC(got, want) {
			t.Fatalf("api's top refused keys in the last hour: %+v, want %+v", got, want)
		}
		wantAll := append(append([]usage.KeyCount{}, want...), usage.KeyCount{Name: "search", Key: "carol", Hits: 4})
		if got := top(a, "", usage.KindRefused, time.Hour); !equalKC(got, wantAll) {
			t.Fatalf("the tenant's top refused keys: %+v, want %+v", got, wantAll)
		}
		wantDay := append([]usage.KeyCount{{Name: "api", Key: "old", Hits: 50}}, want...)
		if got := top(a, "api", usage.KindRefused, 24*time.Hour); !equalKC(got, wantDay) {
			t.Fatalf("api's top refused keys in the last day: %+v, want %+v", got, wantDay)
		}
		if got := top(a, "", usage.KindNear, time.Hour); !equalKC(got, []usage.KeyCount{{Name: "api", Key: "dave", Hits: 1}}) {
			t.Fatalf("near-limit keys: %+v, want dave only", got)
		}
		if got := top(a, "", usage.KindShadow, time.Hour); !equalKC(got, []usage.KeyCount{{Name: "beta", Key: "frank", Hits: 1}}) {
			t.Fatalf("shadow would-be refused keys: %+v, want frank", got)
		}
		restarted := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now})
		wantFlushed := []usage.KeyCount{{Name: "api", Key: "alice", Hits: 12}, {Name: "api", Key: "bob", Hits: 9}}
		if got := top(restarted, "api", usage.KindRefused, time.Hour); !equalKC(got, wantFlushed) {
			t.Fatalf("after a restart: %+v, want what was flushed %+v", got, wantFlushed)
		}
	})
}

func equalKC(a, b []usage.KeyCount) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestOnMinuteHearsTheMinutesRefusalsAcrossInstances: the threshold hook runs in the flush's
// transaction with each limit's refusals in the minute so far, the other instance's flushed
// refusals included, and the keys near their limit; a failing hook fails the flush, which keeps
// its counts for the next one.
func TestOnMinuteHearsTheMinutesRefusalsAcrossInstances(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		tenants(t, d, 1)
		ctx := context.Background()
		c := newClock()
		var heard []usage.LimitMinute
		fail := false
		hook := func(tx *gorm.DB, tenantID int64, limits []usage.LimitMinute) error {
			if fail {
				return context.DeadlineExceeded
			}
			if tenantID != 1 {
				t.Errorf("heard tenant %d", tenantID)
			}
			heard = append(heard, limits...)
			return nil
		}
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now, OnMinute: hook})
		b := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now, OnMinute: hook})
		refuse(b, 1, "api", "x", 3)
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		heard = nil
		refuse(a, 1, "api", "y", 2)
		a.Observe(1, usage.Observation{Name: "api", Key: "z", OK: true, Remaining: 0, Max: 5})
		fail = true
		if err := a.Flush(ctx); err == nil {
			t.Fatal("a failing hook did not fail the flush")
		}
		fail = false
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if len(heard) != 1 || heard[0].Name != "api" || heard[0].Refused != 5 || len(heard[0].Near) != 1 || heard[0].Near[0].Key != "z" {
			t.Fatalf("heard %+v, want api with 5 refusals (3 from the other instance) and z near its limit", heard)
		}
		if want := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC); !heard[0].Minute.Equal(want) {
			t.Fatalf("minute %v, want %v", heard[0].Minute, want)
		}
	})
}

// TestFlushPrunesTopKeysPastTheirRetention: minute top keys go after MinuteKeysRetention (they
// serve the last hour), hourly ones after Retention, as the counts do.
func TestFlushPrunesTopKeysPastTheirRetention(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		now := c.Now()
		ins := func(table string, at time.Time, key string) {
			t.Helper()
			if err := d.Gorm.Exec(`INSERT INTO `+table+` (tenant_id, name, kind, bucket_start, limit_key, hits) VALUES (1, 'n', 'refused', ?, ?, 1)`, at.UnixMilli(), key).Error; err != nil {
				t.Fatal(err)
			}
		}
		ins("usage_top_keys", now.Add(-usage.MinuteKeysRetention-time.Minute), "old-minute")
		ins("usage_top_keys", now.Add(-usage.MinuteKeysRetention+time.Minute), "kept-minute")
		ins("usage_top_keys_hourly", now.Add(-usage.Retention-time.Hour), "old-hour")
		ins("usage_top_keys_hourly", now.Add(-usage.Retention+time.Hour), "kept-hour")
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now})
		if err := a.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		var keys []string
		if err := d.Gorm.Raw(`SELECT limit_key FROM usage_top_keys UNION ALL SELECT limit_key FROM usage_top_keys_hourly ORDER BY 1`).Scan(&keys).Error; err != nil {
			t.Fatal(err)
		}
		if len(keys) != 2 || keys[0] != "kept-hour" || keys[1] != "kept-minute" {
			t.Fatalf("left %v, want kept-hour and kept-minute", keys)
		}
	})
}
