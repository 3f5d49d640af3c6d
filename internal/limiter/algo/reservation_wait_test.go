package algo

import (
	"math"
	"math/rand/v2"
	"testing"
)

// An admitted reservation's retryAfter is when the reserved work may run: the first whole
// millisecond at which the shards it used are back to 0 or more by the decision's own
// arithmetic, so that a count-0 probe then ("never refuses unless the value is negative")
// passes and a millisecond earlier the key still owed. The closed formula alone was a whole
// window late or early in fixed windows (rate 0.3: 2.1 / 0.3 is 7.000000000000001 windows; 0.9
// / 0.3 is 3 where -0.9 + 3 × 0.3 is -1.1e-16) and a millisecond short in token buckets.
func TestAReservationsRetryAfterIsWhenTheKeyIsRepaid(t *testing.T) {
	const day = int64(86_400_000)
	start := int64(0)
	ws := int64(1_700_006_400_000) // a window start (a multiple of a day)
	check := func(t *testing.T, def Definition, st State, count float64, now int64) {
		t.Helper()
		d := Decide(def, []State{st}, count, true, now, 0)
		if !d.OK {
			t.Fatalf("reservation of %v: %+v, want admitted", count, d)
		}
		if math.IsNaN(d.RetryAfter) { // the key held the count: nothing reserved, no wait
			return
		}
		at := now + RetryAfterMillis(d.RetryAfter)
		if p := Decide(def, []State{d.Writes[0]}, 0, false, at, 0); !p.OK {
			t.Errorf("%s reserve %v: a count-0 probe at the reservation's retryAfter (%d ms) is refused (retryAfter %v ms)", def.Kind, count, at-now, p.RetryAfter)
		}
		if p := Decide(def, []State{d.Writes[0]}, 0, false, at-1, 0); p.OK {
			t.Errorf("%s reserve %v: a count-0 probe a millisecond before the retryAfter (%d ms) passes: the wait is too long", def.Kind, count, at-now)
		}
	}
	fixed := Definition{Kind: FixedWindow, Rate: 0.3, Period: day, Capacity: ptr(3.0), Start: &start}.Normalized()
	for _, count := range []float64{2.1, 0.9} {
		check(t, fixed, State{Value: 0, TS: ws, Exists: true}, count, ws+1000)
	}
	bucket := Definition{Kind: TokenBucket, Rate: 0.7, Period: 60_000}.Normalized()
	now := int64(1_700_000_000_000)
	check(t, bucket, State{Value: 0, TS: now, Exists: true}, 2.1, now)
	// And random reservations of every kind that reserves.
	r := rand.New(rand.NewPCG(17, 28))
	for range 2000 {
		rate := float64(1+r.IntN(99)) / 10
		period := int64(1+r.IntN(100)) * 1000
		kind := []Kind{TokenBucket, GCRA, FixedWindow}[r.IntN(3)]
		def := Definition{Kind: kind, Rate: rate, Period: period}
		if kind == FixedWindow {
			def.Start = &start
		}
		def = def.Normalized()
		now := int64(1_700_000_000_000) + r.Int64N(period)
		value := float64(r.IntN(int(rate*10)+1)) / 10
		count := value + float64(1+r.IntN(30))/10
		st := State{Value: value, TS: now - r.Int64N(period), Exists: true}
		if kind == FixedWindow {
			st.TS = now - (now-start)%period
		}
		check(t, def, st, count, now)
	}
}

// FullAt is when Peek first reads full, for fixed windows whose rate does not divide what is
// missing in floating point: 0.9 / 0.3 is 3 windows where 3 × 0.3 is 0.8999999999999999, and
// 2.1 / 0.3 is 7.000000000000001 where 7 windows fill it.
func TestAFixedWindowIsFullAtTheWindowItsArithmeticFillsIt(t *testing.T) {
	const day = int64(86_400_000)
	start := int64(0)
	ws := int64(1_700_006_400_000)
	now := ws + 1000
	cap09 := Definition{Kind: FixedWindow, Rate: 0.3, Period: day, Capacity: ptr(0.9), Start: &start}.Normalized()
	zero := Definition{Kind: FixedWindow, Rate: 0.3, Period: day, Capacity: ptr(0.0), MaxReserved: ptr(10.0), Start: &start}.Normalized()
	for _, c := range []struct {
		name string
		def  Definition
		st   State
	}{
		{"capacity 0.9, drained to 0", cap09, State{Value: 0, TS: ws, Exists: true}},
		{"capacity 0, reserved to -2.1", zero, State{Value: -2.1, TS: ws, Exists: true}},
	} {
		// Full is when a decision admits the maximum: a window takes a balance within rounding
		// of zero as zero (balanceAfter), so 0.8999999999999999 of 0.9 is full.
		full := func(at int64) bool { return isFull(c.def.shardParams(), Peek1(c.def, c.st, at)) }
		at := FullAt(c.def, c.st, now, 0)
		if !full(at) {
			v, _ := Peek(c.def, c.st, at, 0)
			t.Errorf("%s: FullAt ws+%v days, where Peek reads %v of %v", c.name, float64(at-ws)/float64(day), v, c.def.Max())
		}
		if at-day > now && full(at-day) {
			t.Errorf("%s: FullAt ws+%v days, but Peek reads full a window earlier", c.name, float64(at-ws)/float64(day))
		}
	}
}

// Peek1 is Peek's value alone.
func Peek1(def Definition, st State, at int64) float64 { v, _ := Peek(def, st, at, 0); return v }
