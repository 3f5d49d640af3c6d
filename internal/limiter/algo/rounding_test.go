package algo

import (
	"math"
	"testing"
)

// A fixed window of capacity 0.9 refilling 0.3 a window, emptied at 0: at 3000 its balance is
// 0.8999999999999999, which admits a count of 0.9 (the whole capacity), so the key is full then.
func TestAFixedWindowsFullAtAgreesWithItsDecision(t *testing.T) {
	def := Definition{Kind: FixedWindow, Rate: 0.3, Period: 1000, Capacity: ptr(0.9), Start: ptr(int64(0))}.Normalized()
	st := Decide(def, []State{{}}, 0.9, false, 0, 0).Writes[0]
	full := FullAt(def, st, 0, 0)
	if !Decide(def, []State{st}, 0.9, false, 3000, 0).OK {
		t.Fatalf("0.9 refused at 3000")
	}
	if full != 3000 {
		t.Fatalf("FullAt %d, but the whole capacity (0.9) is admitted at 3000", full)
	}
}

// A sliding window of 1 takes 0.1 and 0.2 (counter 0.30000000000000004) and gets both refunded
// (0.2, then 0.1): the counter keeps 2.8e-17, the balance reads exactly 1 (the maximum), yet
// FullAt says the key is full only once that sub-interval leaves the estimate.
func TestASlidingWindowsRefundResidueIsFull(t *testing.T) {
	def := Definition{Kind: SlidingWindow, Rate: 1, Period: 60000, Resolution: 60}.Normalized()
	now := int64(1_700_000_000_000)
	st := Decide(def, []State{{}}, 0.1, false, now, 0).Writes[0]
	st = Decide(def, []State{st}, 0.2, false, now, 0).Writes[0]
	o, _ := Refund(def, []State{st}, 0.2, now, 0)
	st = o.Writes[0]
	o, _ = Refund(def, []State{st}, 0.1, now, 0)
	st = o.Writes[0]
	v, _ := Peek(def, st, now, 0)
	t.Logf("value %v counters %v", v, st.Counters)
	if v == 1 {
		if at := FullAt(def, st, now, 0); at != now {
			t.Fatalf("value is the maximum (1) but FullAt is %d ms later", at-now)
		}
	}
}

// The window tolerance (1e-12 of the numbers compared) is thousands of ulps: at 1e15 it forgives
// 1000 whole tokens. A fixed window of 1e15 admits 999 and then 1e15 more in one window.
func TestAWindowsRoundingAdmitsNoWholeTokenOverTheRate(t *testing.T) {
	for _, c := range []struct{ rate, first float64 }{{1e15, 999}, {1e12, 1}} {
		for _, kind := range []Kind{FixedWindow, SlidingWindow} {
			def := Definition{Kind: kind, Rate: c.rate, Period: 86_400_000}
			if kind == FixedWindow {
				def.Start = ptr(int64(0))
			}
			def = def.Normalized()
			d := Decide(def, []State{{}}, c.first, false, 1000, 0)
			if !d.OK {
				t.Fatal("first refused")
			}
			if d2 := Decide(def, []State{d.Writes[0]}, c.rate, false, 1000, 0); d2.OK {
				t.Errorf("%s of %g: %g then %g admitted in one window (%g over the rate)", kind, c.rate, c.first, c.rate, c.first)
			}
		}
	}
}

// A window of 1000 spent in counts of 0.1: the 10,000th 0.1 is refused for the rest of the
// window (0.1 - 0.1 shown as remaining), the noise of 9,999 subtractions (1.6e-10) being far
// more than 1e-12 of 0.1. So is a window of 1 in counts of 0.001 under a tighter tolerance.
func TestAWindowSpentInManyFractionalCountsAdmitsItsRate(t *testing.T) {
	for _, c := range []struct{ rate, step float64 }{{1000, 0.1}, {100, 0.01}, {1, 0.01}, {1, 0.001}} {
		for _, kind := range []Kind{FixedWindow, Quota, SlidingWindow} {
			def := Definition{Kind: kind, Rate: c.rate, Period: 86_400_000}
			switch kind {
			case Quota:
				def.Period, def.Calendar, def.TimeZone = 0, Day, "UTC"
			case FixedWindow:
				def.Start = ptr(int64(0))
			}
			def = def.Normalized()
			st := State{}
			n := int(c.rate/c.step + 0.5)
			for i := 1; i <= n; i++ {
				d := Decide(def, []State{st}, c.step, false, 1000, 0)
				if !d.OK {
					t.Errorf("%s of %g: count %g number %d of %d refused (remaining %v)", kind, c.rate, c.step, i, n, d.Remaining)
					break
				}
				st = d.Writes[0]
			}
		}
	}
}

// Ten counts of the double just above 0.1 are more than 1 in real numbers: a window of 1
// must refuse the tenth.
func TestAWindowsRoundingGivesNothingAway(t *testing.T) {
	c := math.Nextafter(0.1, 1)
	def := Definition{Kind: FixedWindow, Rate: 1, Period: 1000, Start: ptr(int64(0))}.Normalized()
	st := State{}
	admitted := 0
	for range 10 {
		d := Decide(def, []State{st}, c, false, 0, 0)
		if !d.OK {
			break
		}
		admitted++
		st = d.Writes[0]
	}
	if admitted == 10 {
		t.Fatalf("ten counts of %v (%v in all) admitted by a window of 1", c, 10*c)
	}
}
