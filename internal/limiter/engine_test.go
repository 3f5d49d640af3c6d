package limiter_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func ptr[T any](v T) *T { return &v }

// fakeClock is a settable clock shared by the engine and the test.
type fakeClock struct{ ms atomic.Int64 }

func (c *fakeClock) Now() time.Time        { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) Set(ms int64)          { c.ms.Store(ms) }
func (c *fakeClock) Advance(ms int64)      { c.ms.Add(ms) }
func newClock(start int64) *fakeClock      { c := &fakeClock{}; c.Set(start); return c }
func (c *fakeClock) opts() limiter.Options { return limiter.Options{Now: c.Now} }

// newEngine returns an engine on d whose group-commit worker runs until the test ends.
func newEngine(t testing.TB, d *db.DB, opts limiter.Options) *limiter.Engine {
	t.Helper()
	e := limiter.NewEngine(d, opts)
	testkit.Run(t, e.Run)
	return e
}

const tenant = int64(1)

// instancePools opens url twice, as two app processes would (each pool of at most maxConns
// connections), migrates it once, and closes both when the test ends.
func instancePools(t testing.TB, url string, maxConns int) []*db.DB {
	t.Helper()
	var dbs []*db.DB
	for range 2 {
		d, err := db.Open(context.Background(), url, db.Options{MaxOpenConns: maxConns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		dbs = append(dbs, d)
	}
	if err := dbs[0].Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return dbs
}

func mustPut(t *testing.T, e *limiter.Engine, name string, def limiter.Definition) {
	t.Helper()
	if _, _, err := e.PutDefinition(context.Background(), tenant, name, def, nil); err != nil {
		t.Fatal(err)
	}
}

func mustLimit(t *testing.T, e *limiter.Engine, req limiter.Request) limiter.Decision {
	t.Helper()
	d, err := e.Limit(context.Background(), tenant, req)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func value(t *testing.T, e *limiter.Engine, name, key string) float64 {
	t.Helper()
	v, err := e.GetValue(context.Background(), tenant, name, key)
	if err != nil {
		t.Fatal(err)
	}
	return v.Value
}

func TestEngineTokenBucketWorkedExample(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "msg", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000})
		if got := mustLimit(t, e, limiter.Request{Name: "msg", Key: "u1", Count: 5}); !got.OK || got.Remaining != 5 {
			t.Fatalf("first consumption: %+v", got)
		}
		clock.Advance(6_000)
		if v := value(t, e, "msg", "u1"); v != 6 {
			t.Fatalf("after 6 s value = %v, want 6", v)
		}
		clock.Advance(24_000)
		if v := value(t, e, "msg", "u1"); v != 10 {
			t.Fatalf("after 30 s value = %v, want 10", v)
		}
		if v := value(t, e, "msg", "never-used"); v != 10 {
			t.Fatalf("a key without state reads full: %v", v)
		}
	})
}

func TestEngineRefusalWritesNothing(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "up", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000})
		mustLimit(t, e, limiter.Request{Name: "up", Key: "k", Count: 4})
		got := mustLimit(t, e, limiter.Request{Name: "up", Key: "k", Count: 7})
		if got.OK || got.RetryAfter == nil || *got.RetryAfter != 6_000 {
			t.Fatalf("7 of 6: %+v", got)
		}
		if v := value(t, e, "up", "k"); v != 6 {
			t.Fatalf("a refused large request drained the bucket: %v", v)
		}
		if c, err := e.Check(context.Background(), tenant, limiter.Request{Name: "up", Key: "k", Count: 6}); err != nil || !c.OK {
			t.Fatalf("check: %+v %v", c, err)
		}
		if v := value(t, e, "up", "k"); v != 6 {
			t.Fatalf("check consumed: %v", v)
		}
	})
}

func TestEngineReservationAndJitter(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, limiter.Options{Now: clock.Now, IntN: func(n int) int { return n - 1 }})
		mustPut(t, e, "r", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000, MaxReserved: ptr(3.0), Jitter: 500})
		mustLimit(t, e, limiter.Request{Name: "r", Count: 7})
		got := mustLimit(t, e, limiter.Request{Name: "r", Count: 5, Reserve: true})
		if !got.OK || *got.RetryAfter != 12_000 || got.Remaining != -2 {
			t.Fatalf("reservation must not be jittered: %+v", got)
		}
		got = mustLimit(t, e, limiter.Request{Name: "r", Count: 2, Reserve: true})
		if got.OK || *got.RetryAfter != 6_000+499 {
			t.Fatalf("refusal gets retryAfter + jitter: %+v", got)
		}
	})
}

