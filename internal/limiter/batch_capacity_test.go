package limiter_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// items are a batch's requests as the API makes them: each named after its place in the body
// (limits[i].), so that a problem names the item it is about.
func items(reqs ...limiter.Request) []limiter.Request {
	for i := range reqs {
		reqs[i].Field = "limits[" + strconv.Itoa(i) + "]."
	}
	return reqs
}

// wantBatchOverCapacity fails unless err is count_exceeds_capacity naming field, and returns its
// message.
func wantBatchOverCapacity(t *testing.T, what string, err error, field string) string {
	t.Helper()
	if !errors.Is(err, limiter.ErrCountExceedsCapacity) {
		t.Fatalf("%s: %v; want count_exceeds_capacity", what, err)
	}
	p := apperr.From(err)
	if p.Code != apperr.CountExceedsCapacity || p.Field != field || p.Status() != 400 {
		t.Fatalf("%s: %s %q (%d, %s); want count_exceeds_capacity about %s", what, p.Code, p.Field, p.Status(), p.Message, field)
	}
	return p.Message
}

// TestABatchWhoseTotalOnAKeyCanNeverFitIsCountExceedsCapacity: items of one batch on the same
// limit and key whose counts together are more than the key can ever hold (8 + 5 on a bucket of
// 10; the same concurrency key twice at rate 1) can never be admitted, though each fits alone:
// the batch is 400 count_exceeds_capacity naming the first item that makes it impossible, as a
// single count over the capacity is, instead of a refusal for ever with a retryAfter (which, on
// a limit with a penalty, started a penalty each time). A check is answered the same, as a
// single count's check is; nothing is consumed, no penalty starts, no lease is taken.
func TestABatchWhoseTotalOnAKeyCanNeverFitIsCountExceedsCapacity(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, newClock(1_700_000_000_000).opts())
		ctx := context.Background()
		mustPut(t, e, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000})
		mustPut(t, e, "c", limiter.Definition{Kind: limiter.Concurrency, Rate: 1, LeaseTTL: 60_000})
		mustPut(t, e, "c2", limiter.Definition{Kind: limiter.Concurrency, Rate: 2, LeaseTTL: 60_000})
		mustPut(t, e, "pen", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 3_600_000, Penalty: 600_000})
		mustPut(t, e, "sw", limiter.Definition{Kind: limiter.SlidingWindow, Rate: 10, Period: 60_000, Resolution: 6})
		mustPut(t, e, "other", limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 60_000})

		// A single count over the capacity, decided and checked: the answer the batches match.
		if _, err := e.Batch(ctx, tenant, items(limiter.Request{Name: "tb", Key: "k", Count: 11}), true); !errors.Is(err, limiter.ErrCountExceedsCapacity) {
			t.Fatalf("one count of 11: %v", err)
		}
		if _, err := e.Batch(ctx, tenant, items(limiter.Request{Name: "tb", Key: "k", Count: 11}), false); !errors.Is(err, limiter.ErrCountExceedsCapacity) {
			t.Fatalf("a check of one count of 11: %v; a check weighs a count as a decision does", err)
		}

		for _, consume := range []bool{true, false} {
			for _, tc := range []struct {
				what  string
				reqs  []limiter.Request
				field string
			}{
				{"8 + 5 on a bucket of 10", items(limiter.Request{Name: "tb", Key: "k", Count: 8}, limiter.Request{Name: "tb", Key: "k", Count: 5}), "limits[1].count"},
				{"3 + 3 + 5, another limit between", items(limiter.Request{Name: "tb", Key: "k", Count: 3}, limiter.Request{Name: "other", Key: "k", Count: 50},
					limiter.Request{Name: "tb", Key: "k", Count: 3}, limiter.Request{Name: "tb", Key: "k", Count: 5}, limiter.Request{Name: "tb", Key: "k", Count: 20}), "limits[3].count"},
				{"the same concurrency key twice at rate 1", items(limiter.Request{Name: "c", Key: "k", Count: 1}, limiter.Request{Name: "c", Key: "k", Count: 1}), "limits[1].count"},
				{"the same concurrency key three times at rate 2", items(limiter.Request{Name: "c2", Key: "k", Count: 1}, limiter.Request{Name: "c2", Key: "k", Count: 1},
					limiter.Request{Name: "c2", Key: "k", Count: 1}), "limits[2].count"},
				{"6 + 6 on a window of 10 with a penalty", items(limiter.Request{Name: "pen", Key: "k", Count: 6}, limiter.Request{Name: "pen", Key: "k", Count: 6}), "limits[1].count"},
				{"6 + 6 on a sliding window of 10", items(limiter.Request{Name: "sw", Key: "k", Count: 6}, limiter.Request{Name: "sw", Key: "k", Count: 6}), "limits[1].count"},
			} {
				b, err := e.Batch(ctx, tenant, tc.reqs, consume)
				if err == nil {
					ra := int64(-1)
					if b.RetryAfter != nil {
						ra = *b.RetryAfter
					}
					t.Fatalf("%s (consume %v): ok %v, retryAfter %d ms; want count_exceeds_capacity", tc.what, consume, b.OK, ra)
				}
				if msg := wantBatchOverCapacity(t, tc.what, err, tc.field); !strings.Contains(msg, "batch") {
					t.Errorf("%s: message %q does not say the batch's items together are the problem", tc.what, msg)
				}
			}
		}
		for _, k := range []struct{ name, key string }{{"tb", "k"}, {"pen", "k"}, {"sw", "k"}, {"other", "k"}, {"c", "k"}, {"c2", "k"}} {
			v, err := e.GetValue(ctx, tenant, k.name, k.key)
			if err != nil {
				t.Fatal(err)
			}
			if v.Value != v.Definition.Max() || v.PenaltyUntil != 0 {
				t.Errorf("%s/%s after the refused batches: value %v, penalty until %v; want untouched (%v) and none", k.name, k.key, v.Value, v.PenaltyUntil, v.Definition.Max())
			}
		}

		// What fits at once still goes through: the total at the capacity, other keys, the
		// concurrency key at its rate.
		for _, reqs := range [][]limiter.Request{
			items(limiter.Request{Name: "tb", Key: "k", Count: 8}, limiter.Request{Name: "tb", Key: "k", Count: 2}),
			items(limiter.Request{Name: "tb", Key: "a", Count: 8}, limiter.Request{Name: "tb", Key: "b", Count: 5}),
			items(limiter.Request{Name: "c2", Key: "k", Count: 1}, limiter.Request{Name: "c2", Key: "k", Count: 1}),
			items(limiter.Request{Name: "c", Key: "a", Count: 1}, limiter.Request{Name: "c", Key: "b", Count: 1}),
		} {
			if b, err := e.Batch(ctx, tenant, reqs, true); err != nil || !b.OK {
				t.Errorf("%+v: %+v, %v; want admitted", reqs, b, err)
			}
		}

		// A hold over several limits is weighed the same way.
		_, err := e.Hold(ctx, tenant, []limiter.HoldLimit{{Name: "other", Key: "h", Count: 1}, {Name: "tb", Key: "h", Count: 8}, {Name: "tb", Key: "h", Count: 5}}, 60_000)
		wantBatchOverCapacity(t, "a hold of 8 + 5 on a bucket of 10", err, "limits[2].count")

		// Bulk items are independent decisions: the second is refused, not a problem.
		out := e.Each(ctx, tenant, items(limiter.Request{Name: "tb", Key: "bulk", Count: 8}, limiter.Request{Name: "tb", Key: "bulk", Count: 5}), true)
		if out[0].Err != nil || !out[0].Decision.OK || out[1].Err != nil || out[1].Decision.OK || out[1].Decision.RetryAfter == nil {
			t.Errorf("bulk 8 then 5: %+v; want the first admitted and the second refused with a retryAfter", out)
		}
	})
}

