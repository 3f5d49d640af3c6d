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

// TestGiveBackIsWhatStillCounts: what closing a hold gives back of what it took from one shard,
// by kind, against the value the shard would hold had it never seen the hold.
func TestGiveBackIsWhatStillCounts(t *testing.T) {
	const at = int64(1_700_000_040_000)                                                     // a whole minute
	bucket := Definition{Kind: TokenBucket, Rate: 10, Period: 10_000, Capacity: ptr(100.0)} // 0.001 a ms
	window := Definition{Kind: FixedWindow, Rate: 10, Period: 60_000, Capacity: ptr(100.0), Start: new(int64)}
	month := Definition{Kind: Quota, Rate: 10, Calendar: "month", TimeZone: "UTC"}
	sliding := Definition{Kind: SlidingWindow, Rate: 10, Period: 60_000, Resolution: 10}
	row := func(v float64, ts int64) State { return State{Value: v, TS: ts, Exists: true} }
	for _, c := range []struct {
		name  string
		def   Definition
		took  TakenShard
		state State // the shard's row at the close
		now   int64
		want  float64
	}{
		// Held 10 of a full bucket (90 after); nothing since: at once all, later less (the bucket
		// without the hold was full at at+10 s), and nothing once that is past.
		{"bucket at once", bucket, TakenShard{Took: 10, After: 90}, row(90, at), at, 10},
		{"bucket, partly refilled", bucket, TakenShard{Took: 10, After: 90}, row(90, at), at + 4_000, 6},
		{"bucket, refilled", bucket, TakenShard{Took: 10, After: 90}, row(90, at), at + 11_000, 0},
		// Drained to 0 right after the hold: the bucket never came near full, so all of it.
		{"bucket drained at once", bucket, TakenShard{Took: 10, After: 90}, row(0, at), at + 10_000, 10},
		// Drained at +9 s: up to then it may have held 99, so 1.
		{"bucket drained later", bucket, TakenShard{Took: 10, After: 90}, row(0, at+9_000), at + 10_000, 1},
		{"bucket row gone", bucket, TakenShard{Took: 10, After: 90}, State{}, at + 1, 0},
		// A window of 100 refilling 10 a window: 50 held leave 50; a window later the key without
		// the hold would have 100 (capped), with it 60: 40 still count.
		{"window, same window", window, TakenShard{Took: 50, After: 50}, row(50, at), at + 59_999, 50},
		{"window, the next", window, TakenShard{Took: 50, After: 50}, row(50, at), at + 60_000, 40},
		{"window, five later", window, TakenShard{Took: 50, After: 50}, row(50, at), at + 5*60_000, 0},
		{"quota, same month", month, TakenShard{Took: 4, After: 6}, row(6, at), at + 1_000, 4},
		{"quota, the next month", month, TakenShard{Took: 4, After: 6}, row(6, at), at + 40*86_400_000, 0},
	} {
		taken := Taken{Kind: c.def.Kind, At: at, Shards: []TakenShard{c.took}}
		taken.Refill, taken.Max = ShardNumbers(c.def)
		st := c.state
		if c.def.Kind == FixedWindow && st.Exists {
			st.TS = at - at%60_000 // a window's row stores its start
		}
		if c.def.Kind == Quota && st.Exists {
			st.TS, _ = c.def.Normalized().WindowAt(at)
		}
		_, gave := taken.GiveBack(c.def, []State{st}, 1_000, c.now, 0, nil)
		got := gave[0]
		if math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: gave %v, want %v", c.name, got, c.want)
		}
	}
	// A sliding window: off the sub-interval it was taken in (3 of them there, 4 newer), as far
	// as its count goes; nothing once that sub-interval has left the window.
	def := sliding.Normalized()
	st := []State{{}}
	for _, take := range []struct {
		at    int64
		count float64
	}{{at, 3}, {at + 6_000, 4}} {
		st[0] = Decide(def, st, take.count, false, take.at, 0).Writes[0]
	}
	taken := Taken{Kind: SlidingWindow, At: at, Shards: []TakenShard{{Took: 5}}}
	taken.Refill, taken.Max = ShardNumbers(def)
	if o, got := taken.GiveBack(def, st, 5, at+6_000, 0, nil); got[0] != 3 || o.Writes[0].Counters[len(o.Writes[0].Counters)-2] != 0 ||
		o.Writes[0].Counters[len(o.Writes[0].Counters)-1] != 4 {
		t.Errorf("sliding: gave %v, counters %v; want 3 off the older sub-interval", got, o.Writes[0].Counters)
	}
	if _, got := taken.GiveBack(def, st, 5, at+66_000, 0, nil); got[0] != 0 {
		t.Errorf("sliding, out of the window: gave %v", got)
	}
	// Other numbers now (a capacity changed while held): nothing.
	other := Taken{Kind: TokenBucket, At: at, Shards: []TakenShard{{Took: 10, After: 90}}}
	other.Refill, other.Max = ShardNumbers(bucket)
	if _, got := other.GiveBack(Definition{Kind: TokenBucket, Rate: 10, Period: 10_000, Capacity: ptr(200.0)}, []State{{Value: 90, TS: at, Exists: true}}, 10, at, 0, nil); got[0] != 0 {
		t.Errorf("a capacity changed: gave %v", got)
	}
	// Another kind now: nothing.
	if _, got := (Taken{Kind: TokenBucket, At: at, Shards: []TakenShard{{Took: 4, After: 6}}}).GiveBack(window, []State{{Value: 6, TS: at, Exists: true}}, 4, at, 0, nil); got[0] != 0 {
		t.Errorf("another kind: gave %v", got)
	}
	// Taken 10 of 100, leaving 0; other holds gave 60 back since: the key may have been at 60,
	// and with 40 refilled at 100 (full): nothing. With 30 given back, at most 70: 10 of 10.
	// Unknown (+Inf): nothing. Past an override's expiry (Until): nothing.
	full := Definition{Kind: TokenBucket, Rate: 1, Period: 1_000, Capacity: ptr(100.0)}
	held := Taken{Kind: TokenBucket, At: at, Shards: []TakenShard{{Took: 10, After: 0}}}
	held.Refill, held.Max = ShardNumbers(full)
	rows := []State{{Value: 0, TS: at + 40_000, Exists: true}}
	for _, c := range []struct {
		since float64
		until int64
		want  float64
	}{{60, 0, 0}, {30, 0, 10}, {math.Inf(1), 0, 0}, {0, at + 40_000, 0}, {0, at + 40_001, 10}} {
		h := held
		h.Until = c.until
		if _, got := h.GiveBack(full, rows, 10, at+40_000, 0, []float64{c.since}); got[0] != c.want {
			t.Errorf("given back by others %v, numbers until %d: gave %v, want %v", c.since, c.until, got, c.want)
		}
	}
}