func TestEngineBatchIsAllOrNothing(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "a", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000})
		mustPut(t, e, "b", limiter.Definition{Kind: limiter.TokenBucket, Rate: 2, Period: 60_000})
		ctx := context.Background()
		reqs := func(n float64) []limiter.Request {
			return []limiter.Request{{Name: "a", Key: "x", Count: n}, {Name: "b", Key: "x", Count: n}}
		}
		if b, err := e.Batch(ctx, tenant, reqs(2), true); err != nil || !b.OK {
			t.Fatalf("first batch: %+v %v", b, err)
		}
		b, err := e.Batch(ctx, tenant, reqs(1), true)
		if err != nil || b.OK || !b.Results[0].OK || b.Results[1].OK {
			t.Fatalf("b is empty so the batch must refuse: %+v %v", b, err)
		}
		if *b.RetryAfter != 30_000 {
			t.Fatalf("batch retryAfter = %v, want b's 30000", *b.RetryAfter)
		}
		if v := value(t, e, "a", "x"); v != 8 {
			t.Fatalf("a refused batch consumed a: %v", v)
		}
		// The same key twice in one batch sees its own consumption.
		mustPut(t, e, "c", limiter.Definition{Kind: limiter.FixedWindow, Rate: 3, Period: 60_000})
		b, _ = e.Batch(ctx, tenant, []limiter.Request{{Name: "c", Count: 2}, {Name: "c", Count: 2}}, true)
		if b.OK {
			t.Fatalf("2+2 of 3 admitted: %+v", b)
		}
	})
}

func TestEngineDefinitionsAndInlineConfig(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, newClock(1_700_000_000_000).opts())
		ctx := context.Background()
		inline := &limiter.Definition{Kind: limiter.FixedWindow, Rate: 1, Period: 1000}
		if _, err := e.Limit(ctx, tenant, limiter.Request{Name: "none", Count: 1}); !errors.Is(err, limiter.ErrLimitNotFound) {
			t.Fatalf("no definition, no config: %v", err)
		}
		if got, err := e.Limit(ctx, tenant, limiter.Request{Name: "none", Count: 1, Config: inline}); err != nil || !got.OK {
			t.Fatalf("inline config: %+v %v", got, err)
		}
		_, created, err := e.PutDefinition(ctx, tenant, "stored", limiter.Definition{Kind: limiter.TokenBucket, Rate: 5, Period: 1000}, nil)
		if err != nil || !created {
			t.Fatalf("create: %v %v", created, err)
		}
		_, created, _ = e.PutDefinition(ctx, tenant, "stored", limiter.Definition{Kind: limiter.TokenBucket, Rate: 6, Period: 1000}, nil)
		if created {
			t.Fatal("replace reported created")
		}
		if _, err := e.Limit(ctx, tenant, limiter.Request{Name: "stored", Count: 1, Config: inline}); !errors.Is(err, limiter.ErrDefinitionExists) {
			t.Fatalf("config with stored definition: %v", err)
		}
		if _, err := e.GetDefinition(ctx, tenant+1, "stored"); !errors.Is(err, limiter.ErrLimitNotFound) {
			t.Fatalf("another tenant sees the definition: %v", err)
		}
		list, _ := e.ListDefinitions(ctx, tenant)
		if len(list) != 1 || list[0].Definition.Rate != 6 {
			t.Fatalf("list: %+v", list)
		}
		_, _, err = e.PutDefinition(ctx, tenant, "bad", limiter.Definition{Kind: limiter.TokenBucket, Rate: 0, Period: 1000}, nil)
		var ve *limiter.ValidationError
		if !errors.As(err, &ve) || ve.Fields[0].Field != "rate" {
			t.Fatalf("invalid definition: %v", err)
		}
		if _, err := e.Limit(ctx, tenant, limiter.Request{Name: "stored", Count: 7}); !errors.Is(err, limiter.ErrCountExceedsCapacity) {
			t.Fatalf("count > capacity: %v", err)
		}
		mustLimit(t, e, limiter.Request{Name: "stored", Key: "k", Count: 3})
		if err := e.DeleteDefinition(ctx, tenant, "stored", nil); err != nil {
			t.Fatal(err)
		}
		if err := e.DeleteDefinition(ctx, tenant, "stored", nil); !errors.Is(err, limiter.ErrLimitNotFound) {
			t.Fatalf("second delete: %v", err)
		}
		var rows int64
		d.Gorm.Raw("SELECT COUNT(*) FROM limit_state WHERE name = 'stored'").Scan(&rows)
		if rows != 0 {
			t.Fatalf("deleting a definition left %d state rows", rows)
		}
	})
}

