package algo

import (
	"math"
	"testing"
)

// TestConcurrencyCountsOnlyUnexpiredLeases: a slot is an unexpired expiry; a decision admits
// while fewer than rate are unexpired, refuses with the earliest expiry, and release and extend
// move exactly one entry.
func TestConcurrencyCountsOnlyUnexpiredLeases(t *testing.T) {
	def := Definition{Kind: Concurrency, Rate: 2, LeaseTTL: 100}
	if err := def.Validate(); err != nil {
		t.Fatal(err)
	}
	st := State{}
	for i, now := range []int64{1000, 1010} {
		d := Decide(def, []State{st}, 1, false, now, 0)
		if !d.OK || d.Remaining != float64(1-i) {
			t.Fatalf("lease %d: %+v", i, d)
		}
		st = d.Writes[0]
	}
	if d := Decide(def, []State{st}, 1, false, 1050, 0); d.OK || d.RetryAfter != 50 || len(d.Writes) != 1 || d.Writes[0].Exists {
		t.Fatalf("full: %+v", d)
	}
	if d := Decide(def, []State{st}, 1, false, 1100, 0); !d.OK || len(d.Writes[0].Counters) != 2 {
		t.Fatalf("at the first expiry its slot is free and the expired entry leaves: %+v", d)
	}
	ext, found := ExtendLease(def, st, 1110, 1150, 1050)
	if !found || InFlight(ext, 1120) != 1 || InFlight(ext, 1149) != 1 || InFlight(ext, 1150) != 0 {
		t.Fatalf("extend: %+v %v", ext, found)
	}
	if _, found := ReleaseLease(def, st, 1100, 1100); found {
		t.Fatal("an expired lease was released")
	}
	rel, found := ReleaseLease(def, st, 1110, 1050)
	if !found || InFlight(rel, 1050) != 1 || rel.Value != 1 {
		t.Fatalf("release: %+v %v", rel, found)
	}
	if FullAt(def, st, 1050, 0) != 1110 || ReadsAsMissing(def, st, 0, 1050) || !ReadsAsMissing(def, st, 0, 1110, 2000) {
		t.Fatal("fullAt or sweepability")
	}
	if c := ParseCounters(def, "1,x"); len(c) != 2 || !math.IsInf(c[0], 1) {
		t.Fatalf("a damaged list reads as every slot taken: %v", c)
	}
	if err := def.CheckCount(2, false); err == nil {
		t.Fatal("count 2 accepted")
	}
}

// TestConcurrencyRetryAfterIsWhenASlotFrees: after the rate is lowered below the leases in flight
// (a definition or an override; the leases are kept), a slot frees only when enough of them have
// expired that fewer than rate remain: with 5 in flight and rate 2, at the fourth expiry. The
// stored expiries need not be in order (an extended lease keeps its place in none).
func TestConcurrencyRetryAfterIsWhenASlotFrees(t *testing.T) {
	st := State{Value: 0, TS: 10_000, Counters: []float64{11_400, 11_000, 11_300, 11_100, 11_200}, Exists: true}
	for _, tc := range []struct {
		rate float64
		now  int64
		want int64
	}{
		{2, 10_500, 11_300 - 10_500}, // 5 in flight: 4 must end to leave 1
		{2, 11_050, 11_300 - 11_050}, // 4 in flight: 3 must end
		{1, 10_500, 11_400 - 10_500}, // every lease must end
		{4, 10_500, 11_100 - 10_500}, // 2 must end
		{5, 10_500, 11_000 - 10_500}, // at the rate: the earliest
	} {
		def := Definition{Kind: Concurrency, Rate: tc.rate, LeaseTTL: 1000}
		d := Decide(def, []State{st}, 1, false, tc.now, 0)
		if d.OK || RetryAfterMillis(d.RetryAfter) != tc.want {
			t.Fatalf("rate %v at %d (%d in flight): ok %v, retryAfter %v, want a refusal for %d ms", tc.rate, tc.now, InFlight(st, tc.now), d.OK, d.RetryAfter, tc.want)
		}
		at := tc.now + tc.want
		if early := Decide(def, []State{st}, 1, false, at-1, 0); early.OK {
			t.Fatalf("rate %v: admitted at %d, before retryAfter", tc.rate, at-1)
		}
		if again := Decide(def, []State{st}, 1, false, at, 0); !again.OK {
			t.Fatalf("rate %v: refused again at retryAfter (%d), retryAfter %v", tc.rate, at, again.RetryAfter)
		}
	}
}
