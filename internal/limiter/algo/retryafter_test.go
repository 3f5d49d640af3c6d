package algo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// A refusal's retryAfter is the first whole millisecond at which the same request, with nothing
// consumed meanwhile, is admitted: asked then it passes, asked a millisecond earlier it does not.

// refusedUntil checks that the request refused at now is refused until now + retryAfter and
// admitted then (retryAfter as the API gives it, RetryAfterMillis); it returns that retryAfter.
func refusedUntil(t *testing.T, def Definition, states []State, count float64, reserve bool, now, origin int64) int64 {
	t.Helper()
	d := Decide(def, states, count, reserve, now, origin)
	if d.OK {
		t.Fatalf("%+v: %v admitted at %d, want a refusal", def, count, now)
	}
	ms := RetryAfterMillis(d.RetryAfter)
	if again := Decide(def, states, count, reserve, now+ms, origin); !again.OK {
		t.Fatalf("%s: %v (reserve %v) refused with retryAfter %v and refused again then (retryAfter %v); states %+v",
			def.Kind, count, reserve, d.RetryAfter, again.RetryAfter, states)
	}
	if ms > 1 {
		if early := Decide(def, states, count, reserve, now+ms-1, origin); early.OK {
			t.Fatalf("%s: %v (reserve %v) refused with retryAfter %v, but admitted a millisecond earlier; states %+v",
				def.Kind, count, reserve, d.RetryAfter, states)
		}
	}
	return ms
}

// A reservation refused for going deeper than maxReserved fits once the balance is within
// maxReserved of the count, not once the whole count has refilled.
func TestARefusedReservationWaitsOnlyUntilItIsWithinMaxReserved(t *testing.T) {
	const now = int64(1_700_000_000_000)
	for _, tc := range []struct {
		def    Definition
		states []State
		count  float64
		want   int64
		why    string
	}{
		{Definition{Kind: TokenBucket, Rate: 1, Period: 1000, Capacity: ptr(10.0), MaxReserved: ptr(5.0)},
			[]State{{Value: 0, TS: now, Exists: true}}, 10, 5000, "empty bucket, 1/s: 5 tokens, then the other 5 are reserved"},
		{Definition{Kind: GCRA, Rate: 1, Period: 1000, Capacity: ptr(10.0), MaxReserved: ptr(5.0)},
			[]State{{Value: -2, TS: now, Exists: true}}, 10, 7000, "2 reserved already: 7 tokens"},
		{Definition{Kind: FixedWindow, Rate: 1, Period: 1000, Capacity: ptr(10.0), MaxReserved: ptr(5.0), Start: ptr(int64(0))},
			[]State{{Value: 0, TS: now, Exists: true}}, 10, 5000, "a fixed window: 5 windows of 1"},
		{Definition{Kind: TokenBucket, Rate: 2, Period: 1000, Capacity: ptr(20.0), MaxReserved: ptr(10.0), Shards: 2},
			[]State{{Value: 0, TS: now, Exists: true}, {Value: 0, TS: now, Exists: true}}, 14, 2000,
			"two empty shards pooled: 4 tokens at twice one shard's rate, then 5 reserved on each"},
	} {
		t.Run(tc.why, func(t *testing.T) {
			def := tc.def.Normalized()
			if err := def.Validate(); err != nil {
				t.Fatal(err)
			}
			if err := def.CheckCount(tc.count, true); err != nil {
				t.Fatal(err)
			}
			if got := refusedUntil(t, def, tc.states, tc.count, true, now, 0); got != tc.want {
				t.Fatalf("retryAfter %d ms, want %d", got, tc.want)
			}
		})
	}
}

// The reported cases where the closed formulas' floating point disagreed with the decision's:
// a fixed window of 0.3 a second, and a sliding window of 1e9 a minute whose wait is a
// billionth of a sub-interval, which the formula lost to rounding.
func TestRetryAfterAgreesWithTheDecisionsOwnArithmetic(t *testing.T) {
	fixed := Definition{Kind: FixedWindow, Rate: 0.3, Period: 1000, Capacity: ptr(1.0), Start: ptr(int64(0))}.Normalized()
	st := Decide(fixed, []State{{}}, 1, false, 0, 0).Writes[0]
	st = Decide(fixed, []State{st}, 0.5, false, 2000, 0).Writes[0]
	if got := refusedUntil(t, fixed, []State{st}, 1, false, 2000, 0); got != 3000 {
		// 0.1 left at 2000, and 0.1 + 3 × 0.3 is 0.9999999999999999 at 5000 (the formula's
		// three windows), which is 1 within floating-point noise: the window at 5000 holds 1.
		t.Fatalf("fixed window: retryAfter %d, want 3000", got)
	}
	sliding := Definition{Kind: SlidingWindow, Rate: 1e9, Period: 60000, Resolution: 60}.Normalized()
	now := int64(1_700_000_000_123)
	ss := Decide(sliding, []State{{}}, 1e9, false, now, 0).Writes[0]
	if got := refusedUntil(t, sliding, []State{ss}, 1, false, now, 0); got != 59878 {
		t.Fatalf("sliding window: retryAfter %d, want 59878", got)
	}
}

