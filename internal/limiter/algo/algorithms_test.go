package algo

import (
	"math"
	"math/rand/v2"
	"testing"
)

func ptr[T any](v T) *T { return &v }

const minute = int64(60_000)

// step is one request in a worked example, applied to a single shard at time at (ms).
type step struct {
	at       int64
	count    float64
	reserve  bool
	wantOK   bool
	wantRA   float64 // NaN: no retryAfter
	wantLeft float64 // remaining after the step
}

func runSteps(t *testing.T, def Definition, steps []step) State {
	t.Helper()
	if err := def.Validate(); err != nil {
		t.Fatalf("invalid definition: %v", err)
	}
	def = def.Normalized()
	var st State
	for i, s := range steps {
		if err := def.CheckCount(s.count, s.reserve); err != nil {
			t.Fatalf("step %d: checkCount: %v", i, err)
		}
		d := Decide(def, []State{st}, s.count, s.reserve, s.at, 0)
		if d.OK != s.wantOK {
			t.Fatalf("step %d at %d: ok = %v, want %v (remaining %v, retryAfter %v)", i, s.at, d.OK, s.wantOK, d.Remaining, d.RetryAfter)
		}
		if math.IsNaN(s.wantRA) != math.IsNaN(d.RetryAfter) || (!math.IsNaN(s.wantRA) && math.Abs(d.RetryAfter-s.wantRA) > 1e-6) {
			t.Fatalf("step %d at %d: retryAfter = %v, want %v", i, s.at, d.RetryAfter, s.wantRA)
		}
		if math.Abs(d.Remaining-s.wantLeft) > 1e-9 {
			t.Fatalf("step %d at %d: remaining = %v, want %v", i, s.at, d.Remaining, s.wantLeft)
		}
		if !d.OK && d.Writes[0].Exists {
			t.Fatalf("step %d: a refusal wrote state %+v", i, d.Writes[0])
		}
		if d.OK {
			st = d.Writes[0]
		}
	}
	return st
}

var none = math.NaN()

func TestTokenBucketRefillsOneTokenPerSixSecondsAndFullyAfterThirty(t *testing.T) {
	def := Definition{Kind: TokenBucket, Rate: 10, Period: minute}
	st := runSteps(t, def, []step{{at: 0, count: 5, wantOK: true, wantRA: none, wantLeft: 5}})
	for _, c := range []struct {
		at   int64
		want float64
	}{{6_000, 6}, {12_000, 7}, {29_999, 10 - 1.0/6000}, {30_000, 10}, {90_000, 10}} {
		if v, _ := Peek(def, st, c.at, 0); math.Abs(v-c.want) > 1e-9 {
			t.Errorf("value at %d ms = %v, want %v", c.at, v, c.want)
		}
	}
}

func TestTokenBucketCapacityAboveRateAllowsABurst(t *testing.T) {
	runSteps(t, Definition{Kind: TokenBucket, Rate: 10, Period: minute, Capacity: ptr(30.0)}, []step{
		{at: 0, count: 30, wantOK: true, wantRA: none, wantLeft: 0},
		{at: 0, count: 1, wantOK: false, wantRA: 6_000, wantLeft: 0},
		{at: 6_000, count: 1, wantOK: true, wantRA: none, wantLeft: 0},
	})
}

func TestTokenBucketReservationGoesNegativeAndSaysWhenToRun(t *testing.T) {
	def := Definition{Kind: TokenBucket, Rate: 10, Period: minute}
	runSteps(t, def, []step{
		{at: 0, count: 7, wantOK: true, wantRA: none, wantLeft: 3},
		{at: 0, count: 5, reserve: true, wantOK: true, wantRA: 12_000, wantLeft: -2}, // time for 2 tokens
		{at: 0, count: 1, wantOK: false, wantRA: 18_000, wantLeft: -2},               // 3 tokens away now
		{at: 12_000, count: 0, wantOK: true, wantRA: none, wantLeft: 0},
	})
}

func TestTokenBucketMaxReservedRefusesDeepReservationsAndWritesNothing(t *testing.T) {
	def := Definition{Kind: TokenBucket, Rate: 10, Period: minute, MaxReserved: ptr(1.0)}
	runSteps(t, def, []step{
		{at: 0, count: 7, wantOK: true, wantRA: none, wantLeft: 3},
		// 2 short is more than maxReserved: it fits once 1 token (6 s) brings the deficit to 1.
		{at: 0, count: 5, reserve: true, wantOK: false, wantRA: 6_000, wantLeft: 3},
		{at: 0, count: 4, reserve: true, wantOK: true, wantRA: 6_000, wantLeft: -1},
	})
}

