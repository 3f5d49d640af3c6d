package algo

import (
	"math"
	"testing"
	"time"
)

// Rows written ahead of the clock. Instances' clocks disagree, so a decision may read a row that
// an instance whose clock runs fast wrote "in the future". Each kind reads such a row in the way
// that admits the least: never as if time had run backwards (which could refund what the row
// counts) and never as if the row's own time had already passed.

// TestSlidingWindowRowAheadOfTheClockIsReadAtTheStartOfItsSubInterval: 10 per minute in six
// sub-intervals of 10 s. A fast instance stored a row whose ts (70 s) is in sub-interval 7, with
// 10 requests counted in sub-interval 1, the oldest one the window still weighs. At 65 s (the
// middle of sub-interval 6) this instance must read the row at the very start of sub-interval 7,
// where the oldest sub-interval still weighs in full: 10 of 10, so nothing more fits. Reading it
// at 65 s's own fraction (half of sub-interval 1 gone) would admit 5 that the fast instance
// itself would refuse. The wait is until 71 s, when a tenth of sub-interval 1 has left.
func TestSlidingWindowRowAheadOfTheClockIsReadAtTheStartOfItsSubInterval(t *testing.T) {
	def := Definition{Kind: SlidingWindow, Rate: 10, Period: minute, Resolution: 6}.Normalized()
	st := State{TS: 70_000, Counters: []float64{10, 0, 0, 0, 0, 0, 0}, Exists: true}
	d := Decide(def, []State{st}, 1, false, 65_000, 0)
	if d.OK {
		t.Fatalf("admitted at 65 s with 10 of 10 counted as of the row's sub-interval (70 s): %+v", d)
	}
	if d.Remaining != 0 || d.RetryAfter != 6_000 {
		t.Fatalf("refusal: remaining %v, retryAfter %v; want 0 and 6000 (at 71 s a tenth of the oldest sub-interval has left)", d.Remaining, d.RetryAfter)
	}
}

// TestQuotaRowAheadOfTheClockKeepsItsWindow: a daily quota of 10 whose row a fast instance wrote
// in the next day's window (5 left). 10 ms before midnight by this instance's clock the row is
// still that window's: the decision counts in it, writes it back with the window's start (not
// this instance's day, which would make the count vanish at midnight and give the whole quota
// again) and reports it as the window counted in. Just after midnight the row reads 4, not 10.
func TestQuotaRowAheadOfTheClockKeepsItsWindow(t *testing.T) {
	def := Definition{Kind: Quota, Rate: 10, Calendar: Day, TimeZone: "UTC"}.Normalized()
	start := time.Date(2030, 3, 14, 0, 0, 0, 0, time.UTC).UnixMilli()
	const day = int64(86_400_000)
	st := State{Value: 5, TS: start + day, Exists: true}
	d := Decide(def, []State{st}, 1, false, start+day-10, 0)
	if !d.OK || d.Remaining != 4 {
		t.Fatalf("10 ms before midnight: ok %v remaining %v, want admitted with 4 left of the row's window", d.OK, d.Remaining)
	}
	if w := d.Writes[0]; w.TS != start+day || w.Value != 4 {
		t.Fatalf("wrote %+v, want value 4 in the window starting at %d (the row's), not %d", w, start+day, w.TS)
	}
	if d.WindowStart != start+day || d.WindowEnd != start+2*day {
		t.Fatalf("counted in [%d, %d), want the row's window [%d, %d)", d.WindowStart, d.WindowEnd, start+day, start+2*day)
	}
	if v, ts := Peek(def, d.Writes[0], start+day+10, 0); v != 4 || ts != start+day {
		t.Fatalf("just after midnight the quota reads %v (window %d), want 4: the window began over", v, ts)
	}
}