func TestEngineResetOneKeyAndAllKeys(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, newClock(1_700_000_000_000).opts())
		ctx := context.Background()
		mustPut(t, e, "s", limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 60_000, Shards: 4})
		for _, k := range []string{"a", "b"} {
			for range 10 {
				mustLimit(t, e, limiter.Request{Name: "s", Key: k, Count: 5})
			}
		}
		if v := value(t, e, "s", "a"); v != 50 {
			t.Fatalf("sum over shards = %v, want 50", v)
		}
		if err := e.Reset(ctx, tenant, "s", ptr("a"), nil); err != nil {
			t.Fatal(err)
		}
		if value(t, e, "s", "a") != 100 || value(t, e, "s", "b") != 50 {
			t.Fatal("reset of a key touched the wrong key")
		}
		if err := e.Reset(ctx, tenant, "s", nil, nil); err != nil {
			t.Fatal(err)
		}
		v, _ := e.GetValue(ctx, tenant, "s", "b")
		if v.Value != 100 || len(v.Shards) != 4 || v.Shards[3].Value != 25 {
			t.Fatalf("after reset all: %+v", v)
		}
		if err := e.Reset(ctx, tenant, "missing", nil, nil); !errors.Is(err, limiter.ErrLimitNotFound) {
			t.Fatalf("reset of an unknown limit: %v", err)
		}
	})
}

func TestEngineSlidingWindowWorkedExample(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_040_000) // a minute boundary
		e := newEngine(t, d, clock.opts())
		for _, res := range []int{1, 2} {
			name := "sw" + string(rune('0'+res))
			mustPut(t, e, name, limiter.Definition{Kind: limiter.SlidingWindow, Rate: 100, Period: 60_000, Resolution: res})
			clock.Set(1_700_000_040_000)
			for range 100 {
				mustLimit(t, e, limiter.Request{Name: name, Count: 1})
				clock.Advance(150)
			}
			clock.Set(1_700_000_040_000 + 75_000)
			n := 0
			for mustLimit(t, e, limiter.Request{Name: name, Count: 1}).OK {
				n++
			}
			if want := map[int]int{1: 25, 2: 50}[res]; n != want {
				t.Fatalf("resolution %d: admitted %d at 1.25 min, want %d", res, n, want)
			}
		}
	})
}

func TestEngineFailsClosedWhenTheDatabaseIsGone(t *testing.T) {
	srv, err := testkit.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	d, err := db.Open(context.Background(), srv.URL, db.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, d, limiter.Options{})
	mustPut(t, e, "f", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1000, Period: 1000})
	mustLimit(t, e, limiter.Request{Name: "f", Count: 1})
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		start := time.Now()
		got, err := e.Limit(context.Background(), tenant, limiter.Request{Name: "f", Count: 1})
		if !errors.Is(err, db.ErrUnavailable) || got.OK {
			t.Fatalf("database gone: got %+v, %v; want ErrUnavailable", got, err)
		}
		if took := time.Since(start); took > 6*time.Second {
			t.Fatalf("failing closed took %v", took)
		}
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := e.Limit(context.Background(), tenant, limiter.Request{Name: "f", Count: 1})
		if err == nil && got.OK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("did not recover after the database came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestEngineRecentKeysListsKeysWithStateNewestFirst(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "rk", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000, Shards: 2})
		for _, k := range []string{"old", "mid", "new"} {
			mustLimit(t, e, limiter.Request{Name: "rk", Key: k, Count: 3})
			clock.Advance(1)
		}
		got, err := e.RecentKeys(context.Background(), tenant, "rk", 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Key != "new" || got[1].Key != "mid" {
			t.Fatalf("recent keys: %+v", got)
		}
		if got[0].Value < 6.99 || got[0].Value > 7.01 {
			t.Fatalf("value of new = %v, want ~7", got[0].Value)
		}
		// A key with rows in both shards is listed once, and the next key still makes the list.
		for range 4 {
			mustLimit(t, e, limiter.Request{Name: "rk", Key: "both", Count: 3})
		}
		var shardRows int64
		if err := d.Gorm.Raw(`SELECT COUNT(*) FROM limit_state WHERE name = 'rk' AND key = 'both'`).Scan(&shardRows).Error; err != nil || shardRows != 2 {
			t.Fatalf("both: %d shard rows (%v), want 2", shardRows, err)
		}
		got, err = e.RecentKeys(context.Background(), tenant, "rk", 2)
		if err != nil || len(got) != 2 || got[0].Key != "both" || got[1].Key != "new" {
			t.Fatalf("recent keys after a key wrote both shards: %+v (%v)", got, err)
		}
		if _, err := e.RecentKeys(context.Background(), tenant+1, "rk", 2); !errors.Is(err, limiter.ErrLimitNotFound) {
			t.Fatalf("another tenant: %v", err)
		}
	})
}