func TestFixedWindowRetryAfterSpansSeveralWindows(t *testing.T) {
	def := Definition{Kind: FixedWindow, Rate: 10, Period: minute, Start: ptr(int64(0))}
	runSteps(t, def, []step{
		{at: 10_000, count: 10, wantOK: true, wantRA: none, wantLeft: 0},
		// 25 tokens short: the window refills 10 per minute, so 3 windows from ts=0, i.e. at 180 s.
		{at: 20_000, count: 25, reserve: true, wantOK: true, wantRA: 160_000, wantLeft: -25},
		{at: 70_000, count: 1, wantOK: false, wantRA: 110_000, wantLeft: -15}, // 16 short: two more windows, at 180 s
		{at: 180_000, count: 5, wantOK: true, wantRA: none, wantLeft: 0},
	})
}

func TestFixedWindowRefusalWaitsForTheNextWindow(t *testing.T) {
	def := Definition{Kind: FixedWindow, Rate: 5, Period: minute, Start: ptr(int64(0))}
	runSteps(t, def, []step{
		{at: 59_000, count: 5, wantOK: true, wantRA: none, wantLeft: 0},
		{at: 59_500, count: 1, wantOK: false, wantRA: 500, wantLeft: 0},
		{at: 60_000, count: 5, wantOK: true, wantRA: none, wantLeft: 0},
	})
}

func TestFixedWindowWithoutStartUsesAStablePerKeyOffset(t *testing.T) {
	a := Offset(1, "api", "alice", minute)
	if a != Offset(1, "api", "alice", minute) {
		t.Fatal("offset is not stable")
	}
	if a < 0 || a >= minute {
		t.Fatalf("offset %d outside [0, period)", a)
	}
	distinct := map[int64]bool{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		distinct[Offset(1, "api", k, minute)] = true
	}
	if len(distinct) < 6 {
		t.Fatalf("offsets of 8 keys collapse to %d values", len(distinct))
	}
	// The first window of a key starts at its offset.
	def := Definition{Kind: FixedWindow, Rate: 1, Period: minute}.Normalized()
	d := Decide(def, []State{{}}, 1, false, 5*minute+a+10, a)
	if !d.OK || d.Writes[0].TS != 5*minute+a {
		t.Fatalf("window start = %d, want %d", d.Writes[0].TS, 5*minute+a)
	}
}

// slidingHistory puts 100 requests into the first quarter of the first minute.
func slidingHistory(t *testing.T, def Definition) State {
	t.Helper()
	var steps []step
	for i := range 100 {
		steps = append(steps, step{at: int64(i) * 150, count: 1, wantOK: true, wantRA: none, wantLeft: float64(99 - i)})
	}
	return runSteps(t, def, steps)
}

func admitAt(def Definition, st State, at int64) (int, float64) {
	def = def.Normalized()
	n := 0
	for {
		d := Decide(def, []State{st}, 1, false, at, 0)
		if !d.OK {
			return n, d.RetryAfter
		}
		st = d.Writes[0]
		n++
	}
}

func TestSlidingWindowAtOneAndAQuarterMinutesAdmitsTwentyFiveMore(t *testing.T) {
	def := Definition{Kind: SlidingWindow, Rate: 100, Period: minute}
	st := slidingHistory(t, def)
	n, ra := admitAt(def, st, 75_000)
	if n != 25 {
		t.Fatalf("admitted %d at 1.25 min, want 25 (24 + the current one)", n)
	}
	// Full at 75 s: estimate 25 + 100*(1-f); one more fits once 100*(1-f) <= 74, at f = 0.26.
	if math.Abs(ra-600) > 1e-6 {
		t.Fatalf("retryAfter = %v, want 600", ra)
	}
}

func TestSlidingWindowWithResolutionTwoAdmitsFifty(t *testing.T) {
	def := Definition{Kind: SlidingWindow, Rate: 100, Period: minute, Resolution: 2}
	st := slidingHistory(t, def)
	if n, _ := admitAt(def, st, 75_000); n != 50 {
		t.Fatalf("admitted %d at 1.25 min with resolution 2, want 50", n)
	}
}

