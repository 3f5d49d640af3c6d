package algo

import (
	"math"
	"testing"
)

// The snap's tolerance is never more than 2.5e-10 (snapToGrid): a window of 1e7 from which a count
// of 1e7 - 3 ulps was taken holds 5.59e-9, not the 6e-9 a tolerance of 4 ulps of 1e7 (8.9e-9)
// would snap it to; a further count of 6e-9 does not fit (it would admit 1e7 + 4.1e-10 in all).
func TestTheSnapNeverRoundsABalanceUpByMoreThanItsCap(t *testing.T) {
	def := Definition{Kind: FixedWindow, Rate: 1e7, Period: 1e9, Start: ptr(int64(0))}.Normalized()
	first := 1e7 - 3*math.Pow(2, -29) // 9999999.999999994412…: a number of at most 9 decimals to Decimal9
	if Decimal9(first) != first {
		t.Fatalf("Decimal9(%v) = %v", first, Decimal9(first))
	}
	d := Decide(def, []State{{}}, first, false, 0, 0)
	if !d.OK {
		t.Fatal("first count refused")
	}
	if d.Remaining != 1e7-first {
		t.Fatalf("remaining %v, want exactly %v", d.Remaining, 1e7-first)
	}
	if d2 := Decide(def, []State{d.Writes[0]}, 6e-9, false, 0, 0); d2.OK {
		t.Fatalf("6e-9 admitted after %v: %v admitted in a window of 1e7", first, first+6e-9)
	}
}