// TestABatchsTotalOnAParentsKeyIsWeighedAgainstTheParent: a parent's key gets each child's
// count (and a request's on it directly), so two children within the parent's capacity each
// whose counts together are over it are count_exceeds_capacity, naming the item and the parent,
// as a single count over an ancestor's capacity is.
func TestABatchsTotalOnAParentsKeyIsWeighedAgainstTheParent(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, newClock(1_700_000_000_000).opts())
		ctx := context.Background()
		mustPut(t, e, "org", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 3_600_000})
		mustPut(t, e, "child", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 3_600_000, Parents: []limiter.Parent{{Name: "org", Key: "{org}"}}})
		acme := map[string]string{"org": "acme"}
		other := map[string]string{"org": "other"}

		// A single count over the parent's capacity: the case the batch matches.
		mustPut(t, e, "big", limiter.Definition{Kind: limiter.FixedWindow, Rate: 100, Period: 3_600_000, Parents: []limiter.Parent{{Name: "org", Key: "{org}"}}})
		_, err := e.Batch(ctx, tenant, items(limiter.Request{Name: "big", Key: "x", Count: 11, Attributes: acme}), true)
		single := wantBatchOverCapacity(t, "one count of 11 over the parent's 10", err, "limits[0].count")
		if !strings.HasPrefix(single, `parent "org": `) {
			t.Fatalf("single count over the parent: message %q", single)
		}

		for _, consume := range []bool{true, false} {
			for _, tc := range []struct {
				what string
				reqs []limiter.Request
			}{
				{"two children's keys, one parent's key", items(limiter.Request{Name: "child", Key: "c1", Count: 6, Attributes: acme},
					limiter.Request{Name: "child", Key: "c2", Count: 5, Attributes: acme})},
				{"the parent's key directly, then a child's", items(limiter.Request{Name: "org", Key: "acme", Count: 6},
					limiter.Request{Name: "child", Key: "c1", Count: 5, Attributes: acme})},
			} {
				_, err := e.Batch(ctx, tenant, tc.reqs, consume)
				if msg := wantBatchOverCapacity(t, tc.what, err, "limits[1].count"); !strings.HasPrefix(msg, `parent "org": `) {
					t.Errorf("%s: message %q; want it to name the parent", tc.what, msg)
				}
			}
		}
		// A child first, then the parent's key directly: the item itself is over.
		_, err = e.Batch(ctx, tenant, items(limiter.Request{Name: "child", Key: "c1", Count: 6, Attributes: acme}, limiter.Request{Name: "org", Key: "acme", Count: 5}), true)
		if msg := wantBatchOverCapacity(t, "a child, then the parent's key", err, "limits[1].count"); strings.HasPrefix(msg, "parent") {
			t.Errorf("the parent's own item: message %q names a parent", msg)
		}
		if v := value(t, e, "org", "acme"); v != 10 {
			t.Fatalf("org/acme after the refused batches: %v, want 10", v)
		}
		// Different parents' keys, or a total within the parent's capacity, are decided.
		for _, reqs := range [][]limiter.Request{
			items(limiter.Request{Name: "child", Key: "c1", Count: 6, Attributes: acme}, limiter.Request{Name: "child", Key: "c2", Count: 5, Attributes: other}),
			items(limiter.Request{Name: "child", Key: "c3", Count: 2, Attributes: acme}, limiter.Request{Name: "child", Key: "c4", Count: 2, Attributes: acme}),
		} {
			if b, err := e.Batch(ctx, tenant, reqs, true); err != nil || !b.OK {
				t.Errorf("%+v: %+v, %v; want admitted", reqs, b, err)
			}
		}
	})
}

