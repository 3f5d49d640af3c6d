package usage_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
	"github.com/sluice-dev/sluice/internal/usage"
)

// stored is what one tenant has in a usage table: decisions, and rows per name.
type stored struct {
	Allowed, Refused, Rows int64
	Names                  map[string]int64 // decisions per name
}

func storedOf(t *testing.T, d *db.DB, table string, tenantID int64) stored {
	t.Helper()
	var rs []struct {
		Name             string
		Allowed, Refused int64
	}
	if err := d.Gorm.Raw(`SELECT name, allowed, refused FROM `+table+` WHERE tenant_id = ?`, tenantID).Scan(&rs).Error; err != nil {
		t.Fatal(err)
	}
	s := stored{Names: map[string]int64{}}
	for _, r := range rs {
		s.Allowed += r.Allowed
		s.Refused += r.Refused
		s.Rows++
		s.Names[r.Name] += r.Allowed + r.Refused
	}
	return s
}

// seriesTotal is a tenant's decisions over the last hour as the charts see them: what is
// stored and what is still in memory.
func seriesTotal(t *testing.T, a *usage.Aggregator, tenantID int64) int64 {
	t.Helper()
	pts, err := a.Series(context.Background(), tenantID, "", time.Hour, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, p := range pts {
		n += p.Allowed + p.Refused + p.ShadowRefused
	}
	return n
}

// spray records one decision on each of n new limit names of tenantID (an inline config may
// name any), every third refused, and returns the next name's number.
func spray(a *usage.Aggregator, tenantID int64, from, n int) int {
	for i := from; i < from+n; i++ {
		a.Record(tenantID, fmt.Sprintf("inline.%d", i), i%3 != 0)
	}
	return from + n
}

// TestAHundredThousandCountersFlushInShortTransactions: the most named counters an aggregator
// holds (ten tenants with 10,000 limits each) are flushed without error, every count in both
// tables exactly once: no transaction outlasts the retry budget that bounds every transaction
// (db.DefaultRetryPolicy, 5 s), and none gives up.
func TestAHundredThousandCountersFlushInShortTransactions(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		const tenantsN, names = 10, 10_000
		for id := int64(1); id <= tenantsN; id++ {
			tenants(t, d, id)
		}
		var heard atomic.Int64
		hook := func(tx *gorm.DB, tenantID int64, limits []usage.LimitMinute) error {
			heard.Add(int64(len(limits)))
			return nil
		}
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: newClock().Now, OnMinute: hook})
		for id := int64(1); id <= tenantsN; id++ {
			spray(a, id, 0, names)
		}
		start := time.Now()
		if err := a.Flush(context.Background()); err != nil {
			t.Fatalf("flush of %d counters: %v", tenantsN*names, err)
		}
		t.Logf("%d counters flushed in %v", tenantsN*names, time.Since(start).Round(time.Millisecond))
		refused := int64(names / 3) // i%3 == 0 of 0..names-1, rounded up
		if names%3 != 0 {
			refused++
		}
		for id := int64(1); id <= tenantsN; id++ {
			for _, table := range []string{"usage_stats", "usage_stats_hourly"} {
				if s := storedOf(t, d, table, id); s.Rows != names || s.Allowed != names-refused || s.Refused != refused {
					t.Fatalf("tenant %d's %s: %d rows, %d allowed, %d refused; want %d, %d, %d", id, table, s.Rows, s.Allowed, s.Refused, names, names-refused, refused)
				}
			}
		}
		if n := heard.Load(); n != tenantsN*refused {
			t.Errorf("OnMinute heard of %d minutes with refusals, want %d", n, tenantsN*refused)
		}
		if n := d.GiveUpsFor(db.PurposeUsage); n != 0 {
			t.Errorf("%d usage transactions gave up", n)
		}
	})
}

// TestOneTenantCannotCrowdOutTheOthers: a tenant that decides on 130,000 limit names between two
// flushes keeps 10,000 of them and counts the rest under its catch-all, usage.OtherName, so its
// own total stays exact; another tenant's limits that come after it are kept under their names,
// and the flush writes them all.
func TestOneTenantCannotCrowdOutTheOthers(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		tenants(t, d, 7, 8, 9)
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: newClock().Now})
		spray(a, 7, 0, 130_000)
		a.Record(8, "other-tenant", true)
		for range 2 {
			a.Record(9, "innocent", false)
		}
		if n := seriesTotal(t, a, 7); n != 130_000 {
			t.Fatalf("the flooding tenant's series counts %d decisions before the flush, want 130,000", n)
		}
		if err := a.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if s := storedOf(t, d, "usage_stats", 8); s.Names["other-tenant"] != 1 {
			t.Fatalf("tenant 8's usage: %+v, want other-tenant's one decision", s)
		}
		if s := storedOf(t, d, "usage_stats", 9); s.Names["innocent"] != 2 || s.Refused != 2 {
			t.Fatalf("tenant 9's usage: %+v, want innocent's two refusals", s)
		}
		s := storedOf(t, d, "usage_stats", 7)
		if s.Allowed+s.Refused != 130_000 || s.Rows != 10_001 || s.Names[usage.OtherName] != 120_000 {
			t.Fatalf("the flooding tenant stored %d decisions in %d rows, %d of them under %s; want 130,000 in 10,001 rows, 120,000 under it",
				s.Allowed+s.Refused, s.Rows, s.Names[usage.OtherName], usage.OtherName)
		}
	})
}

