package algo

import "testing"

func TestReadsAsMissingOnlyWhenEveryViewEqualsNoState(t *testing.T) {
	tb := Definition{Kind: TokenBucket, Rate: 10, Period: minute}.Normalized()
	fw := Definition{Kind: FixedWindow, Rate: 10, Period: minute, Start: ptr(int64(0))}.Normalized()
	sw := Definition{Kind: SlidingWindow, Rate: 10, Period: minute, Resolution: 2}.Normalized()
	cases := []struct {
		name string
		def  Definition
		st   State
		at   []int64
		want bool
	}{
		{"token bucket refilled", tb, State{Value: 4, TS: 0, Exists: true}, []int64{36_000}, true},
		{"token bucket one ms short", tb, State{Value: 4, TS: 0, Exists: true}, []int64{35_999}, false},
		{"token bucket full at now but not at the grace before", tb, State{Value: 4, TS: 0, Exists: true}, []int64{35_000, 36_000}, false},
		{"ts ahead of the clock, even full", tb, State{Value: 10, TS: 40_000, Exists: true}, []int64{36_000}, false},
		{"fixed window in an earlier window", fw, State{Value: 0, TS: 0, Exists: true}, []int64{60_000}, true},
		{"fixed window still in its window", fw, State{Value: 9, TS: 0, Exists: true}, []int64{59_999}, false},
		{"sliding window counters aged out", sw, State{TS: 0, Counters: []float64{0, 0, 5}, Exists: true}, []int64{90_000}, true},
		{"sliding window counter still weighs", sw, State{TS: 0, Counters: []float64{0, 0, 5}, Exists: true}, []int64{89_999}, false},
		{"sliding window zero counters", sw, State{TS: 0, Counters: []float64{0, 0, 0}, Exists: true}, []int64{1}, true},
	}
	for _, c := range cases {
		if got := ReadsAsMissing(c.def, c.st, 0, c.at...); got != c.want {
			t.Errorf("%s: ReadsAsMissing = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestStateShapeChangedOnlyForWhatMakesStoredStateMeaningless(t *testing.T) {
	base := Definition{Kind: FixedWindow, Rate: 10, Period: minute, Start: ptr(int64(0))}
	same := []Definition{
		{Kind: FixedWindow, Rate: 20, Period: minute, Start: ptr(int64(0)), Capacity: ptr(30.0), Jitter: 5, IPFallback: true},
		{Kind: FixedWindow, Rate: 10, Period: minute, Start: ptr(int64(0)), Shards: 1},
	}
	changed := []Definition{
		{Kind: TokenBucket, Rate: 10, Period: minute},
		{Kind: FixedWindow, Rate: 10, Period: 2 * minute, Start: ptr(int64(0))},
		{Kind: FixedWindow, Rate: 10, Period: minute, Start: ptr(int64(1))},
		{Kind: FixedWindow, Rate: 10, Period: minute},
		{Kind: FixedWindow, Rate: 10, Period: minute, Start: ptr(int64(0)), Shards: 2},
	}
	for i, d := range same {
		if StateShapeChanged(base, d) {
			t.Errorf("same %d: reported a shape change", i)
		}
	}
	for i, d := range changed {
		if !StateShapeChanged(base, d) {
			t.Errorf("changed %d: no shape change reported", i)
		}
	}
}

func TestParseCountersReadsDamageAsAFullWindow(t *testing.T) {
	def := Definition{Kind: SlidingWindow, Rate: 12, Period: minute, Resolution: 2, Shards: 3}.Normalized()
	if got := ParseCounters(def, FormatCounters([]float64{1, 2.5, 0})); len(got) != 3 || got[1] != 2.5 {
		t.Fatalf("round trip: %v", got)
	}
	for _, damaged := range []string{"", "1,2", "1,x,3", "1,-2,3", "1,NaN,3"} {
		got := ParseCounters(def, damaged)
		if len(got) != 3 || got[2] != 4 { // 4 = one shard's rate: the window reads as full
			t.Errorf("%q read as %v, want the current sub-interval full", damaged, got)
		}
	}
}
