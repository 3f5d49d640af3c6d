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
			for k := len(c) - 1; k >= 0 && left > 0; k-- {
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