// TestAFailedFlushKeepsWithinTheShares: a flush fails while the flooding tenant decides on
// 100,000 more names; what the failed flush carried is held again within the tenant's share
// (its names past it counted under usage.OtherName), except the chunk that failed, which is held
// as it was (it may have committed: Flush), so the next flush writes every decision, once, in at
// most 10,000 named rows of the tenant's and the failed chunk's (at most chunkRows / 2 = 500),
// and another tenant's under its name.
func TestAFailedFlushKeepsWithinTheShares(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		tenants(t, d, 7, 8)
		inHook := make(chan struct{})
		proceed := make(chan struct{})
		var failing atomic.Bool
		failing.Store(true)
		hook := func(tx *gorm.DB, tenantID int64, limits []usage.LimitMinute) error {
			if !failing.Load() {
				return nil
			}
			failing.Store(false) // the next call is the next flush's
			close(inHook)
			<-proceed
			return errors.New("the hook fails")
		}
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: newClock().Now, OnMinute: hook})
		next := spray(a, 7, 0, 10_000)
		flushed := make(chan error, 1)
		go func() { flushed <- a.Flush(context.Background()) }()
		select {
		case <-inHook:
		case err := <-flushed:
			t.Fatalf("the flush returned (%v) without calling its OnMinute hook", err)
		case <-time.After(time.Minute):
			t.Fatal("the flush's OnMinute hook was not called within a minute")
		}
		spray(a, 7, next, 100_000)
		a.Record(8, "other-tenant", true)
		close(proceed)
		select {
		case err := <-flushed:
			if err == nil {
				t.Fatal("the flush whose hook failed succeeded")
			}
		case <-time.After(time.Minute):
			t.Fatal("the flush whose hook failed did not return within a minute")
		}
		if n := seriesTotal(t, a, 7); n != 110_000 {
			t.Fatalf("after the failed flush, the flooding tenant's series counts %d decisions, want 110,000", n)
		}
		if err := a.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		s := storedOf(t, d, "usage_stats", 7)
		if s.Allowed+s.Refused != 110_000 || s.Rows > 10_001+500 {
			t.Fatalf("the flooding tenant stored %d decisions in %d rows; want 110,000 in at most 10,501 (10,000 names, %s and the failed chunk's 500)", s.Allowed+s.Refused, s.Rows, usage.OtherName)
		}
		if s := storedOf(t, d, "usage_stats", 8); s.Names["other-tenant"] != 1 {
			t.Fatalf("tenant 8's usage: %+v, want other-tenant's one decision", s)
		}
	})
}

// TestAFailedChunkIsWrittenOnceAndTheChunksBeforeItStay: a flush whose chunk of one tenant fails
// keeps the chunks written before it, and holds that chunk and the rest for the next flush,
// which writes them: every decision is stored once, minute and hour alike, and the series
// counts each once in between.
func TestAFailedChunkIsWrittenOnceAndTheChunksBeforeItStay(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		tenants(t, d, 1, 2, 3)
		var failing atomic.Bool
		failing.Store(true)
		hook := func(tx *gorm.DB, tenantID int64, limits []usage.LimitMinute) error {
			if tenantID == 2 && failing.Load() {
				return errors.New("tenant 2's hook fails")
			}
			return nil
		}
		c := newClock()
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now, OnMinute: hook})
		const names = 3_000 // several chunks of tenant 1 before tenant 2's
		spray(a, 1, 0, names)
		c.Advance(time.Minute) // and its minutes in two of the hour's minutes
		spray(a, 1, 0, names)
		a.Record(2, "api", false)
		a.Record(3, "api", true)
		if err := a.Flush(context.Background()); err == nil {
			t.Fatal("the flush whose chunk of tenant 2 failed succeeded")
		}
		if s := storedOf(t, d, "usage_stats", 1); s.Rows == 0 {
			t.Fatal("after the failed flush tenant 1 has no rows stored: want those of the chunks before tenant 2's")
		}
		for _, id := range []int64{2, 3} {
			if s := storedOf(t, d, "usage_stats", id); s.Rows != 0 {
				t.Fatalf("after the failed flush tenant %d has %d rows stored: want none, its chunk failed or was not reached", id, s.Rows)
			}
		}
		for id, want := range map[int64]int64{1: 2 * names, 2: 1, 3: 1} {
			if n := seriesTotal(t, a, id); n != want {
				t.Fatalf("after the failed flush tenant %d's series counts %d decisions, want %d", id, n, want)
			}
		}
		failing.Store(false)
		if err := a.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		for id, want := range map[int64]int64{1: 2 * names, 2: 1, 3: 1} {
			for _, table := range []string{"usage_stats", "usage_stats_hourly"} {
				if s := storedOf(t, d, table, id); s.Allowed+s.Refused != want {
					t.Fatalf("tenant %d's %s holds %d decisions, want %d", id, table, s.Allowed+s.Refused, want)
				}
			}
			if n := seriesTotal(t, a, id); n != want {
				t.Fatalf("tenant %d's series counts %d decisions, want %d", id, n, want)
			}
		}
	})
}

