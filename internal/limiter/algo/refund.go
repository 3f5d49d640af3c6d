package algo

import (
	"math"
	"sort"
)

// Refund gives count tokens back to shard states: the one or two a decision would use (a refund),
// or every shard of the limit (what a hold gives back, so that all of it finds room):
// a token bucket, a fixed window or a quota gains them up to its maximum; a sliding window takes
// them off the counts of its current window, newest first, never below zero. It never creates
// more than the limit's maximum, and it keeps a running penalty. The emptiest shard is refilled
// first, so it gives back min(count, what the shards lack), to the shards that lack most. Writes hold only the shards that changed; Remaining is what the shards hold afterwards
// and Refunded what was actually given back (at most count).
func Refund(def Definition, states []State, count float64, now, origin int64) (out Outcome, refunded float64) {
	return refund(def, states, count, now, origin, nil)
}

// RefundAt is Refund of what was taken at the instant at (ms): a sliding window takes the count
// off the sub-interval that contains at (as far as its count there goes), rather than off the
// newest first, so that a hold taken early in the window does not give back at a later
// sub-interval's heavier weight; the other kinds are Refund's.
func RefundAt(def Definition, states []State, count float64, now, origin, at int64) (out Outcome, refunded float64) {
	return refund(def, states, count, now, origin, &at)
}

func refund(def Definition, states []State, count float64, now, origin int64, at *int64) (out Outcome, refunded float64) {
	p := def.shardParams()
	views := make([]shardView, len(states))
	order := make([]int, len(states))
	for i, st := range states {
		views[i] = viewOf(p, st, now, origin)
		order[i] = i
	}
	// Emptiest first (stable: ties keep the given order).
	sort.SliceStable(order, func(a, b int) bool { return views[order[a]].avail < views[order[b]].avail })
	out = Outcome{OK: true, RetryAfter: math.NaN(), Writes: make([]State, len(states))}
	left := count
	for _, i := range order {
		v := views[i]
		if left <= 0 {
			out.Remaining += v.avail
			continue
		}
		var given float64
		w := State{TS: v.ts, PenaltyUntil: states[i].PenaltyUntil, Exists: true}
		if p.kind == SlidingWindow {
			c := append([]float64(nil), v.counters...)
			from, to := 0, len(c)-1 // newest first, or only the sub-interval of at
			if at != nil {
				n, _ := subInterval(p, *at)
				to = len(c) - 1 - int(min(max(v.n-n, -1), int64(len(c)))) // out of range: none
				from = to
			}
			for k := to; k >= from && k >= 0 && k < len(c) && left > 0; k-- {
				take := math.Min(c[k], left)
				c[k] -= take
				left -= take
				given += take
			}
			w.Counters = c
			w.Value = p.rate - estimate(c, v.f)
		} else {
			given = math.Min(left, math.Max(p.max-v.avail, 0))
			left -= given
			w.Value = v.avail + given
		}
		if given > 0 {
			out.Writes[i] = w
			refunded += given
			out.Remaining += w.Value
		} else {
			out.Remaining += v.avail
		}
	}
	return out, refunded
}

// Taken is what a hold took from one limit and key when it was made, recorded so that closing the
// hold gives back no more than still counts against the limit: a window that has rolled over, or
// a bucket that could have refilled what the hold took, owes nothing for it.
type Taken struct {
	Kind  Kind    // the limit's kind then: a limit of another kind now gets nothing back
	At    int64   // when (ms, the engine's clock)
	Count float64 // what was written: 0 where an override allowed the key or a shadow refusal wrote nothing
	// Room is, for a token bucket, what the shards the hold used lacked right after it (their
	// maximum less what they held), and Refill what those shards refill per ms.
	Room, Refill float64
}

// Returnable is the most of t that closing the hold may give back at now under def (origin: the
// key's window origin), by kind:
//   - token bucket: Count, less whatever refill since At could have made the shards full without
//     the hold (Room − Refill·elapsed): past that, giving the hold's tokens back would let through
//     more than a bucket that never saw the hold could have;
//   - fixed window and quota: Count within the window it was taken in, nothing after;
//   - sliding window: Count while its sub-interval is still counted (RefundAt takes it off that
//     sub-interval), nothing after.
func (t Taken) Returnable(def Definition, now, origin int64) float64 {
	def = def.Normalized()
	if t.Count <= 0 || def.Kind.Algorithm() != t.Kind.Algorithm() {
		return 0
	}
	p := def.shardParams()
	stillCounted := false
	switch p.kind {
	case TokenBucket:
		return math.Max(0, math.Min(t.Count, t.Room-t.Refill*float64(max(now-t.At, 0))))
	case FixedWindow:
		stillCounted = floorDiv(t.At-origin, p.period) == floorDiv(now-origin, p.period)
	case Quota:
		then, _ := def.WindowAt(t.At)
		current, _ := def.WindowAt(now)
		stillCounted = then == current
	case SlidingWindow:
		then, _ := subInterval(p, t.At)
		current, _ := subInterval(p, now)
		stillCounted = current-then <= int64(p.resolution)
	}
	if !stillCounted {
		return 0
	}
	return t.Count
}