// randomRetryDefinition draws a valid definition with the numbers the simpler generators avoid:
// fractional and extreme rates, capacities and reservation bounds, shards, odd periods.
func randomRetryDefinition(r *rand.Rand) Definition {
	pick := func(xs ...float64) float64 { return xs[r.IntN(len(xs))] }
	kind := []Kind{TokenBucket, GCRA, FixedWindow, SlidingWindow}[r.IntN(4)]
	var rate float64
	switch r.IntN(4) {
	case 0:
		rate = float64(1 + r.IntN(20))
	case 1:
		rate = pick(0.1, 0.3, 0.7, 1.0/3, 2.0/3, 1.1, 2.5, 1e-3)
	case 2:
		rate = r.Float64()*50 + 1e-3
	default:
		rate = pick(1e-9, 1e-6, 1e6, 1e9, 1e12, MaxAmount)
	}
	period := []int64{1, 7, 1000, 3000, 60_000, 86_400_000, int64(1 + r.IntN(100_000))}[r.IntN(7)]
	d := Definition{Kind: kind, Rate: rate, Period: period, Shards: []int{1, 1, 2, 3, 4}[r.IntN(5)]}
	switch kind {
	case SlidingWindow:
		d.Resolution = []int{1, 2, 6, 60, 1 + r.IntN(MaxResolution)}[r.IntN(5)]
		if d.Period < int64(d.Resolution) {
			d.Period = int64(d.Resolution)
		}
	default:
		if r.IntN(2) == 0 {
			d.Capacity = ptr(math.Min(rate*pick(0.5, 1, 1.5, 3, 0.1+r.Float64()*4), MaxAmount))
		}
		if r.IntN(3) > 0 {
			d.MaxReserved = ptr(math.Min(d.Max()*pick(0, 0.5, 1, 2.5, r.Float64()), MaxAmount))
		}
		if kind == FixedWindow {
			d.Start = ptr(int64(r.IntN(1_000_000)))
		}
	}
	return d.Normalized()
}

// randomRetryStates draws the states of the one or two shards a decision reads at now: full,
// empty, fractional, below zero by a reservation, written a while ago or (a skewed clock) ahead.
func randomRetryStates(r *rand.Rand, def Definition, now, origin int64) []State {
	p := def.shardParams()
	states := make([]State, min(def.Shards, 2))
	for i := range states {
		if r.IntN(8) == 0 {
			continue // no row: full
		}
		back := []int64{0, 0, 1, int64(r.IntN(3_000)), p.period / 3, p.period, 3 * p.period, -int64(r.IntN(2_000))}[r.IntN(8)]
		switch p.kind {
		case SlidingWindow:
			n, _ := subInterval(p, now-back)
			c := make([]float64, p.resolution+1)
			for j := range c {
				if r.IntN(3) == 0 {
					c[j] = p.rate * r.Float64() / float64(p.resolution+1) * 2
				}
			}
			if r.IntN(3) == 0 {
				c[len(c)-1] = p.rate // the newest sub-interval took everything
			}
			states[i] = State{TS: subIntervalStart(p, n), Counters: c, Exists: true}
		default:
			value := []float64{0, p.max, p.max * r.Float64(), -p.max * r.Float64(), math.Nextafter(p.max, 0)}[r.IntN(5)]
			if value < 0 && !math.IsInf(p.maxReserved, 1) {
				value = -p.maxReserved * r.Float64()
			}
			ts := now - back
			if p.kind == FixedWindow {
				ts -= floorMod(ts-origin, p.period) // windows start at the origin
			}
			states[i] = State{Value: value, TS: ts, Exists: true}
		}
	}
	return states
}

// TestARefusalsRetryAfterIsTheFirstMillisecondTheSameRequestFits: for random definitions with
// fractional and extreme numbers, random states of one or two shards and random counts (and
// reservations), a refused request is refused until retryAfter and admitted then; a retryAfter
// clamped to MaxRetryAfter says only "not within 31,700 years".
func TestARefusalsRetryAfterIsTheFirstMillisecondTheSameRequestFits(t *testing.T) {
	refusals := 0
	for seed := range uint64(20_000) {
		r := rand.New(rand.NewPCG(seed, 17))
		def := randomRetryDefinition(r)
		if err := def.Validate(); err != nil {
			t.Fatalf("seed %d: the generator drew an invalid definition %+v: %v", seed, def, err)
		}
		origin := Origin(def, 1, "retry", fmt.Sprint(seed))
		now := int64(1_700_000_000_000) + int64(r.IntN(100_000_000))
		states := randomRetryStates(r, def, now, origin)
		reserve := def.Kind != SlidingWindow && r.IntN(3) == 0
		p := def.shardParams()
		usable := p.max * float64(len(states))
		count := []float64{1, usable * r.Float64(), usable, math.Nextafter(usable, 0), math.Ceil(usable * r.Float64()), usable * (1 + r.Float64())}[r.IntN(6)]
		if def.CheckCount(count, reserve) != nil {
			continue
		}
		d := Decide(def, states, count, reserve, now, origin)
		if d.OK {
			continue
		}
		ms := RetryAfterMillis(d.RetryAfter)
		if ms >= MaxRetryAfter {
			continue
		}
		refusals++
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			refusedUntil(t, def, states, count, reserve, now, origin)
		})
	}
	if refusals < 2_000 {
		t.Fatalf("only %d refusals to check", refusals)
	}
}
