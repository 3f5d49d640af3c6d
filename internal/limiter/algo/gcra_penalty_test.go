package algo

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestGCRAIsTheTokenBucketUnderItsOtherName runs random request sequences through a definition
// of kind "gcra" and the same definition as a "token bucket": every outcome (admission,
// retryAfter, remaining, state written) is identical, so the alias is only a name.
func TestGCRAIsTheTokenBucketUnderItsOtherName(t *testing.T) {
	r := rand.New(rand.NewPCG(14, 6))
	for run := range 300 {
		tb := randomDefinition(r, TokenBucket)
		g := tb
		g.Kind = GCRA
		if err := g.Validate(); err != nil {
			t.Fatalf("gcra rejected: %v", err)
		}
		if StateShapeChanged(tb, g) || StateShapeChanged(g, tb) {
			t.Fatal("renaming a token bucket to gcra must keep its state")
		}
		var stTB, stG State
		now := int64(1_700_000_000_000)
		for step := range 60 {
			now += int64(r.IntN(3000))
			count := float64(r.IntN(int(math.Max(tb.Max(), 1))) + 1)
			reserve := r.IntN(5) == 0
			if tb.CheckCount(count, reserve) != nil {
				continue
			}
			a := Decide(tb, []State{stTB}, count, reserve, now, 0)
			b := Decide(g, []State{stG}, count, reserve, now, 0)
			if a.OK != b.OK || !sameFloat(a.RetryAfter, b.RetryAfter) || a.Remaining != b.Remaining || !sameState(a.Writes[0], b.Writes[0]) {
				t.Fatalf("run %d step %d: token bucket %+v, gcra %+v", run, step, a, b)
			}
			if a.OK {
				stTB, stG = a.Writes[0], b.Writes[0]
			}
		}
	}
}

// TestGCRAMatchesTheTheoreticalArrivalTimeModel checks kind "gcra" against the textbook GCRA
// (an independent model kept as a theoretical arrival time, TAT): with emission interval
// T = period / rate and burst B = capacity, a request at t conforms when max(TAT, t) - t <=
// (B - 1) * T, and then TAT becomes max(TAT, t) + T; a non-conforming one may retry after
// max(TAT, t) - (B - 1) * T - t. Times are whole milliseconds, and rate and T powers of two, so
// that the token bucket's floating point is exact and the two must agree to the millisecond.
func TestGCRAMatchesTheTheoreticalArrivalTimeModel(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 14))
	for run := range 300 {
		rate := float64(int64(1) << r.IntN(5))
		emission := int64(1) << r.IntN(9) // T, ms per request
		burst := float64(1 + r.IntN(10))
		def := Definition{Kind: GCRA, Rate: rate, Period: int64(rate) * emission, Capacity: &burst}.Normalized()
		var st State
		var tat int64
		now := int64(1_700_000_000_000)
		tolerance := int64(burst-1) * emission
		for step := range 80 {
			now += int64(r.IntN(int(2*emission) + 1))
			got := Decide(def, []State{st}, 1, false, now, 0)
			arrival := max(tat, now)
			conforms := arrival-now <= tolerance
			if got.OK != conforms {
				t.Fatalf("run %d step %d (T=%d B=%v): gcra ok=%v, TAT model %v", run, step, emission, burst, got.OK, conforms)
			}
			if conforms {
				tat = arrival + emission
				st = got.Writes[0]
				continue
			}
			if want := arrival - tolerance - now; RetryAfterMillis(got.RetryAfter) != want {
				t.Fatalf("run %d step %d: retryAfter %v, TAT model %d", run, step, got.RetryAfter, want)
			}
		}
	}
}

func sameFloat(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }

func sameState(a, b State) bool {
	return a.Value == b.Value && a.TS == b.TS && a.Exists == b.Exists && a.PenaltyUntil == b.PenaltyUntil && len(a.Counters) == len(b.Counters)
}