func TestSlidingWindowRetryAfterWhenTheWindowIsFull(t *testing.T) {
	def := Definition{Kind: SlidingWindow, Rate: 100, Period: minute}
	st := slidingHistory(t, def)
	// At 30 s the current window holds 100: the next request fits when the previous-window
	// weight has room, i.e. one whole window later plus 1% into the next: 60 s + 0.6 s.
	n, ra := admitAt(def, st, 30_000)
	if n != 0 || math.Abs(ra-30_600) > 1e-6 {
		t.Fatalf("at 30 s admitted %d, retryAfter %v; want 0 and 30600", n, ra)
	}
}

func TestSlidingWindowStorageIsBoundedByResolution(t *testing.T) {
	def := Definition{Kind: SlidingWindow, Rate: 1000, Period: minute, Resolution: 6}.Normalized()
	var st State
	for i := range 500 {
		d := Decide(def, []State{st}, 1, false, int64(i)*997, 0)
		if d.OK {
			st = d.Writes[0]
		}
		if len(st.Counters) > 7 {
			t.Fatalf("%d counters after %d requests", len(st.Counters), i)
		}
	}
}

func TestCountAboveCapacityCanNeverSucceed(t *testing.T) {
	cases := []struct {
		def     Definition
		count   float64
		reserve bool
		wantErr bool
	}{
		{Definition{Kind: TokenBucket, Rate: 10, Period: minute}, 11, false, true},
		{Definition{Kind: TokenBucket, Rate: 10, Period: minute}, 10, false, false},
		{Definition{Kind: TokenBucket, Rate: 10, Period: minute}, 11, true, false},
		{Definition{Kind: TokenBucket, Rate: 10, Period: minute, MaxReserved: ptr(5.0)}, 16, true, true},
		{Definition{Kind: FixedWindow, Rate: 10, Period: minute, Capacity: ptr(20.0)}, 20, false, false},
		{Definition{Kind: SlidingWindow, Rate: 10, Period: minute}, 11, false, true},
		{Definition{Kind: TokenBucket, Rate: 100, Period: minute, Shards: 10}, 20, false, false},
		{Definition{Kind: TokenBucket, Rate: 100, Period: minute, Shards: 10}, 21, false, true},
		{Definition{Kind: TokenBucket, Rate: 100, Period: minute, Shards: 10}, 21, true, true},
	}
	for i, c := range cases {
		err := c.def.CheckCount(c.count, c.reserve)
		if (err != nil) != c.wantErr {
			t.Errorf("case %d: checkCount(%v, reserve=%v) = %v, want error %v", i, c.count, c.reserve, err, c.wantErr)
		}
	}
	if err := (Definition{Kind: SlidingWindow, Rate: 10, Period: minute}).CheckCount(1, true); err == nil {
		t.Error("a sliding window accepted reserve")
	}
}

func TestShardsUseTheFullerOfTwoAndPoolWhenNeitherSuffices(t *testing.T) {
	def := Definition{Kind: TokenBucket, Rate: 40, Period: minute, Shards: 4}.Normalized() // 10 per shard
	a := State{Value: 3, TS: 0, Exists: true}
	b := State{Value: 8, TS: 0, Exists: true}
	d := Decide(def, []State{a, b}, 5, false, 0, 0)
	if !d.OK || d.Writes[0].Exists || d.Writes[1].Value != 3 {
		t.Fatalf("fuller shard alone: %+v", d)
	}
	d = Decide(def, []State{a, b}, 9, false, 0, 0)
	if !d.OK || d.Writes[0].Value != 1 || d.Writes[1].Value != 1 {
		t.Fatalf("pooled: each shard should keep half of 3+8-9: %+v", d)
	}
	d = Decide(def, []State{a, b}, 12, false, 0, 0)
	if d.OK || d.Writes[0].Exists || d.Writes[1].Exists {
		t.Fatalf("12 > 3+8 must be refused without writes: %+v", d)
	}
	// The pooled deficit of 1 refills at twice one shard's rate: 1 token at 20/min = 3 s.
	if math.Abs(d.RetryAfter-3_000) > 1e-6 {
		t.Fatalf("retryAfter = %v, want 3000", d.RetryAfter)
	}
}

