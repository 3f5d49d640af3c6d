package algo

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRefundGivesBackAtMostWhatWasTakenAndNeverAboveTheMaximum: for every kind, after random
// consumptions, a refund of r gives back min(r, what is missing): a bucket or window never holds
// more than its maximum, a sliding window's counts never go below zero, and the refunded amount
// is exactly the gain in what the key may take next.
func TestRefundGivesBackAtMostWhatWasTakenAndNeverAboveTheMaximum(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	capacity := 10.0
	defs := map[string]Definition{
		"token bucket":   {Kind: TokenBucket, Rate: 10, Period: 60_000},
		"gcra":           {Kind: GCRA, Rate: 10, Period: 60_000, Capacity: &capacity},
		"fixed window":   {Kind: FixedWindow, Rate: 10, Period: 60_000, Start: new(int64)},
		"sliding window": {Kind: SlidingWindow, Rate: 10, Period: 60_000, Resolution: 4},
		"sharded":        {Kind: TokenBucket, Rate: 10, Period: 60_000, Shards: 2},
	}
	for name, def := range defs {
		def = def.Normalized()
		for trial := range 300 {
			now := int64(1_700_000_000_000) + int64(trial)*1000
			states := make([]State, min(def.Shards, 2))
			for range r.IntN(6) {
				d := Decide(def, states, float64(r.IntN(4)), false, now, 0)
				for i, w := range d.Writes {
					if w.Exists {
						states[i] = w
					}
				}
				now += int64(r.IntN(3000))
			}
			before := Decide(def, states, 0, false, now, 0).Remaining
			if len(states) == 2 {
				before = Peek2(def, states, now)
			}
			count := float64(r.IntN(12))
			out, refunded := Refund(def, states, count, now, 0)
			if refunded < 0 || refunded > count+1e-9 {
				t.Fatalf("%s: refunded %v of %v", name, refunded, count)
			}
			after := out.Remaining
			if math.Abs(after-(before+refunded)) > 1e-9 && def.Kind != SlidingWindow {
				t.Fatalf("%s: %v before, %v refunded, %v after", name, before, refunded, after)
			}
			if after > def.Max()*1.0000001 {
				t.Fatalf("%s: %v after a refund, above the maximum %v", name, after, def.Max())
			}
			for i, w := range out.Writes {
				if !w.Exists {
					continue
				}
				for _, c := range w.Counters {
					if c < 0 {
						t.Fatalf("%s: a count went below zero: %v", name, w.Counters)
					}
				}
				states[i] = w
			}
			// Nothing the refund wrote lets more through than the limit's maximum now.
			if got := Decide(def, states, 0, false, now, 0).Remaining; len(states) == 1 && got > def.Max()*1.0000001 {
				t.Fatalf("%s: %v available after a refund", name, got)
			}
		}
	}
}

// Peek2 is the sum over two shards of what they hold at now.
func Peek2(def Definition, states []State, now int64) float64 {
	var sum float64
	for _, st := range states {
		v, _ := Peek(def, st, now, 0)
		sum += v
	}
	return sum
}