func TestPenaltyRefusesForExactlyThePenaltyAfterTheRefusal(t *testing.T) {
	capacity := 2.0
	def := Definition{Kind: TokenBucket, Rate: 10, Period: 1000, Capacity: &capacity, Penalty: 5000}.Normalized()
	t0 := int64(1_700_000_000_000)
	first := Decide(def, []State{{}}, 2, false, t0, 0)
	if !first.OK || first.PenaltyUntil != 0 {
		t.Fatalf("admission: %+v", first)
	}
	st := first.Writes[0]
	refused := Decide(def, []State{st}, 1, false, t0, 0)
	if refused.OK || refused.Penalized || refused.PenaltyUntil != t0+5000 || refused.RetryAfter != 5000 {
		t.Fatalf("the limit's refusal starts the penalty with retryAfter = penalty: %+v", refused)
	}
	if refused.Writes[0].Exists {
		t.Fatal("a refusal writes no consumption")
	}
	st = WithPenalty(def, st, t0, 0, refused.PenaltyUntil)
	if st.Value != 0 || st.TS != t0 || st.PenaltyUntil != t0+5000 {
		t.Fatalf("WithPenalty changed the tokens: %+v", st)
	}
	// Refill makes the bucket full long before the penalty ends; the key is still refused.
	for _, at := range []int64{t0 + 1, t0 + 200, t0 + 4999} {
		d := Decide(def, []State{st}, 1, false, at, 0)
		if d.OK || !d.Penalized || d.PenaltyUntil != 0 || d.RetryAfter != float64(t0+5000-at) || d.Remaining != 2*math.Min(1, float64(at-t0)/200) {
			t.Fatalf("at +%d ms: %+v", at-t0, d)
		}
	}
	// The penalty's refusals did not renew it: exactly penalty ms after the refusal it admits.
	if d := Decide(def, []State{st}, 2, false, t0+5000, 0); !d.OK || d.Writes[0].PenaltyUntil != 0 {
		t.Fatalf("at the penalty's end: %+v", d)
	}
	// A refusal whose own wait is longer than the penalty keeps its own retryAfter.
	slow := Definition{Kind: TokenBucket, Rate: 1, Period: 60_000, Penalty: 1000}.Normalized()
	d := Decide(slow, []State{{Value: 0, TS: t0, Exists: true}}, 1, false, t0, 0)
	if d.OK || d.RetryAfter != 60_000 || d.PenaltyUntil != t0+1000 {
		t.Fatalf("long own wait: %+v", d)
	}
}

// TestALookAtTheBalanceStartsNoPenalty: a decision of count 0 (Envoy's hits_addend 0: a gateway
// looking at a budget) on a key in reservation debt is refused, as the key is past its limit,
// but it consumed nothing and asked for nothing, so it starts no penalty; a count of 1 does.
func TestALookAtTheBalanceStartsNoPenalty(t *testing.T) {
	reserved := 100.0
	def := Definition{Kind: TokenBucket, Rate: 10, Period: 10_000, MaxReserved: &reserved, Penalty: 600_000}.Normalized()
	t0 := int64(1_700_000_000_000)
	debt := []State{{Value: -5, TS: t0, Exists: true}}
	if d := Decide(def, debt, 0, false, t0, 0); d.OK || d.PenaltyUntil != 0 || d.Penalized {
		t.Fatalf("count 0 in debt: %+v; want refused, no penalty", d)
	}
	if d := Decide(def, debt, 1, false, t0, 0); d.OK || d.PenaltyUntil != t0+600_000 {
		t.Fatalf("count 1 in debt: %+v; want refused with the penalty started", d)
	}
}

