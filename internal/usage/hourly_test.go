package usage_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
	"github.com/sluice-dev/sluice/internal/usage"
)

// rebucket sums minute points into buckets of step, keyed by their start.
func rebucket(pts []usage.Point, step time.Duration) map[int64]usage.Point {
	out := map[int64]usage.Point{}
	for _, p := range pts {
		ms := p.Start.UnixMilli()
		k := ms - ms%step.Milliseconds()
		s := out[k]
		s.Allowed += p.Allowed
		s.Refused += p.Refused
		s.ShadowRefused += p.ShadowRefused
		out[k] = s
	}
	return out
}

// TestHourlySeriesEqualsTheMinutesSummed: decisions over more than a day, flushed at uneven
// times (some mid-hour, the last ones still in memory), give the same hourly-step series (read
// from usage_stats_hourly) as the minute-step series (read from usage_stats) summed per step,
// per limit and across the tenant's limits.
func TestHourlySeriesEqualsTheMinutesSummed(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		tenants(t, d, 1, 2)
		ctx := context.Background()
		c := newClock()
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now})
		testkit.Run(t, a.Run)
		for i := range 240 { // 240 × 7m13s: about 29 hours
			a.Record(1, "api", true)
			if i%3 == 0 {
				a.Record(1, "api", false)
			}
			if i%5 == 0 {
				a.RecordShadowRefused(1, "beta")
			}
			a.Record(1, "beta", i%2 == 0)
			a.Record(2, "api", true) // another tenant
			if i%4 == 3 {
				if err := a.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			c.Advance(7*time.Minute + 13*time.Second)
		}
		a.Record(1, "api", false) // the current hour, still in memory with the last few
		a.Record(1, "beta", true)
		var total int64
		for _, name := range []string{"api", "beta", ""} {
			minutes, err := a.Series(ctx, 1, name, 7*24*time.Hour, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct{ span, step time.Duration }{{24 * time.Hour, time.Hour}, {7 * 24 * time.Hour, 3 * time.Hour}} {
				hours, err := a.Series(ctx, 1, name, tc.span, tc.step)
				if err != nil {
					t.Fatal(err)
				}
				want := rebucket(minutes, tc.step)
				for _, p := range hours {
					w := want[p.Start.UnixMilli()]
					if p.Allowed != w.Allowed || p.Refused != w.Refused || p.ShadowRefused != w.ShadowRefused {
						t.Fatalf("%q per %v at %v: hourly %+v, minutes summed %+v", name, tc.step, p.Start, p, w)
					}
					if name == "" && tc.step == 3*time.Hour {
						total += p.Allowed + p.Refused + p.ShadowRefused
					}
				}
			}
		}
		// 240 + 80 + 48 + 240 recorded for tenant 1, and the two last ones.
		if total != 610 {
			t.Fatalf("the week across limits counts %d decisions, want 610", total)
		}
	})
}

// TestFlushPrunesHourlyRowsPastRetention: hourly counts go with the minute ones, after Retention.
func TestFlushPrunesHourlyRowsPastRetention(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		now := c.Now()
		for _, at := range []time.Time{now.Add(-usage.Retention - time.Hour), now.Add(-usage.Retention + time.Hour)} {
			if err := d.Gorm.Exec(`INSERT INTO usage_stats_hourly (tenant_id, name, bucket_start, allowed) VALUES (1, 'n', ?, 1)`, at.UnixMilli()).Error; err != nil {
				t.Fatal(err)
			}
		}
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now})
		if err := a.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		var left []int64
		if err := d.Gorm.Raw(`SELECT bucket_start FROM usage_stats_hourly ORDER BY 1`).Scan(&left).Error; err != nil {
			t.Fatal(err)
		}
		if kept := now.Add(-usage.Retention + time.Hour).UnixMilli(); len(left) != 1 || left[0] != kept {
			t.Fatalf("left %v, want only the row within retention (%d)", left, kept)
		}
	})
}