func TestNumbersUntilIsTheFirstExpiryThatCanChangeNumbers(t *testing.T) {
	at := func(ms int64) *int64 { return &ms }
	ix := NewOverrideIndex([]Override{
		{Match: "k", Rate: ptr(1.0), ExpiresAt: at(5_000)},
		{Match: "k*", Rate: ptr(2.0), ExpiresAt: at(20_000)},
		{Match: "a", Action: ActionAllow, ExpiresAt: at(3_000)},
		{Match: "n", Rate: ptr(2.0)},
	})
	for key, want := range map[string]int64{"k": 5_000, "kx": 20_000, "a": 0, "n": 0, "other": 0} {
		if got := ix.NumbersUntil(key, 1_000); got != want {
			t.Errorf("%q: %d, want %d", key, got, want)
		}
	}
	if got := ix.NumbersUntil("k", 6_000); got != 20_000 {
		t.Errorf("after the first expired: %d, want 20000", got)
	}
}

// TestNumbersChangedForWhatAKeysStateIsReadWith: what makes a hold's give-back void (a key's
// state read otherwise) against what does not (how refusals are told, which budgets a decision
// also spends, leases).
func TestNumbersChangedForWhatAKeysStateIsReadWith(t *testing.T) {
	base := Definition{Kind: TokenBucket, Rate: 10, Period: minute}
	same := []Definition{
		{Kind: TokenBucket, Rate: 10, Period: minute, Capacity: ptr(10.0), Shards: 1, Mode: Enforce},
		{Kind: TokenBucket, Rate: 10, Period: minute, Jitter: 5, IPFallback: true, Parents: []Parent{{Name: "org", Key: "o"}}},
	}
	changed := []Definition{
		{Kind: TokenBucket, Rate: 20, Period: minute, Capacity: ptr(10.0)},
		{Kind: TokenBucket, Rate: 10, Period: minute, Capacity: ptr(20.0)},
		{Kind: TokenBucket, Rate: 10, Period: minute, MaxReserved: ptr(5.0)},
		{Kind: GCRA, Rate: 10, Period: minute},
		{Kind: TokenBucket, Rate: 10, Period: minute, Mode: Shadow},
		{Kind: TokenBucket, Rate: 10, Period: minute, Penalty: 1000},
		{Kind: TokenBucket, Rate: 10, Period: 2 * minute},
	}
	for i, d := range same {
		if NumbersChanged(base, d) {
			t.Errorf("same %d: reported a change of numbers", i)
		}
	}
	for i, d := range changed {
		if !NumbersChanged(base, d) {
			t.Errorf("changed %d: no change of numbers reported", i)
		}
	}
}

// TestARefundSplitOverShardsReportsAtMostItsCount: a refund of 2.6 spread over four token-bucket
// shards gives each what it lacks; the parts' floating-point sum was 2.6000000000000005, more
// than the count asked, which Refunded is documented never to be.
func TestARefundSplitOverShardsReportsAtMostItsCount(t *testing.T) {
	now := int64(1_700_000_000_000)
	def := Definition{Kind: TokenBucket, Rate: 5.6, Period: 60_000, Shards: 4}.Normalized()
	states := []State{{Value: 0.5, TS: now, Exists: true}, {Value: 0.2, TS: now, Exists: true},
		{Value: 0.1, TS: now, Exists: true}, {Value: 0.6, TS: now, Exists: true}}
	if _, refunded := Refund(def, states, 2.6, now, 0); refunded > 2.6 {
		t.Fatalf("refunded %v of a refund of 2.6", refunded)
	}
}