// TestOneTenantsKeysCannotCrowdOutTheOthers: a tenant refusing keys on 12,000 limit names
// follows them in 1,000 sketches and the rest in its catch-all's, whose hits still add up to
// every refusal; another tenant's refused key after it is followed and flushed.
func TestOneTenantsKeysCannotCrowdOutTheOthers(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		tenants(t, d, 7, 8)
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: newClock().Now})
		for i := range 12_000 {
			refuse(a, 7, fmt.Sprintf("inline.%d", i), fmt.Sprintf("key-%d", i), 1)
		}
		refuse(a, 8, "api", "mallory", 3)
		if err := a.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		top, err := a.TopKeys(context.Background(), 8, "", usage.KindRefused, time.Hour, 10)
		if err != nil {
			t.Fatal(err)
		}
		if !equalKC(top, []usage.KeyCount{{Name: "api", Key: "mallory", Hits: 3}}) {
			t.Fatalf("tenant 8's top refused keys: %+v, want mallory's 3", top)
		}
		var hits struct{ Named, Other int64 }
		if err := d.Gorm.Raw(`SELECT COALESCE(SUM(CASE WHEN name = ? THEN 0 ELSE hits END), 0) AS named, COALESCE(SUM(CASE WHEN name = ? THEN hits ELSE 0 END), 0) AS other
			FROM usage_top_keys WHERE tenant_id = 7`, usage.OtherName, usage.OtherName).Scan(&hits).Error; err != nil {
			t.Fatal(err)
		}
		if hits.Named != 1_000 || hits.Other != 11_000 {
			t.Fatalf("the flooding tenant's keys: %d hits under their names, %d under %s; want 1,000 and 11,000", hits.Named, hits.Other, usage.OtherName)
		}
	})
}

// TestFlushWritesNothingForATenantThatNoLongerExists: counts and keys held for a tenant deleted
// before the flush (DeleteTenant has deleted its rows) are not written, and OnMinute does not
// hear of it; the other tenant's are.
func TestFlushWritesNothingForATenantThatNoLongerExists(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		tenants(t, d, 1, 2)
		var heard []int64
		hook := func(tx *gorm.DB, tenantID int64, limits []usage.LimitMinute) error {
			heard = append(heard, tenantID)
			return nil
		}
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: newClock().Now, OnMinute: hook})
		for _, id := range []int64{1, 2} {
			refuse(a, id, "api", "alice", 2)
			a.Observe(id, usage.Observation{Name: "api", Key: "bob", OK: true, Remaining: 0, Max: 5})
		}
		if err := d.Gorm.Exec(`DELETE FROM tenants WHERE id = 2`).Error; err != nil {
			t.Fatal(err)
		}
		if err := a.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, table := range []string{"usage_stats", "usage_stats_hourly", "usage_top_keys", "usage_top_keys_hourly"} {
			var left, kept int64
			if err := d.Gorm.Raw(`SELECT COUNT(*) FROM ` + table + ` WHERE tenant_id = 2`).Scan(&left).Error; err != nil {
				t.Fatal(err)
			}
			if err := d.Gorm.Raw(`SELECT COUNT(*) FROM ` + table + ` WHERE tenant_id = 1`).Scan(&kept).Error; err != nil {
				t.Fatal(err)
			}
			if left != 0 || kept == 0 {
				t.Fatalf("%s: %d rows of the deleted tenant, %d of the other; want none and some", table, left, kept)
			}
		}
		if len(heard) != 1 || heard[0] != 1 {
			t.Fatalf("OnMinute heard of tenants %v, want 1 only", heard)
		}
	})
}