func TestSlidingWindowShardsPoolHeadroom(t *testing.T) {
	def := Definition{Kind: SlidingWindow, Rate: 30, Period: minute, Shards: 3}.Normalized() // 10 per shard
	a := State{TS: 0, Counters: []float64{0, 6}, Exists: true}
	b := State{TS: 0, Counters: []float64{0, 7}, Exists: true}
	d := Decide(def, []State{a, b}, 5, false, 1000, 0)
	if !d.OK || d.Remaining != 2 {
		t.Fatalf("pooled 4+3 headroom for 5: %+v", d)
	}
	if d.Writes[0].Value != 1 || d.Writes[1].Value != 1 {
		t.Fatalf("each shard should end with half the headroom: %+v %+v", d.Writes[0], d.Writes[1])
	}
	if got := d.Writes[0].Counters[1] + d.Writes[1].Counters[1]; got != 18 {
		t.Fatalf("counters sum %v, want 18", got)
	}
}

func TestStoredTimestampNeverMovesBackwards(t *testing.T) {
	for _, def := range []Definition{
		{Kind: TokenBucket, Rate: 10, Period: minute},
		{Kind: FixedWindow, Rate: 10, Period: minute, Start: ptr(int64(0))},
		{Kind: SlidingWindow, Rate: 10, Period: minute, Resolution: 4},
	} {
		def = def.Normalized()
		st := Decide(def, []State{{}}, 1, false, 100_000, 0).Writes[0]
		d := Decide(def, []State{st}, 1, false, 40_000, 0) // a clock 60 s behind
		if d.OK && d.Writes[0].TS < st.TS {
			t.Errorf("%s: ts moved back from %d to %d", def.Kind, st.TS, d.Writes[0].TS)
		}
		if d.OK && d.Writes[0].Value > st.Value {
			t.Errorf("%s: a slow clock minted tokens: %v -> %v", def.Kind, st.Value, d.Writes[0].Value)
		}
	}
}

func TestValidateReportsEveryBadField(t *testing.T) {
	err := Definition{Kind: "leaky", Rate: -1, Period: 0, Shards: 2000, Jitter: -5, Resolution: 3}.Validate()
	ve, ok := err.(*ValidationError)
	if !ok || ve.Code != "invalid_config" {
		t.Fatalf("got %v", err)
	}
	fields := map[string]bool{}
	for _, f := range ve.Fields {
		fields[f.Field] = true
	}
	for _, want := range []string{"kind", "rate", "period", "shards", "jitter", "resolution"} {
		if !fields[want] {
			t.Errorf("no error for %s in %v", want, ve.Fields)
		}
	}
	if err := (Definition{Kind: SlidingWindow, Rate: 1, Period: 1000, Capacity: ptr(2.0)}).Validate(); err == nil {
		t.Error("sliding window accepted capacity")
	}
	if err := (Definition{Kind: TokenBucket, Rate: math.Inf(1), Period: 1000}).Validate(); err == nil {
		t.Error("accepted an infinite rate")
	}
	if err := (Definition{Kind: TokenBucket, Rate: math.NaN(), Period: 1000}).Validate(); err == nil {
		t.Error("accepted a NaN rate")
	}
}

// TestExtremeDefinitionsNeverSayRetryNow: a valid but extreme fixed window (a millionth of a
// millionth per day) needs more windows than int64 milliseconds can count; the refusal must
// still say "much later" (clamped to MaxRetryAfter), never 0.
func TestExtremeDefinitionsNeverSayRetryNow(t *testing.T) {
	const now = int64(1_700_000_000_000)
	for _, d := range []Definition{
		{Kind: FixedWindow, Rate: 1e-12, Period: 86_400_000},
		{Kind: TokenBucket, Rate: 1e-12, Period: 86_400_000},
		{Kind: FixedWindow, Rate: math.SmallestNonzeroFloat64, Period: maxPeriod},
	} {
		d = d.Normalized()
		if err := d.Validate(); err != nil {
			t.Fatalf("%+v: %v", d, err)
		}
		empty := State{Value: 0, TS: now, Exists: true}
		got := Decide(d, []State{empty}, 1, false, now, 0)
		if got.OK {
			t.Fatalf("%+v: admitted with nothing left", d)
		}
		if ms := RetryAfterMillis(got.RetryAfter); ms != MaxRetryAfter {
			t.Fatalf("%+v: retryAfter %v ms (raw %v), want the maximum %d", d, ms, got.RetryAfter, MaxRetryAfter)
		}
	}
}