func TestRefundExamples(t *testing.T) {
	now := int64(1_700_000_000_000)
	tb := Definition{Kind: TokenBucket, Rate: 10, Period: 3_600_000}.Normalized()
	st := State{Value: 3, TS: now, Exists: true, PenaltyUntil: now + 5000}
	out, got := Refund(tb, []State{st}, 4, now, 0)
	if got != 4 || out.Writes[0].Value != 7 || out.Writes[0].PenaltyUntil != now+5000 {
		t.Fatalf("token bucket: refunded %v, wrote %+v (a refund keeps a running penalty)", got, out.Writes[0])
	}
	if out, got = Refund(tb, []State{st}, 100, now, 0); got != 7 || out.Writes[0].Value != 10 {
		t.Fatalf("token bucket over its capacity: refunded %v, wrote %+v", got, out.Writes[0])
	}
	if out, got = Refund(tb, []State{{}}, 5, now, 0); got != 0 || out.Writes[0].Exists {
		t.Fatalf("a full (absent) key: refunded %v, wrote %+v", got, out.Writes[0])
	}
	sw := Definition{Kind: SlidingWindow, Rate: 10, Period: 4000, Resolution: 4}.Normalized()
	n, _ := subInterval(sw.shardParams(), now)
	sst := State{Value: 4, TS: subIntervalStart(sw.shardParams(), n), Counters: []float64{0, 1, 2, 0, 3}, Exists: true}
	out, got = Refund(sw, []State{sst}, 4, now, 0)
	if got != 4 || out.Writes[0].Counters[4] != 0 || out.Writes[0].Counters[3] != 0 || out.Writes[0].Counters[2] != 1 || out.Writes[0].Counters[1] != 1 {
		t.Fatalf("sliding window: refunded %v, counters %v (newest first, never below zero)", got, out.Writes[0].Counters)
	}
}

// TestRefundOverEveryShardGivesBackAllThatFits: given every shard of a sharded limit (what a
// hold gives back), a refund gives back exactly min(count, what the shards lack together), no
// shard above its maximum: however decisions spread what they took over the shards.
func TestRefundOverEveryShardGivesBackAllThatFits(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for _, def := range []Definition{
		{Kind: FixedWindow, Rate: 40, Period: 60_000, Start: new(int64), Shards: 5},
		{Kind: Quota, Rate: 40, Calendar: "month", TimeZone: "UTC", Shards: 4},
	} {
		def = def.Normalized()
		shardMax := def.shardParams().max
		for trial := range 300 {
			now := int64(1_700_000_000_000) + int64(trial)
			states := make([]State, def.Shards)
			for range r.IntN(20) { // decisions on two random shards each, as the engine makes them
				a, b := r.IntN(def.Shards), r.IntN(def.Shards-1)
				if b >= a {
					b++
				}
				pair := []State{states[a], states[b]}
				d := Decide(def, pair, float64(1+r.IntN(6)), false, now, 0)
				for k, i := range []int{a, b} {
					if d.Writes[k].Exists {
						states[i] = d.Writes[k]
					}
				}
			}
			lack := 0.0
			for _, st := range states {
				lack += shardMax - viewOf(def.shardParams(), st, now, 0).avail
			}
			count := float64(r.IntN(50))
			out, refunded := Refund(def, states, count, now, 0)
			if want := math.Min(count, lack); math.Abs(refunded-want) > 1e-9 {
				t.Fatalf("%s: refunded %v of %v over every shard, which lacked %v together: want %v", def.Kind, refunded, count, lack, want)
			}
			for i, w := range out.Writes {
				if w.Exists && w.Value > shardMax+1e-9 {
					t.Fatalf("%s: shard %d holds %v after the refund, above its maximum %v", def.Kind, i, w.Value, shardMax)
				}
			}
		}
	}
}