// TestDecisionsWithoutRunFailClosedWhenTheirContextEnds: NewEngine starts nothing, so without Run
// a decision is never made; it fails closed with an unavailable error (HTTP 503) once its context
// ends, and consumes nothing.
func TestDecisionsWithoutRunFailClosedWhenTheirContextEnds(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := limiter.NewEngine(d, limiter.Options{})
		mustPut(t, e, "idle", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		type result struct {
			d   limiter.Decision
			err error
		}
		done := make(chan result, 1)
		go func() {
			got, err := e.Limit(ctx, tenant, limiter.Request{Name: "idle", Key: "k", Count: 1})
			done <- result{got, err}
		}()
		var r result
		select {
		case r = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("waited 30 s for a decision without Run to fail closed")
		}
		if r.d.OK || !errors.Is(r.err, limiter.ErrUnavailable) || !errors.Is(r.err, context.DeadlineExceeded) {
			t.Fatalf("without Run: %+v, %v; want ErrUnavailable after the deadline", r.d, r.err)
		}
		if got := apperr.From(r.err); got.Status() != 503 || got.Message != apperr.UnavailableMessage {
			t.Fatalf("without Run the client sees %d %q, want 503 unavailable", got.Status(), got.Message)
		}
		if v := value(t, e, "idle", "k"); v != 10 {
			t.Fatalf("a decision without Run consumed: value %v", v)
		}
	})
}

// TestJitterKeepsRetryAfterWithinTheMaximum: a refusal already at the cap (an extreme
// definition) stays at the cap once jittered, and a jittered refusal is never 0.
func TestJitterKeepsRetryAfterWithinTheMaximum(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, newClock(1_700_000_000_000).opts())
		mustPut(t, e, "rare", limiter.Definition{Kind: limiter.FixedWindow, Rate: 1e-12, Period: 86_400_000, Capacity: ptr(1.0), Jitter: 86_400_000})
		mustLimit(t, e, limiter.Request{Name: "rare", Count: 1})
		for range 20 {
			dec := mustLimit(t, e, limiter.Request{Name: "rare", Count: 1})
			if dec.OK || dec.RetryAfter == nil || *dec.RetryAfter != 1e15 {
				t.Fatalf("refusal at the cap with jitter: ok %v retryAfter %v, want exactly the maximum 1e15", dec.OK, dec.RetryAfter)
			}
		}
	})
}

// TestEachDecidesEveryRequestOnItsOwn: an invalid or unknown request gets its error and the
// others are decided, in order.
func TestEachDecidesEveryRequestOnItsOwn(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, newClock(1_700_000_000_000).opts())
		mustPut(t, e, "x", limiter.Definition{Kind: limiter.FixedWindow, Rate: 2, Period: 3_600_000})
		out := e.Each(context.Background(), tenant, []limiter.Request{
			{Name: "x", Key: "k", Count: 1},
			{Name: "bad name!", Count: 1},
			{Name: "unknown", Count: 1},
			{Name: "x", Key: "k", Count: 1},
			{Name: "x", Key: "k", Count: 1},
		}, true)
		if !out[0].Decision.OK || out[0].Err != nil || !out[3].Decision.OK || out[4].Decision.OK || out[4].Err != nil {
			t.Fatalf("decisions: %+v", out)
		}
		if out[1].Err == nil || apperr.From(out[1].Err).Code != apperr.InvalidRequest {
			t.Fatalf("invalid name: %v", out[1].Err)
		}
		if !limiter.IsNotFound(out[2].Err) {
			t.Fatalf("unknown limit: %v", out[2].Err)
		}
	})
}