func TestRetryAfterMillisIsNeverZero(t *testing.T) {
	for _, ms := range []float64{-5, 0, 1e-9, 0.5} {
		if got := RetryAfterMillis(ms); got != 1 {
			t.Errorf("RetryAfterMillis(%v) = %d, want 1", ms, got)
		}
	}
	if got := RetryAfterMillis(math.Inf(1)); got != MaxRetryAfter {
		t.Errorf("RetryAfterMillis(+Inf) = %d", got)
	}
}

// TestEveryCountCheckCountAcceptsIsAdmittedByAFullKey: a count CheckCount lets through (no
// reservation) is admitted by a key whose shards are full, for counts a few ulps either side of
// the capacity, so that no count is refused for ever with a retryAfter (it is 400 instead).
func TestEveryCountCheckCountAcceptsIsAdmittedByAFullKey(t *testing.T) {
	for _, def := range []Definition{
		{Kind: TokenBucket, Rate: 1000, Period: 1000},
		{Kind: TokenBucket, Rate: 10, Period: 1000, Capacity: ptr(0.3)},
		{Kind: TokenBucket, Rate: 10, Period: 1000, Shards: 3},
		{Kind: TokenBucket, Rate: 10, Period: 1000, Capacity: ptr(7.1), Shards: 7},
		{Kind: FixedWindow, Rate: 0.7, Period: 1000, Start: new(int64)},
		{Kind: FixedWindow, Rate: 10, Period: 1000, Start: new(int64), Shards: 3},
		{Kind: SlidingWindow, Rate: 1 / 3.0, Period: 1000},
		{Kind: GCRA, Rate: 10, Period: 1000, Capacity: ptr(1e15)},
	} {
		def = def.Normalized()
		usable := def.Max() / float64(def.Shards) * float64(min(def.Shards, 2))
		count := usable
		for range 8 {
			count = math.Nextafter(count, 0)
		}
		for range 16 {
			if def.CheckCount(count, false) == nil {
				if d := Decide(def, make([]State, min(def.Shards, 2)), count, false, 1_700_000_000_000, 0); !d.OK {
					t.Errorf("%+v: count %v (capacity's share %v) passes CheckCount but a full key refuses it (retryAfter %v)", def, count, usable, d.RetryAfter)
				}
			}
			count = math.Nextafter(count, math.Inf(1))
		}
	}
}

// TestARefusalsRetryAfterIsWhenTheSameRequestFits: for random states of two pooled shards (and
// of one), a refused request asked again at retryAfter, with nothing consumed in between, is
// admitted: each shard refills only up to its maximum, so a full shard adds nothing to the pool.
func TestARefusalsRetryAfterIsWhenTheSameRequestFits(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	defs := []Definition{
		{Kind: TokenBucket, Rate: 10, Period: 10_000, Shards: 2},
		{Kind: TokenBucket, Rate: 7, Period: 3_000, Capacity: ptr(20.0), Shards: 4},
		{Kind: TokenBucket, Rate: 10, Period: 10_000},
		{Kind: FixedWindow, Rate: 10, Period: 10_000, Start: new(int64), Shards: 2},
		{Kind: FixedWindow, Rate: 7, Period: 3_000, Capacity: ptr(20.0), Start: new(int64), Shards: 2},
		{Kind: FixedWindow, Rate: 10, Period: 10_000, Start: new(int64)},
	}
	for _, def := range defs {
		def = def.Normalized()
		shardMax := def.Max() / float64(def.Shards)
		for trial := range 2000 {
			now := int64(1_700_000_000_000) + int64(r.IntN(10_000))
			states := make([]State, min(def.Shards, 2))
			for i := range states {
				states[i] = State{Value: r.Float64() * shardMax, TS: now - int64(r.IntN(3_000)), Exists: true}
				if r.IntN(4) == 0 {
					states[i].Value = shardMax // full
					states[i].TS = now
				}
			}
			count := math.Ceil(r.Float64() * shardMax * float64(len(states)))
			d := Decide(def, states, count, false, now, 0)
			if d.OK {
				continue
			}
			at := now + RetryAfterMillis(d.RetryAfter)
			if again := Decide(def, states, count, false, at, 0); !again.OK {
				t.Fatalf("%s, trial %d: %v of %+v refused with retryAfter %v, and refused again then (retryAfter %v)",
					def.Kind, trial, count, states, d.RetryAfter, again.RetryAfter)
			}
		}
	}
}
