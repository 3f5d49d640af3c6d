package limiter_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

func refund(t *testing.T, e *limiter.Engine, req limiter.Request) limiter.Decision {
	t.Helper()
	d, err := e.Refund(context.Background(), tenant, req)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRefundGivesBackUpToTheMaximum: what was taken comes back, never more than the limit holds;
// a sliding window's window loses the counts; ancestors get theirs back too; a key an override
// allows (nothing counted) is left alone; bad refunds are problems naming the field.
func TestRefundGivesBackUpToTheMaximum(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 3_600_000})
		mustLimit(t, e, limiter.Request{Name: "tb", Key: "k", Count: 7})
		if got := refund(t, e, limiter.Request{Name: "tb", Key: "k", Count: 4}); !got.OK || got.Refunded != 4 || got.Remaining != 7 {
			t.Fatalf("refund 4 of 7 taken: %+v", got)
		}
		if got := refund(t, e, limiter.Request{Name: "tb", Key: "k", Count: 100}); got.Refunded != 3 || value(t, e, "tb", "k") != 10 {
			t.Fatalf("refund past the capacity: %+v, value %v", got, value(t, e, "tb", "k"))
		}
		if got := refund(t, e, limiter.Request{Name: "tb", Key: "fresh", Count: 5}); got.Refunded != 0 || value(t, e, "tb", "fresh") != 10 {
			t.Fatalf("refund of a full key: %+v", got)
		}

		mustPut(t, e, "sw", limiter.Definition{Kind: limiter.SlidingWindow, Rate: 10, Period: 60_000, Resolution: 6})
		mustLimit(t, e, limiter.Request{Name: "sw", Key: "k", Count: 6})
		if got := refund(t, e, limiter.Request{Name: "sw", Key: "k", Count: 2}); got.Refunded != 2 || value(t, e, "sw", "k") != 6 {
			t.Fatalf("sliding window: %+v, value %v", got, value(t, e, "sw", "k"))
		}

		fw := limiter.Definition{Kind: limiter.FixedWindow, Rate: 5, Period: 3_600_000, Start: ptr(int64(0))}
		mustPut(t, e, "org", fw)
		child := fw
		child.Parents = []limiter.Parent{{Name: "org", Key: "{org}"}}
		mustPut(t, e, "team", child)
		attrs := map[string]string{"org": "acme"}
		mustLimit(t, e, limiter.Request{Name: "team", Key: "t", Count: 3, Attributes: attrs})
		got := refund(t, e, limiter.Request{Name: "team", Key: "t", Count: 2, Attributes: attrs})
		if got.Refunded != 2 || len(got.Parents) != 1 || got.Parents[0].Refunded != 2 || value(t, e, "org", "acme") != 4 {
			t.Fatalf("a refund on a child refunds its parents: %+v, org %v", got, value(t, e, "org", "acme"))
		}

		if _, _, err := e.PutOverride(ctx, tenant, "tb", limiter.Override{Match: "vip", Action: limiter.ActionAllow}, nil); err != nil {
			t.Fatal(err)
		}
		if got := refund(t, e, limiter.Request{Name: "tb", Key: "vip", Count: 3}); got.Refunded != 0 {
			t.Fatalf("a refund under an allow override: %+v", got)
		}

		_, err := e.Refund(ctx, tenant, limiter.Request{Name: "nope", Key: "k", Count: 1})
		if !errors.Is(err, limiter.ErrLimitNotFound) {
			t.Fatalf("unknown limit: %v", err)
		}
		for _, bad := range []limiter.Request{{Name: "tb", Count: -1}, {Name: "tb", Count: 2e15}, {Name: "tb", Count: 1, Reserve: true}} {
			if _, err := e.Refund(ctx, tenant, bad); apperr.From(err).Code != apperr.InvalidRequest || apperr.From(err).Field != "count" {
				t.Errorf("refund %+v: %v", bad, err)
			}
		}
	})
}