// TestOnMinuteIsNotToldOfTheCatchAll: a tenant past its share of counters has its further limits
// counted under the catch-all (OtherName); their refusals together are not one limit's, so the
// hook behind the limit.refusals webhook is not told of them as if a limit named "(other)" had
// refused 200 times in a minute. The limits within the share still are.
func TestOnMinuteIsNotToldOfTheCatchAll(t *testing.T) {
	d := testkit.Open(t, db.SQLite)
	tenants(t, d, 7)
	heard := map[string]int64{}
	hook := func(_ *gorm.DB, _ int64, limits []usage.LimitMinute) error {
		for _, l := range limits {
			heard[l.Name] += l.Refused
		}
		return nil
	}
	a := usage.New(d, usage.Options{Interval: time.Hour, Now: newClock().Now, OnMinute: hook})
	for i := range 10_000 { // the tenant's share of counters, the first refusing once
		a.Record(7, fmt.Sprint("n", i), i != 0)
	}
	for i := range 200 { // 200 more limits, each refusing once, counted under the catch-all
		a.Record(7, fmt.Sprint("x", i), false)
	}
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if heard["n0"] != 1 || len(heard) != 1 {
		t.Fatalf("OnMinute heard %v, want only n0's one refusal", heard)
	}
}

// TestAChunkThatCommittedThoughItsFlushFailedIsNotCountedAgain: a chunk's transaction commits
// but its flush takes it for failed (its COMMIT's answer lost: a connection cut, a synchronous
// standby that kept it waiting past the retry budget). The next flush writes that chunk again
// under its ID, finds the ID stored and writes nothing: every decision is stored once, minute,
// hour and top keys alike, and the series and top keys count each once in between. A chunk that
// failed for real (its transaction rolled back) is written by the next flush:
// TestAFailedChunkIsWrittenOnceAndTheChunksBeforeItStay.
func TestAChunkThatCommittedThoughItsFlushFailedIsNotCountedAgain(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		tenants(t, d, 1)
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: newClock().Now})
		loseFirstCommitsAnswer(a)
		ctx := context.Background()
		observe := func(n int) {
			for range n {
				a.Observe(1, usage.Observation{Name: "api", Key: "k", Remaining: 0, Max: 10}) // refused
			}
		}
		check := func(when string, want int64) {
			t.Helper()
			for _, table := range []string{"usage_stats", "usage_stats_hourly"} {
				if s := storedOf(t, d, table, 1); s.Allowed+s.Refused != want {
					t.Fatalf("%s: %s holds %d decisions, want %d", when, table, s.Allowed+s.Refused, want)
				}
			}
			if n := seriesTotal(t, a, 1); n != want {
				t.Fatalf("%s: the series counts %d decisions, want %d", when, n, want)
			}
			top, err := a.TopKeys(ctx, 1, "api", usage.KindRefused, time.Hour, 5)
			if err != nil || len(top) != 1 || top[0].Hits != want {
				t.Fatalf("%s: top keys %+v (%v), want k with %d", when, top, err, want)
			}
		}
		observe(3)
		if err := a.Flush(ctx); err == nil {
			t.Fatal("the flush whose COMMIT's answer was lost succeeded")
		}
		check("after the flush that took its committed chunk for failed", 3)
		observe(1)
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		check("after the next flush", 4)
	})
}

// TestAnUnconfirmedChunkOutlivesADay: a chunk whose flush took it for failed, though it committed,
// is still recognised days later (an instance that could not write meanwhile), after another
// flush pruned: its ID is kept as long as the rows it protects, so it is not counted twice. It
// used to be pruned after a day.
func TestAnUnconfirmedChunkOutlivesADay(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		tenants(t, d, 1)
		c := newClock()
		a := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now})
		loseFirstCommitsAnswer(a)
		for range 3 {
			a.Record(1, "api", true)
		}
		if err := a.Flush(context.Background()); err == nil {
			t.Fatal("the flush whose COMMIT's answer was lost succeeded")
		}
		c.Advance(5 * 24 * time.Hour)
		other := usage.New(d, usage.Options{Interval: time.Hour, Now: c.Now}) // another instance's flush prunes
		other.Record(1, "elsewhere", true)
		if err := other.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := a.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if s := storedOf(t, d, "usage_stats", 1); s.Names["api"] != 3 {
			t.Fatalf("five days later api's stored decisions: %d, want 3", s.Names["api"])
		}
	})
}

// loseFirstCommitsAnswer makes a's first chunk that commits report an error, as a COMMIT whose
// answer was lost would; later chunks report their own outcome.
func loseFirstCommitsAnswer(a *usage.Aggregator) {
	var lost atomic.Bool
	lost.Store(true)
	usage.SetAfterChunk(a, func() error {
		if lost.CompareAndSwap(true, false) {
			return errors.New("the COMMIT's answer was lost")
		}
		return nil
	})
}