// TestDefinitionUpdatesMoveUpdatedAtForward: updated_at, which the sweeper takes for the
// definition's version, moves forward on every change, even on a clock that stands still.
func TestDefinitionUpdatesMoveUpdatedAtForward(t *testing.T) {
	e := newEngine(t, testkit.Open(t, db.SQLite), newClock(1_700_000_000_000).opts())
	var last time.Time
	for i := range 3 {
		d, _, err := e.PutDefinition(context.Background(), tenant, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: float64(1 + i), Period: 1000}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !d.UpdatedAt.After(last) {
			t.Fatalf("change %d: updated_at %v, not after the last change's %v", i+1, d.UpdatedAt, last)
		}
		last = d.UpdatedAt
	}
}

// TestGroupStatsSumTheTransactionsTime: GroupStats.Busy (the metric
// sluice_decision_group_seconds_total) grows by each of the lane's transactions' time, and by no
// more than the wall time its work took, on one lane where groups run one after another: a
// decision's group, and a hold's release, which the lane runs as a close with no decision.
func TestGroupStatsSumTheTransactionsTime(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, limiter.Options{})
		mustPut(t, e, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 1000})
		before := e.GroupStats()
		began := time.Now()
		for i := range 3 {
			mustLimit(t, e, limiter.Request{Name: "api", Key: "k" + strconv.Itoa(i), Count: 1})
		}
		wall := time.Since(began)
		after := e.GroupStats()
		if groups, busy := after.Groups-before.Groups, after.Busy-before.Busy; groups != 3 || busy <= 0 || busy > wall {
			t.Fatalf("3 decisions one after another: %d groups took %v, want 3 groups taking more than 0 and at most the %v the decisions took",
				groups, busy, wall)
		}
		h := mustHold(t, e, 60_000, limiter.HoldLimit{Name: "api", Key: "h", Count: 1})
		before, began = e.GroupStats(), time.Now()
		if err := e.ReleaseHold(context.Background(), tenant, h.ID); err != nil {
			t.Fatal(err)
		}
		wall, after = time.Since(began), e.GroupStats()
		if busy := after.Busy - before.Busy; busy <= 0 || busy > wall {
			t.Fatalf("a hold's release took the lane %v, want more than 0 and at most the %v the release took", busy, wall)
		}
	})
}

// TestAPanickingGroupFailsClosedAndTheLaneGoesOn: a bug that panics inside a group (here an
// idempotent answer's rendering, which runs in the group's transaction) fails that group's
// decisions closed; the lane's token comes back, so the decisions after it are made.
func TestAPanickingGroupFailsClosedAndTheLaneGoesOn(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, limiter.Options{})
		mustPut(t, e, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 1000})
		idem := &limiter.Idempotency{Key: "k", Hash: []byte("h"), Render: func(limiter.BatchDecision) limiter.Answer { panic("render failed") }}
		if _, err := e.LimitIdempotent(context.Background(), tenant, []limiter.Request{{Name: "api", Key: "a", Count: 1}}, idem); err == nil {
			t.Fatal("a group whose rendering panicked answered without an error")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i := range 3 {
			if dec, err := e.Limit(ctx, tenant, limiter.Request{Name: "api", Key: "b", Count: 1}); err != nil || !dec.OK {
				t.Fatalf("decision %d after the panicking group: %v, %+v (waited up to 30 s for the lane)", i+1, err, dec)
			}
		}
	})
}

