package usage_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
	"github.com/sluice-dev/sluice/internal/usage"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type clock struct{ ms atomic.Int64 }

func (c *clock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *clock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// start is 10:00:30 UTC on some day: half way through a minute.
func newClock() *clock {
	c := &clock{}
	c.ms.Store(time.Date(2026, 3, 1, 10, 0, 30, 0, time.UTC).UnixMilli())
	return c
}

// tenants creates tenants ids: a flush writes nothing for a tenant that does not exist.
func tenants(t *testing.T, d *db.DB, ids ...int64) {
	t.Helper()
	for _, id := range ids {
		if err := d.Gorm.Exec(`INSERT INTO tenants (id, name, created_at) VALUES (?, ?, ?)`, id, fmt.Sprintf("tenant-%d", id), time.Now()).Error; err != nil {
			t.Fatal(err)
		}
	}
}

type row struct {
	TenantID    int64
	Name        string
	BucketStart int64
	Allowed     int64
	Refused     int64
}

func rows(t *testing.T, d *db.DB) []row {
	t.Helper()
	var out []row
	if err := d.Gorm.Raw(`SELECT tenant_id, name, bucket_start, allowed, refused FROM usage_stats ORDER BY tenant_id, name, bucket_start`).Scan(&out).Error; err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDecisionsAreCountedInMemoryAndFlushedAdditively(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		tenants(t, d, 1, 2)
		ctx := context.Background()
		c := newClock()
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now})
		testkit.Run(t, a.Run)
		for range 5 {
			a.Record(1, "api", true)
		}
		a.Record(1, "api", false)
		a.Record(2, "api", true)
		a.Record(0, "dashboard.login.ip", true) // the system tenant is not counted
		if got := rows(t, d); len(got) != 0 {
			t.Fatalf("rows written before any flush (a write per decision?): %+v", got)
		}
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		minute := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC).UnixMilli()
		want := []row{{1, "api", minute, 5, 1}, {2, "api", minute, 1, 0}}
		if got := rows(t, d); !equal(got, want) {
			t.Fatalf("after first flush: got %+v, want %+v", got, want)
		}
		// The same minute again adds to the stored row instead of replacing it.
		a.Record(1, "api", true)
		a.Record(1, "api", false)
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		want[0] = row{1, "api", minute, 6, 2}
		if got := rows(t, d); !equal(got, want) {
			t.Fatalf("after second flush: got %+v, want %+v", got, want)
		}
		// A second aggregator (another instance) adds to the same row too.
		b := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now})
		stopB := testkit.Run(t, b.Run)
		b.Record(1, "api", true)
		if err := stopB(); err != nil {
			t.Fatal(err)
		}
		want[0] = row{1, "api", minute, 7, 2}
		if got := rows(t, d); !equal(got, want) {
			t.Fatalf("after another instance flushed: got %+v, want %+v", got, want)
		}
	})
}

func equal(a, b []row) bool {
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

func TestRunFlushesPendingCountsWhenItEnds(t *testing.T) {
	d := testkit.Open(t, db.SQLite)
	tenants(t, d, 7)
	a := usage.New(d, usage.Options{Interval: time.Hour})
	stop := testkit.Run(t, a.Run)
	a.Record(7, "x", true)
	a.Record(7, "x", false)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := rows(t, d)
	if len(got) != 1 || got[0].Allowed != 1 || got[0].Refused != 1 {
		t.Fatalf("after Run returned: %+v", got)
	}
}

func TestBackgroundFlushRunsOnTheInterval(t *testing.T) {
	d := testkit.Open(t, db.SQLite)
	tenants(t, d, 3)
	flushed := make(chan error, 1)
	a := usage.New(d, usage.Options{Interval: 10 * time.Millisecond, Flushed: flushed})
	testkit.Run(t, a.Run)
	a.Record(3, "y", true)
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-flushed:
			if err != nil {
				t.Fatal(err)
			}
			if got := rows(t, d); len(got) == 1 && got[0].Allowed == 1 {
				return
			}
		case <-deadline:
			t.Fatalf("no background flush wrote the count; rows: %+v", rows(t, d))
		}
	}
}