// TestFixedWindowRowAheadOfTheClockIsNotMovedBack: a fixed window of 10 per minute whose row a
// fast instance wrote in the window starting at 120 s (5 left). At 119 s this instance reads that
// window as it is: a window elapsed count of -1 would take 10 tokens from it (and refuse), and the
// write would move ts back to 60 s.
func TestFixedWindowRowAheadOfTheClockIsNotMovedBack(t *testing.T) {
	def := Definition{Kind: FixedWindow, Rate: 10, Period: minute, Start: ptr(int64(0))}.Normalized()
	st := State{Value: 5, TS: 120_000, Exists: true}
	d := Decide(def, []State{st}, 1, false, 119_000, 0)
	if !d.OK || d.Remaining != 4 {
		t.Fatalf("at 119 s: ok %v remaining %v (retryAfter %v), want admitted with 4 left in the row's window", d.OK, d.Remaining, d.RetryAfter)
	}
	if w := d.Writes[0]; w.TS != 120_000 || w.Value != 4 {
		t.Fatalf("wrote %+v, want value 4 at ts 120000 (the row's window)", w)
	}
}

// TestARefusalDuringAPenaltyWaitsForTheLimitWhenItIsLonger: one token a minute with a penalty
// of 1 s. Half a second into the penalty the bucket is empty: the penalty ends in 500 ms, but the
// token the request needs is 59.5 s away, so that is the retryAfter. Telling the client 500 ms
// would only have it refused again.
func TestARefusalDuringAPenaltyWaitsForTheLimitWhenItIsLonger(t *testing.T) {
	def := Definition{Kind: TokenBucket, Rate: 1, Period: 60_000, Penalty: 1000}.Normalized()
	t0 := int64(1_700_000_000_000)
	st := State{Value: 0, TS: t0, PenaltyUntil: t0 + 1000, Exists: true}
	d := Decide(def, []State{st}, 1, false, t0+500, 0)
	if d.OK || !d.Penalized {
		t.Fatalf("during the penalty: ok %v penalized %v, want a penalty's refusal", d.OK, d.Penalized)
	}
	if d.RetryAfter != 59_500 {
		t.Fatalf("retryAfter %v, want 59500 (the token, a minute after t0), not the penalty's 500", d.RetryAfter)
	}
	if d.PenaltyUntil != 0 || d.Writes[0].Exists {
		t.Fatalf("a refusal during a penalty renewed it or wrote state: %+v", d)
	}
}

// TestACountTheFullerShardHoldsExactlyIsTakenFromItAlone: 10 per minute over two shards (5
// each), holding 3 and 1. A count of 3 is exactly what the fuller shard holds: it is taken from
// that shard alone, which ends empty (remaining 0, one shard used), and the other is left
// untouched. Pooling would drain both to 0.5 each for a request one shard could serve.
func TestACountTheFullerShardHoldsExactlyIsTakenFromItAlone(t *testing.T) {
	def := Definition{Kind: TokenBucket, Rate: 10, Period: minute, Shards: 2}.Normalized()
	t0 := int64(1_700_000_000_000)
	a := State{Value: 3, TS: t0, Exists: true}
	b := State{Value: 1, TS: t0, Exists: true}
	d := Decide(def, []State{a, b}, 3, false, t0, 0)
	if !d.OK || d.Used != 1 || d.Remaining != 0 {
		t.Fatalf("ok %v, used %d shards, remaining %v; want admitted from the fuller shard alone, 0 left in it", d.OK, d.Used, d.Remaining)
	}
	if w := d.Writes[0]; !w.Exists || w.Value != 0 || w.TS != t0 {
		t.Fatalf("fuller shard wrote %+v, want value 0 at t0", w)
	}
	if d.Writes[1].Exists {
		t.Fatalf("the emptier shard was written (%+v): the count fit in the fuller one", d.Writes[1])
	}
	if !math.IsNaN(d.RetryAfter) {
		t.Fatalf("an admission without a reservation has retryAfter %v", d.RetryAfter)
	}
}