// TestRefundsAndDecisionsAccountExactly: two engines with their own pools on one database take
// and give back tokens of one key concurrently (and give back some never taken). The window
// cannot refill during the test, so what it holds at the end is exactly its rate minus what was
// admitted plus what was refunded, and it never went above its rate or below zero: refunds never
// let more through than the limit.
func TestRefundsAndDecisionsAccountExactly(t *testing.T) {
	for _, dialect := range testkit.Dialects {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			url := testkit.URL(t, dialect)
			ctx := context.Background()
			var engines []*limiter.Engine
			for i := range 2 {
				d, err := db.Open(ctx, url, db.Options{MaxOpenConns: 8})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = d.Close() })
				if i == 0 {
					if err := d.Migrate(ctx); err != nil {
						t.Fatal(err)
					}
				}
				engines = append(engines, newEngine(t, d, limiter.Options{}))
			}
			const rate = 20
			mustPut(t, engines[0], "pool", limiter.Definition{Kind: limiter.FixedWindow, Rate: rate, Period: 10 * 365 * 86_400_000, Start: ptr(int64(0))})
			var admitted, refunded atomic.Int64 // refunded in thousandths, to sum floats exactly enough
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Go(func() {
					e := engines[g%2]
					r := rand.New(rand.NewPCG(uint64(g), 3))
					for range 40 {
						got, err := e.Limit(ctx, tenant, limiter.Request{Name: "pool", Key: "k", Count: 1})
						if err != nil {
							t.Error(err)
							return
						}
						if got.OK {
							admitted.Add(1)
						}
						if got.OK && r.IntN(2) == 0 || r.IntN(8) == 0 { // sometimes give back what was never taken
							d, err := e.Refund(ctx, tenant, limiter.Request{Name: "pool", Key: "k", Count: 1})
							if err != nil {
								t.Error(err)
								return
							}
							if d.Remaining > rate || d.Remaining < 0 {
								t.Errorf("after a refund the window holds %v, outside [0, %d]", d.Remaining, rate)
							}
							refunded.Add(int64(d.Refunded * 1000))
						}
					}
				})
			}
			wg.Wait()
			final := value(t, engines[0], "pool", "k")
			if want := float64(rate) - float64(admitted.Load()) + float64(refunded.Load())/1000; final != want {
				t.Fatalf("the window holds %v; rate %d - admitted %d + refunded %v = %v", final, rate, admitted.Load(), float64(refunded.Load())/1000, want)
			}
			if admitted.Load() <= rate {
				t.Fatalf("only %d admitted: the refunds made no difference to test", admitted.Load())
			}
			t.Logf("%s: %d admitted, %v refunded, %v left", dialect, admitted.Load(), float64(refunded.Load())/1000, final)
		})
	}
}

// shardRow is one stored state row of a shard.
type shardRow struct {
	Value    float64
	TS       int64
	Counters string
}

// shardRows reads the stored state rows of one key of a limit, by shard.
func shardRows(t *testing.T, d *db.DB, name, key string) map[int]shardRow {
	t.Helper()
	var rows []struct {
		Shard    int
		Value    float64
		TS       int64 `gorm:"column:ts"`
		Counters string
	}
	if err := d.Gorm.Raw("SELECT shard, value, ts, counters FROM limit_state WHERE tenant_id = ? AND name = ? AND key = ?", tenant, name, key).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	out := map[int]shardRow{}
	for _, r := range rows {
		out[r.Shard] = shardRow{r.Value, r.TS, r.Counters}
	}
	return out
}

// TestRefundOnAShardedLimitTouchesAtMostTwoShards: a refund (unlike a hold's give-back, which
// may spread over every shard) is a decision on a sharded limit like any other: it reads and
// writes at most two of its shards' rows, even when every shard lacks tokens and it asks for more
// than two shards can take; the others are left exactly as they were.
func TestRefundOnAShardedLimitTouchesAtMostTwoShards(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, newClock(1_700_000_000_000).opts())
		const shards, perShard = 4, 100.0
		mustPut(t, e, "pool", limiter.Definition{Kind: limiter.FixedWindow, Rate: shards * perShard, Period: 86_400_000 * 3650, Start: ptr(int64(0)), Shards: shards})
		// Take until every shard lacks at least 20.
		lacking := func() bool {
			rows := shardRows(t, d, "pool", "k")
			for s := range shards {
				if r, ok := rows[s]; !ok || r.Value > perShard-20 {
					return false
				}
			}
			return true
		}
		for i := 0; !lacking(); i++ {
			if i == 200 {
				t.Fatal("200 decisions did not take from every shard")
			}
			mustLimit(t, e, limiter.Request{Name: "pool", Key: "k", Count: 5})
		}

		for i, count := range []float64{3, 1000, 7, 1000, 2, 1000} {
			before := shardRows(t, d, "pool", "k")
			total := value(t, e, "pool", "k")
			got := refund(t, e, limiter.Request{Name: "pool", Key: "k", Count: count})
			after := shardRows(t, d, "pool", "k")
			var touched []int
			for s := range shards {
				if before[s] != after[s] {
					touched = append(touched, s)
				}
			}
			if len(touched) == 0 || len(touched) > 2 {
				t.Fatalf("refund %d of %v changed shards %v, want one or two:\nbefore %v\nafter  %v", i, count, touched, before, after)
			}
			if got.Refunded <= 0 || got.Refunded > count || value(t, e, "pool", "k") != total+got.Refunded {
				t.Fatalf("refund %d of %v: %+v, total %v -> %v", i, count, got, total, value(t, e, "pool", "k"))
			}
			if count == 1000 && value(t, e, "pool", "k") >= shards*perShard {
				t.Fatalf("refund %d of %v filled every shard: it reached more than two", i, count)
			}
			// Take again what was given back, so that every shard keeps lacking.
			for left := got.Refunded; left > 0; left -= 5 {
				mustLimit(t, e, limiter.Request{Name: "pool", Key: "k", Count: min(left, 5)})
			}
			for j := 0; !lacking(); j++ {
				if j == 200 {
					t.Fatal("200 decisions did not take from every shard again")
				}
				mustLimit(t, e, limiter.Request{Name: "pool", Key: "k", Count: 5})
			}
		}
	})
}