// TestAFamilysRetryAfterJittersAsTheLimitItCameFrom: a refusal's retryAfter that is an ancestor's
// is jittered by the ancestor's jitter, and not at all when the ancestor's deny override refused
// (its retryAfter is exact), whatever the limit's own jitter.
func TestAFamilysRetryAfterJittersAsTheLimitItCameFrom(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, limiter.Options{Now: clock.Now, IntN: func(n int) int { return n - 1 }})
		year := int64(365 * 86_400_000)
		mustPut(t, e, "org", limiter.Definition{Kind: limiter.FixedWindow, Rate: 1, Period: 60_000, Start: ptr(int64(0)), Jitter: 300})
		mustPut(t, e, "api", limiter.Definition{Kind: limiter.FixedWindow, Rate: 100, Period: year, Start: ptr(int64(0)), Jitter: 500,
			Parents: []limiter.Parent{{Name: "org", Key: "o"}}})
		mustPut(t, e, "quiet", limiter.Definition{Kind: limiter.FixedWindow, Rate: 100, Period: year, Start: ptr(int64(0)),
			Parents: []limiter.Parent{{Name: "org", Key: "p"}}})
		mustLimit(t, e, limiter.Request{Name: "quiet", Key: "k", Count: 1})
		got := mustLimit(t, e, limiter.Request{Name: "quiet", Key: "k", Count: 1}) // org's window (p) is spent: 40 s to its end + org's 299
		if got.OK || *got.RetryAfter != 40_000+299 {
			t.Fatalf("refused by the parent: retryAfter %v, want 40000 (the window's end) + the parent's jitter 299", *got.RetryAfter)
		}
		exp := clock.Now().UnixMilli() + 90_000
		if _, _, err := e.PutOverride(context.Background(), tenant, "org", limiter.Override{Match: "o", Action: limiter.ActionDeny, ExpiresAt: &exp}, nil); err != nil {
			t.Fatal(err)
		}
		got = mustLimit(t, e, limiter.Request{Name: "api", Key: "k", Count: 1})
		if got.OK || *got.RetryAfter != 90_000 {
			t.Fatalf("refused by the parent's deny: retryAfter %v, want exactly 90000 (a deny is never jittered)", *got.RetryAfter)
		}
	})
}

// TestARefusedBatchReportsTheBalanceAsItStands: a batch refused as a whole counts nothing, so a
// limit that would have admitted its request reports its balance as it stands, not what it
// would have had left: also for the same key twice in one batch, an ancestor, a sharded limit and
// a concurrency limit. A check (which never counts) still says what would be left.
func TestARefusedBatchReportsTheBalanceAsItStands(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, newClock(1_700_000_000_000).opts())
		ctx := context.Background()
		hour := int64(3_600_000)
		mustPut(t, e, "a", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: hour})
		mustPut(t, e, "spent", limiter.Definition{Kind: limiter.FixedWindow, Rate: 1, Period: hour})
		mustPut(t, e, "org", limiter.Definition{Kind: limiter.FixedWindow, Rate: 20, Period: hour})
		mustPut(t, e, "child", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: hour, Parents: []limiter.Parent{{Name: "org", Key: "{org}"}}})
		mustPut(t, e, "sharded", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1000, Period: hour, Shards: 10})
		mustPut(t, e, "slots", limiter.Definition{Kind: limiter.Concurrency, Rate: 3, LeaseTTL: 60_000})
		mustLimit(t, e, limiter.Request{Name: "spent", Key: "k", Count: 1})
		mustLimit(t, e, limiter.Request{Name: "a", Key: "k", Count: 2}) // a: 8 left

		refused := func(reqs ...limiter.Request) limiter.BatchDecision {
			t.Helper()
			b, err := e.Batch(ctx, tenant, append(reqs, limiter.Request{Name: "spent", Key: "k", Count: 1}), true)
			if err != nil || b.OK {
				t.Fatalf("batch: %+v, %v; want refused by spent", b, err)
			}
			return b
		}
		b := refused(limiter.Request{Name: "a", Key: "k", Count: 3}, limiter.Request{Name: "a", Key: "k", Count: 1})
		if r0, r1 := b.Results[0].Remaining, b.Results[1].Remaining; r0 != 8 || r1 != 8 {
			t.Errorf("a, the same key twice in a refused batch: remaining %v and %v, want 8 and 8 (as it stands)", r0, r1)
		}
		b = refused(limiter.Request{Name: "child", Key: "c", Count: 4, Attributes: map[string]string{"org": "acme"}})
		if c, p := b.Results[0].Remaining, b.Results[0].Parents[0].Remaining; c != 10 || p != 20 {
			t.Errorf("child and its parent in a refused batch: remaining %v and %v, want 10 and 20", c, p)
		}
		b = refused(limiter.Request{Name: "sharded", Key: "s", Count: 5})
		if r := b.Results[0].Remaining; r != 100 && r != 200 {
			t.Errorf("a fresh key of a sharded limit in a refused batch: remaining %v, want 100 or 200 (one or two whole shards)", r)
		}
		b = refused(limiter.Request{Name: "slots", Key: "l", Count: 1})
		if r := b.Results[0].Remaining; r != 3 || b.Results[0].LeaseID != "" {
			t.Errorf("a concurrency limit in a refused batch: remaining %v, lease %q; want 3 free slots and no lease", r, b.Results[0].LeaseID)
		}
		if v, err := e.GetValue(ctx, tenant, "a", "k"); err != nil || v.Value != 8 {
			t.Fatalf("a's value after the refused batches = %+v, %v; want 8", v, err)
		}
		// A check counts nothing either way: it says what each limit's count would leave.
		c, err := e.Batch(ctx, tenant, []limiter.Request{{Name: "a", Key: "k", Count: 3}, {Name: "spent", Key: "k", Count: 1}}, false)
		if err != nil || c.OK || c.Results[0].Remaining != 5 {
			t.Errorf("check: %+v, %v; want refused with a's remaining 5 (what it would leave)", c, err)
		}
		// A check its caller refuses as a whole anyway reports the balances as they stand, even
		// where every limit would fit.
		c, err = e.CheckRefused(ctx, tenant, []limiter.Request{{Name: "a", Key: "k", Count: 3}, {Name: "a", Key: "k", Count: 1}})
		if err != nil || !c.OK || c.Results[0].Remaining != 8 || c.Results[1].Remaining != 8 || value(t, e, "a", "k") != 8 {
			t.Errorf("CheckRefused: %+v, %v; want both fitting, each with a's 8 as it stands, nothing counted", c, err)
		}
	})
}