func TestPenaltyValidation(t *testing.T) {
	for _, tc := range []struct {
		def  Definition
		want string
	}{
		{Definition{Kind: TokenBucket, Rate: 1, Period: 1000, Penalty: -1}, "penalty"},
		{Definition{Kind: TokenBucket, Rate: 1, Period: 1000, Penalty: MaxPenalty + 1}, "penalty"},
		{Definition{Kind: TokenBucket, Rate: 1, Period: 1000, Penalty: 10, Shards: 2}, "penalty"},
		{Definition{Kind: TokenBucket, Rate: 1, Period: 1000, Mode: "dry-run"}, "mode"},
		{Definition{Kind: "GCRA", Rate: 1, Period: 1000}, "kind"},
	} {
		err := tc.def.Validate()
		ve, ok := err.(*ValidationError)
		if !ok || ve.Code != CodeInvalidConfig || len(ve.Fields) != 1 || ve.Fields[0].Field != tc.want {
			t.Errorf("%+v: got %v, want invalid_config on %s", tc.def, err, tc.want)
		}
	}
	for _, ok := range []Definition{
		{Kind: GCRA, Rate: 1, Period: 1000, Penalty: MaxPenalty, Mode: Shadow},
		{Kind: SlidingWindow, Rate: 1, Period: 1000, Penalty: 1, Mode: Enforce},
		{Kind: FixedWindow, Rate: 1, Period: 1000, Shards: 4, Mode: Shadow},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

// TestPenaltyStateReadsAsMissingOnlyAfterItEnds: a row written only to hold a penalty (the key
// had no state) is the full state, so it gives nothing away, and the sweeper may delete it once
// the penalty is over, never before.
func TestPenaltyStateReadsAsMissingOnlyAfterItEnds(t *testing.T) {
	t0 := int64(1_700_000_000_000)
	start := int64(0)
	for _, def := range []Definition{
		{Kind: TokenBucket, Rate: 3, Period: 1000, Penalty: 700},
		{Kind: FixedWindow, Rate: 3, Period: 1000, Start: &start, Penalty: 700},
		{Kind: SlidingWindow, Rate: 3, Period: 1000, Resolution: 4, Penalty: 700},
	} {
		def = def.Normalized()
		st := WithPenalty(def, State{}, t0, 0, t0+700)
		if v, _ := Peek(def, st, t0, 0); v != def.Max() {
			t.Fatalf("%s: the penalty row is not full: %v", def.Kind, v)
		}
		if ReadsAsMissing(def, st, 0, t0+699) {
			t.Fatalf("%s: swept while the penalty runs", def.Kind)
		}
		if !ReadsAsMissing(def, st, 0, t0+700, t0+5000) {
			t.Fatalf("%s: kept after the penalty ended", def.Kind)
		}
	}
}

// TestFullAtIsWhenPeekReadsFullAgain checks FullAt against the formula of each kind on worked
// examples, then, on random histories, against Peek: full at FullAt, not full a millisecond
// before.
func TestFullAtIsWhenPeekReadsFullAgain(t *testing.T) {
	t0 := int64(1_700_000_000_000)
	start := int64(0)
	tb := Definition{Kind: TokenBucket, Rate: 10, Period: 60_000}.Normalized()
	// 4 of 10 tokens used at t0: 6 s per token.
	if got := FullAt(tb, State{Value: 6, TS: t0, Exists: true}, t0+1000, 0); got != t0+24_000 {
		t.Errorf("token bucket: %d, want t0+24000", got-t0)
	}
	// Reserved below zero: 12 tokens missing.
	if got := FullAt(tb, State{Value: -2, TS: t0, Exists: true}, t0, 0); got != t0+72_000 {
		t.Errorf("token bucket below zero: %d, want t0+72000", got-t0)
	}
	if got := FullAt(tb, State{}, t0, 0); got != t0 {
		t.Errorf("no state: %d, want now", got-t0)
	}
	fw := Definition{Kind: FixedWindow, Rate: 10, Period: 60_000, Start: &start}.Normalized()
	ws := t0 - t0%60_000
	// 3 used in the current window: full at the next window; 25 missing (capacity 30): 3 windows.
	if got := FullAt(fw, State{Value: 7, TS: ws, Exists: true}, ws+5000, 0); got != ws+60_000 {
		t.Errorf("fixed window: %d, want the next window", got-ws)
	}
	fw30 := fw
	fw30.Capacity = ptr(30.0)
	if got := FullAt(fw30, State{Value: 5, TS: ws, Exists: true}, ws+5000, 0); got != ws+180_000 {
		t.Errorf("fixed window, 25 missing at rate 10: %d, want 3 windows", got-ws)
	}
	sw := Definition{Kind: SlidingWindow, Rate: 10, Period: 60_000, Resolution: 4}.Normalized()
	// Sub-intervals of 15 s; consumption in the current one (index 4): it leaves the estimate
	// resolution + 1 sub-intervals later.
	n := t0 / 15_000
	st := State{Value: 7, TS: n * 15_000, Counters: []float64{0, 1, 0, 0, 2}, Exists: true}
	if got := FullAt(sw, st, n*15_000+100, 0); got != (n+5)*15_000 {
		t.Errorf("sliding window: %d, want start of n+5 (%d)", got, (n+5)*15_000)
	}
	st.Counters = []float64{3, 0, 0, 0, 0}
	if got := FullAt(sw, st, n*15_000+100, 0); got != (n+1)*15_000 {
		t.Errorf("sliding window, only the oldest counter: %d, want start of n+1", got)
	}

	r := rand.New(rand.NewPCG(7, 7))
	for run := range 400 {
		def := randomDefinition(r, []Kind{TokenBucket, GCRA, FixedWindow, SlidingWindow}[run%4])
		var state State
		now := t0 + int64(r.IntN(100_000))
		for range 1 + r.IntN(6) {
			now += int64(r.IntN(int(def.Period)))
			count := float64(1 + r.IntN(int(math.Max(def.Max(), 1))))
			if d := Decide(def, []State{state}, count, false, now, 0); d.OK {
				state = d.Writes[0]
			}
		}
		at := FullAt(def, state, now, 0)
		full := func(t int64) bool { v, _ := Peek(def, state, t, 0); return v >= def.Max() }
		if !full(at) {
			t.Fatalf("run %d %+v: not full at FullAt (+%d ms)", run, def, at-now)
		}
		if at > now && full(at-1) {
			t.Fatalf("run %d %+v: full already a millisecond before FullAt (+%d ms)", run, def, at-now)
		}
	}
}