func TestSeriesBucketsStoredAndPendingCounts(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		tenants(t, d, 1, 2)
		ctx := context.Background()
		c := newClock()
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now})
		testkit.Run(t, a.Run)
		a.Record(1, "api", true) // 10:00
		a.Record(1, "other", false)
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		c.Advance(2 * time.Minute) // 10:02:30
		a.Record(1, "api", false)  // pending, not flushed
		a.Record(2, "api", true)   // another tenant

		pts, err := a.Series(ctx, 1, "api", time.Hour, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(pts) != 60 {
			t.Fatalf("len = %d, want 60", len(pts))
		}
		last := pts[59]
		if !last.Start.Equal(time.Date(2026, 3, 1, 10, 2, 0, 0, time.UTC)) || last.Allowed != 0 || last.Refused != 1 {
			t.Fatalf("last point = %+v, want 10:02 with the pending refusal", last)
		}
		if p := pts[57]; !p.Start.Equal(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)) || p.Allowed != 1 || p.Refused != 0 {
			t.Fatalf("point 57 = %+v, want 10:00 with one allowed", p)
		}
		all, err := a.Series(ctx, 1, "", time.Hour, 15*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var allowed, refused int64
		for _, p := range all {
			allowed += p.Allowed
			refused += p.Refused
		}
		if len(all) != 4 || allowed != 1 || refused != 2 {
			t.Fatalf("all limits: %d points, %d allowed, %d refused; want 4, 1, 2", len(all), allowed, refused)
		}
		if _, err := a.Series(ctx, 1, "api", time.Hour, 90*time.Second); err == nil {
			t.Fatal("a step that is not whole minutes was accepted")
		}
	})
}

// After a flood, a flush prunes at most usage.PrunedPerFlush rows (in short transactions), and
// the next flush goes on where it stopped instead of waiting for the next hour's prune.
func TestAFlushPrunesABoundedShareAndTheNextGoesOn(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		now := c.Now()
		expired := usage.PrunedPerFlush + 2_500
		// One row a minute, going back from a minute past retention.
		if err := d.Gorm.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
			INSERT INTO usage_stats (tenant_id, name, bucket_start, allowed, refused) SELECT 1, 'n', CAST(? AS BIGINT) - i * CAST(60000 AS BIGINT), 1, 0 FROM n`,
			expired, now.Add(-usage.Retention).UnixMilli()).Error; err != nil {
			t.Fatal(err)
		}
		kept := now.Add(-usage.Retention + time.Minute).UnixMilli()
		if err := d.Gorm.Exec(`INSERT INTO usage_stats (tenant_id, name, bucket_start, allowed, refused) VALUES (1, 'n', ?, 1, 0)`, kept).Error; err != nil {
			t.Fatal(err)
		}
		left := func() int {
			var n int
			if err := d.Gorm.Raw(`SELECT COUNT(*) FROM usage_stats WHERE bucket_start < ?`, now.Add(-usage.Retention).UnixMilli()).Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			return n
		}
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now})
		if err := a.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := left(); n < expired-usage.PrunedPerFlush || n == expired {
			t.Fatalf("the first flush left %d of %d rows past retention, want at least %d left and some pruned", n, expired, expired-usage.PrunedPerFlush)
		}
		c.ms.Add(int64(usage.DefaultInterval / time.Millisecond)) // the next flush, well within the hour
		if err := a.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := left(); n != 0 {
			t.Fatalf("the next flush left %d rows past retention, want 0", n)
		}
		if got := rows(t, d); len(got) != 1 || got[0].BucketStart != kept {
			t.Fatalf("rows left %+v, want only the one within retention", got)
		}
	})
}

// The flusher owns pruning: rows whose bucket started more than Retention ago go, the rest stay,
// even when there is nothing new to write.
func TestFlushPrunesRowsPastRetention(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		now := c.Now()
		for i := range 25 {
			bucket := now.Add(-usage.Retention).Add(time.Duration(i-20) * time.Minute).UnixMilli() // 20 past retention
			if err := d.Gorm.Exec(`INSERT INTO usage_stats (tenant_id, name, bucket_start, allowed, refused) VALUES (?, ?, ?, 1, 0)`, 1, "n", bucket).Error; err != nil {
				t.Fatal(err)
			}
		}
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now})
		testkit.Run(t, a.Run)
		if err := a.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := rows(t, d)
		if len(got) != 5 {
			t.Fatalf("%d rows left, want the 5 within retention: %+v", len(got), got)
		}
		for _, r := range got {
			if r.BucketStart < now.Add(-usage.Retention).UnixMilli() {
				t.Fatalf("row past retention kept: %+v", r)
			}
		}
	})
}