// TestARefusedBatchsRefusalsAndReservationsReportTheBalanceAsItStands: a request refused only
// because an earlier one of its batch would have taken from the same key reports the key's
// balance as it stands (its retryAfter stays: the batch fits when both fit, and does then), and
// a reservation in a refused batch, never made, has no retryAfter.
func TestARefusedBatchsRefusalsAndReservationsReportTheBalanceAsItStands(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		ctx := context.Background()
		mustPut(t, e, "a", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 3_600_000})
		mustLimit(t, e, limiter.Request{Name: "a", Key: "k", Count: 5}) // 5 left: 4 + 3 fits in 10, not now
		b, err := e.Batch(ctx, tenant, []limiter.Request{{Name: "a", Key: "k", Count: 4}, {Name: "a", Key: "k", Count: 3}}, true)
		if err != nil || b.OK || !b.Results[0].OK || b.Results[1].OK || b.Results[1].RetryAfter == nil {
			t.Fatalf("batch: %+v, %v; want the second request refused, with a retryAfter", b, err)
		}
		if r0, r1 := b.Results[0].Remaining, b.Results[1].Remaining; r0 != 5 || r1 != 5 {
			t.Errorf("remaining %v and %v, want 5 and 5 (as it stands)", r0, r1)
		}
		if v := value(t, e, "a", "k"); v != 5 {
			t.Fatalf("a's value after the refused batch = %v, want 5 (nothing taken)", v)
		}
		// The batch fits once the retryAfter has passed: the window is whole again.
		clock.Advance(*b.Results[1].RetryAfter)
		if b, err := e.Batch(ctx, tenant, []limiter.Request{{Name: "a", Key: "k", Count: 4}, {Name: "a", Key: "k", Count: 3}}, true); err != nil || !b.OK || b.Results[1].Remaining != 3 {
			t.Fatalf("the batch again after its retryAfter: %+v, %v; want admitted, 3 left", b, err)
		}
		five := 5.0
		mustPut(t, e, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 10_000, MaxReserved: &five})
		mustPut(t, e, "spent", limiter.Definition{Kind: limiter.FixedWindow, Rate: 1, Period: 3_600_000})
		mustLimit(t, e, limiter.Request{Name: "spent", Key: "k", Count: 1})
		b, err = e.Batch(ctx, tenant, []limiter.Request{{Name: "tb", Key: "k", Count: 13, Reserve: true}, {Name: "spent", Key: "k", Count: 1}}, true)
		if err != nil || b.OK || !b.Results[0].OK {
			t.Fatalf("batch: %+v, %v; want refused by spent, tb fitting", b, err)
		}
		if r := b.Results[0]; r.Remaining != 10 || r.RetryAfter != nil {
			t.Errorf("the reservation in a refused batch: remaining %v, retryAfter %v; want 10 and none", r.Remaining, r.RetryAfter)
		}
	})
}