// TestReturnableIsWhatStillCounts: what closing a hold may give back, by kind, at the edges.
func TestReturnableIsWhatStillCounts(t *testing.T) {
	const at = int64(1_700_000_040_000) // a whole minute
	month := Definition{Kind: Quota, Rate: 10, Calendar: "month"}
	for _, c := range []struct {
		name string
		def  Definition
		t    Taken
		now  int64
		want float64
	}{
		{"bucket at once", Definition{Kind: TokenBucket, Rate: 10, Period: 10_000}, Taken{Kind: TokenBucket, At: at, Count: 4, Room: 10, Refill: 0.001}, at, 4},
		{"bucket, refill short of the room", Definition{Kind: TokenBucket, Rate: 10, Period: 10_000}, Taken{Kind: TokenBucket, At: at, Count: 4, Room: 10, Refill: 0.001}, at + 7_000, 3},
		{"bucket, refill past the room", Definition{Kind: TokenBucket, Rate: 10, Period: 10_000}, Taken{Kind: TokenBucket, At: at, Count: 4, Room: 10, Refill: 0.001}, at + 11_000, 0},
		{"bucket, a clock behind the hold's", Definition{Kind: TokenBucket, Rate: 10, Period: 10_000}, Taken{Kind: TokenBucket, At: at, Count: 4, Room: 10, Refill: 0.001}, at - 5_000, 4},
		{"gcra is a bucket", Definition{Kind: GCRA, Rate: 10, Period: 10_000}, Taken{Kind: TokenBucket, At: at, Count: 4, Room: 10}, at, 4},
		{"fixed window, same window", Definition{Kind: FixedWindow, Rate: 10, Period: 60_000, Start: new(int64)}, Taken{Kind: FixedWindow, At: at, Count: 4}, at + 59_999, 4},
		{"fixed window, the next", Definition{Kind: FixedWindow, Rate: 10, Period: 60_000, Start: new(int64)}, Taken{Kind: FixedWindow, At: at, Count: 4}, at + 60_000, 0},
		{"quota, same month", month, Taken{Kind: Quota, At: at, Count: 4}, at + 1_000, 4},
		{"quota, the next month", month, Taken{Kind: Quota, At: at, Count: 4}, at + 40*86_400_000, 0},
		{"sliding, still counted", Definition{Kind: SlidingWindow, Rate: 10, Period: 60_000, Resolution: 10}, Taken{Kind: SlidingWindow, At: at, Count: 4}, at + 65_999, 4},
		{"sliding, out of the window", Definition{Kind: SlidingWindow, Rate: 10, Period: 60_000, Resolution: 10}, Taken{Kind: SlidingWindow, At: at, Count: 4}, at + 66_000, 0},
		{"another kind now", Definition{Kind: FixedWindow, Rate: 10, Period: 60_000, Start: new(int64)}, Taken{Kind: TokenBucket, At: at, Count: 4, Room: 10}, at, 0},
		{"nothing taken", Definition{Kind: FixedWindow, Rate: 10, Period: 60_000, Start: new(int64)}, Taken{Kind: FixedWindow, At: at}, at, 0},
	} {
		if got := c.t.Returnable(c.def, c.now, 0); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestRefundAtTakesOffTheSubIntervalOfTheTaking: a sliding window's give-back comes off the
// sub-interval it was taken in, as far as its count there goes, and off none once it is gone.
func TestRefundAtTakesOffTheSubIntervalOfTheTaking(t *testing.T) {
	def := Definition{Kind: SlidingWindow, Rate: 10, Period: 60_000, Resolution: 2}.Normalized()
	const at = int64(1_700_000_040_000) // sub-intervals of 30 s start here
	st := []State{{}}
	for _, take := range []struct {
		at    int64
		count float64
	}{{at, 3}, {at + 30_000, 4}} {
		d := Decide(def, st, take.count, false, take.at, 0)
		st[0] = d.Writes[0]
	}
	now := at + 30_000
	for _, c := range []struct {
		from         int64
		count, given float64
		counters     []float64
	}{
		{at, 5, 3, []float64{0, 0, 4}},          // only the 3 of its sub-interval
		{at + 30_000, 2, 2, []float64{0, 3, 2}}, // off the newer one
		{at - 30_000, 2, 0, []float64{0, 3, 4}}, // a sub-interval no longer counted
		{at + 60_000, 2, 0, []float64{0, 3, 4}}, // one that has not begun
	} {
		o, given := RefundAt(def, st, c.count, now, 0, c.from)
		got := st[0].Counters
		if o.Writes[0].Exists {
			got = o.Writes[0].Counters
		}
		if given != c.given || len(got) != len(c.counters) || got[0] != c.counters[0] || got[1] != c.counters[1] || got[2] != c.counters[2] {
			t.Errorf("from %d: gave %v, counters %v; want %v, %v", c.from, given, got, c.given, c.counters)
		}
	}
}