// TestABatchThatCouldEverBeAdmittedIsNeverCountExceedsCapacity: the most lenient reading. A
// total within what a reservation may take (maxReserved, or unbounded), a sharded limit's total
// within all its shards (each request picks its own two), a key an allow override admits
// without counting, a key whose override raises its capacity, a denied key (refused anyway) and
// a shadow-mode limit (it never refuses the batch) are decided, not refused with a 400; a key
// whose override lowers its capacity is weighed under the override's numbers, unless that
// override ends.
func TestABatchThatCouldEverBeAdmittedIsNeverCountExceedsCapacity(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		// Shard choice alternates between shards {0, 1} and {2, 3}, so that two requests in a
		// row take from shards that differ.
		var second atomic.Bool
		intN := func(n int) int {
			if n == 4 { // the first shard of a pick
				if second.Load() {
					second.Store(false)
					return 2
				}
				second.Store(true)
				return 0
			}
			if second.Load() { // the other shard: the next one up
				return 0
			}
			return 2
		}
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, limiter.Options{Now: clock.Now, IntN: intN})
		ctx := context.Background()
		mustPut(t, e, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000})
		mustPut(t, e, "res", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000, MaxReserved: ptr(5.0)})
		mustPut(t, e, "open", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000})
		mustPut(t, e, "sharded", limiter.Definition{Kind: limiter.FixedWindow, Rate: 100, Period: 3_600_000, Shards: 4})
		mustPut(t, e, "c", limiter.Definition{Kind: limiter.Concurrency, Rate: 1, LeaseTTL: 60_000})
		mustPut(t, e, "shadow", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000, Mode: limiter.Shadow})
		mustOverride(t, e, "tb", limiter.Override{Match: "vip", Action: limiter.ActionAllow})
		mustOverride(t, e, "tb", limiter.Override{Match: "bad", Action: limiter.ActionDeny})
		mustOverride(t, e, "tb", limiter.Override{Match: "big", Capacity: ptr(20.0)})
		mustOverride(t, e, "tb", limiter.Override{Match: "small", Capacity: ptr(12.0)})
		mustOverride(t, e, "c", limiter.Override{Match: "vip", Action: limiter.ActionAllow})
		mustOverride(t, e, "c", limiter.Override{Match: "wide", Rate: ptr(2.0)})
		ends := clock.Now().UnixMilli() + 3_600_000
		mustPut(t, e, "c5", limiter.Definition{Kind: limiter.Concurrency, Rate: 5, LeaseTTL: 60_000})
		mustOverride(t, e, "c5", limiter.Override{Match: "narrow", Rate: ptr(1.0), ExpiresAt: &ends})

		admitted := func(what string, reqs []limiter.Request) limiter.BatchDecision {
			t.Helper()
			b, err := e.Batch(ctx, tenant, reqs, true)
			if err != nil || !b.OK {
				t.Fatalf("%s: %+v, %v; want admitted", what, b, err)
			}
			return b
		}
		// Reservations: 8 + 5 of 10 with up to 5 reserved fits (13 <= 15); 8 + 8 never does.
		b := admitted("8 + 5 reserving, maxReserved 5", items(limiter.Request{Name: "res", Key: "k", Count: 8}, limiter.Request{Name: "res", Key: "k", Count: 5, Reserve: true}))
		if b.Results[1].Remaining != -3 || b.RetryAfter == nil {
			t.Errorf("the reservation: %+v; want remaining -3 and a retryAfter", b)
		}
		_, err := e.Batch(ctx, tenant, items(limiter.Request{Name: "res", Key: "k2", Count: 8}, limiter.Request{Name: "res", Key: "k2", Count: 8, Reserve: true}), true)
		wantBatchOverCapacity(t, "8 + 8 reserving, maxReserved 5", err, "limits[1].count")
		admitted("8 + 50 reserving, unbounded", items(limiter.Request{Name: "open", Key: "k", Count: 8}, limiter.Request{Name: "open", Key: "k", Count: 50, Reserve: true}))

		// A sharded limit (4 shards of 25; one request takes at most two) is weighed whole: 50
		// + 50 is admitted when the requests pick shards that differ, as here; 50 + 50 + 1 never.
		admitted("50 + 50 on 4 shards of 25", items(limiter.Request{Name: "sharded", Key: "k", Count: 50}, limiter.Request{Name: "sharded", Key: "k", Count: 50}))
		if v := value(t, e, "sharded", "k"); v != 0 {
			t.Fatalf("sharded/k after 50 + 50: %v, want 0", v)
		}
		b, err = e.Batch(ctx, tenant, items(limiter.Request{Name: "sharded", Key: "k2", Count: 50}, limiter.Request{Name: "sharded", Key: "k2", Count: 50}), true)
		if err != nil {
			t.Fatalf("50 + 50 on a sharded limit: %v; it can be admitted (it just was, on another key)", err)
		}
		_, err = e.Batch(ctx, tenant, items(limiter.Request{Name: "sharded", Key: "k3", Count: 50}, limiter.Request{Name: "sharded", Key: "k3", Count: 50},
			limiter.Request{Name: "sharded", Key: "k3", Count: 1}), true)
		wantBatchOverCapacity(t, "50 + 50 + 1 on a sharded limit of 100", err, "limits[2].count")

		// Overrides: allow counts nothing, deny is refused anyway, numbers are the key's.
		admitted("8 + 5 on a key an allow override admits", items(limiter.Request{Name: "tb", Key: "vip", Count: 8}, limiter.Request{Name: "tb", Key: "vip", Count: 5}))
		admitted("a concurrency key an allow override admits, twice", items(limiter.Request{Name: "c", Key: "vip", Count: 1}, limiter.Request{Name: "c", Key: "vip", Count: 1}))
		admitted("8 + 5 under a capacity of 20", items(limiter.Request{Name: "tb", Key: "big", Count: 8}, limiter.Request{Name: "tb", Key: "big", Count: 5}))
		admitted("a concurrency key twice under a rate of 2", items(limiter.Request{Name: "c", Key: "wide", Count: 1}, limiter.Request{Name: "c", Key: "wide", Count: 1}))
		// An override that ends changes the key's numbers then: two leases refused under its rate
		// of 1 for the hour are admitted after it, under the limit's 5.
		twoLeases := items(limiter.Request{Name: "c5", Key: "narrow", Count: 1}, limiter.Request{Name: "c5", Key: "narrow", Count: 1})
		if b, err := e.Batch(ctx, tenant, twoLeases, true); err != nil || b.OK {
			t.Errorf("two leases under an override of rate 1 that ends in an hour: %+v, %v; want refused for now, not a 400", b, err)
		}
		clock.Advance(3_600_000)
		admitted("two leases once the override of rate 1 ended", twoLeases)
		_, err = e.Batch(ctx, tenant, items(limiter.Request{Name: "tb", Key: "small", Count: 8}, limiter.Request{Name: "tb", Key: "small", Count: 5}), true)
		wantBatchOverCapacity(t, "8 + 5 under a capacity of 12", err, "limits[1].count")
		b, err = e.Batch(ctx, tenant, items(limiter.Request{Name: "tb", Key: "bad", Count: 8}, limiter.Request{Name: "tb", Key: "bad", Count: 5}), true)
		if err != nil || b.OK {
			t.Errorf("8 + 5 on a denied key: %+v, %v; want refused by the deny, not a 400", b, err)
		}

		// A shadow-mode limit never refuses: the second request is its would-be refusal.
		b = admitted("8 + 5 on a shadow-mode limit", items(limiter.Request{Name: "shadow", Key: "k", Count: 8}, limiter.Request{Name: "shadow", Key: "k", Count: 5}))
		if s := b.Results[1].Shadow; s == nil || s.OK {
			t.Errorf("8 + 5 on a shadow-mode limit: the second's shadow outcome %+v, want a would-be refusal", s)
		}
	})
}
