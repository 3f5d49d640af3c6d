package usage_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
	"github.com/sluice-dev/sluice/internal/usage"
)

// TestShadowRefusalsAreCountedApartAndFlushedAdditively: would-be refusals of shadow limits are
// a count of their own, flushed additively like the others (two instances flushing into the same
// row add up), and the series reports them from the table and from memory alike.
func TestShadowRefusalsAreCountedApartAndFlushedAdditively(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		tenants(t, d, 1)
		ctx := context.Background()
		c := newClock()
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now})
		b := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now})
		a.Record(1, "beta", true)
		a.RecordShadowRefused(1, "beta")
		a.RecordShadowRefused(1, "beta")
		b.RecordShadowRefused(1, "beta")
		b.Record(1, "beta", false)
		for _, agg := range []*usage.Aggregator{a, b} {
			if err := agg.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var stored struct{ Allowed, Refused, ShadowRefused int64 }
		if err := d.Gorm.Raw(`SELECT allowed, refused, shadow_refused FROM usage_stats WHERE tenant_id = 1 AND name = 'beta'`).Scan(&stored).Error; err != nil {
			t.Fatal(err)
		}
		if stored.Allowed != 1 || stored.Refused != 1 || stored.ShadowRefused != 3 {
			t.Fatalf("stored %+v, want 1 allowed, 1 refused, 3 shadow-refused", stored)
		}
		a.RecordShadowRefused(1, "beta") // pending, not flushed
		points, err := a.Series(ctx, 1, "beta", time.Hour, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var allowed, refused, shadow int64
		for _, p := range points {
			allowed, refused, shadow = allowed+p.Allowed, refused+p.Refused, shadow+p.ShadowRefused
		}
		if allowed != 1 || refused != 1 || shadow != 4 {
			t.Fatalf("series: %d allowed, %d refused, %d shadow-refused, want 1, 1, 4", allowed, refused, shadow)
		}
	})
}
