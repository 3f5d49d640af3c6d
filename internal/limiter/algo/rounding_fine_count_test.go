package algo

import "testing"

// TestAFineCountLeavesNothingToSnap: a count of more than 9 decimals leaves a balance off the
// 9-decimal grid; a later decimal count on it is decided exactly. Snapping it (a review found)
// admitted 2e-10 and then 1e6 in one window of 1e6.
func TestAFineCountLeavesNothingToSnap(t *testing.T) {
	for _, kind := range []Kind{FixedWindow, SlidingWindow, Quota} {
		def := Definition{Kind: kind, Rate: 1e6, Period: 86_400_000}
		switch kind {
		case Quota:
			def.Period, def.Calendar, def.TimeZone = 0, Day, "UTC"
		case FixedWindow:
			def.Start = ptr(int64(0))
		}
		def = def.Normalized()
		d := Decide(def, []State{{}}, 2e-10, false, 1000, 0)
		if !d.OK {
			t.Fatalf("%s: a count of 2e-10 refused", kind)
		}
		if d2 := Decide(def, []State{d.Writes[0]}, 1e6, false, 1000, 0); d2.OK {
			t.Errorf("%s of 1e6: 2e-10 then 1e6 admitted in one window (balance after %v)", kind, d2.Writes[0].Value)
		}
	}
	// A rate of more decimals is its own balance: nothing of it is snapped either.
	def := Definition{Kind: FixedWindow, Rate: 1e6 - 2e-10, Period: 86_400_000, Start: ptr(int64(0))}.Normalized()
	if d := Decide(def, []State{{}}, 1e6, false, 1000, 0); d.OK {
		t.Errorf("a window of %v admitted 1e6", def.Rate)
	}
}
