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
	// The shards' parts add up to count in real numbers; in floating point their sum can be an
	// ulp over it (0.5 + … of 2.6 summing to 2.6000000000000005), which is not "at most count".
	return out, math.Min(refunded, count)
}

// Taken is what a hold took from one limit and key when it was made, shard by shard, recorded so
// that closing the hold gives back no more than what still counts against the limit (GiveBack).
type Taken struct {
	Kind   Kind  // the limit's kind then: a limit of another kind now gets nothing back
	At     int64 // when (ms, the engine's clock)
	Shards []TakenShard
	// Refill is what one shard refilled then: per ms for a token bucket, per window for a fixed
	// window (0 for the other kinds); Max the most one shard held then.
	Refill, Max float64
	// Until is when an override's expiry could change those numbers with no write
	// (OverrideIndex.NumbersUntil); 0: none could.
	Until int64 `json:",omitempty"`
}

// TakenShard is what a hold took from one shard: Took (0 where a decision wrote nothing: an allow
// override, a shadow limit's would-be refusal), leaving After (a bucket's or window's value).
type TakenShard struct {
	Shard       int
	Took, After float64
}

// Picks are the shards t took from, in order.
func (t Taken) Picks() []int {
	out := make([]int, len(t.Shards))
	for i, s := range t.Shards {
		out[i] = s.Shard
	}
	return out
}

// TakeOf is what the outcome d of a decision on states (the shards picks, in order) took from
// each shard it wrote.
func TakeOf(def Definition, states []State, picks []int, d Outcome, now, origin int64) []TakenShard {
	var out []TakenShard
	for k, w := range d.Writes {
		if !w.Exists {
			continue
		}
		before, _ := Peek(def, states[k], now, origin)
		out = append(out, TakenShard{Shard: picks[k], Took: before - w.Value, After: w.Value})
	}
	return out
}

// GiveBack gives back up to count of what t took, at now, to the shards it took from (states:
// their rows now, in t.Shards' order), each at most what of its taking still counts (never above
// the shard's maximum: the refund's math). What still counts, by kind:
//   - token bucket and fixed window: the shard's value without the hold would have been its value
//     now plus what the hold took, unless it would have reached the maximum in between (a bucket
//     does not refill past it). The value since the hold is at most its value just after, plus
//     the refill until the row was last written, and
//     since then its value now: at most the maximum less that much comes back. A row that is gone
//     (reset, or swept as full) gets nothing;
//   - quota: all of it within the calendar window it was taken in, nothing after;
//   - sliding window: all of it while its sub-interval is still counted, taken off that
//     sub-interval.
//
// since[k] is what other holds gave back to t.Shards[k] after t was taken (+Inf when unknown; nil:
// nothing): it may have raised the shard as far, so a token bucket or fixed window counts it into
// the most the shard can have held. given[k] is what t.Shards[k] got back.
//
// Numbers other than the hold's (a definition or override changed the rate or maximum), or numbers
// an override's expiry may have changed since (t.Until), give nothing back. Outcome's Writes are
// the shards that changed, Remaining what they hold afterwards.
func (t Taken) GiveBack(def Definition, states []State, count float64, now, origin int64, since []float64) (out Outcome, given []float64) {
	p := def.shardParams()
	out = Outcome{OK: true, RetryAfter: math.NaN(), Writes: make([]State, len(states))}
	given = make([]float64, len(states))
	if p.kind != t.Kind.Algorithm() || p.max != t.Max || shardRefill(p) != t.Refill || (t.Until != 0 && now >= t.Until) {
		// Other numbers now, or maybe in between (a definition or an override changed them while
		// the hold was open, or an override expired): the key's history no longer says what the
		// hold's amount became.
		return out, given
	}
	left := count
	for k, st := range states {
		v := viewOf(p, st, now, origin)
		ts := t.Shards[k]
		owed := 0.0
		if st.Exists && ts.Took > 0 {
			others := 0.0
			if since != nil {
				others = since[k]
			}
			owed = math.Min(ts.Took, t.stillCounted(p, ts, st, v, now, origin, others))
		}
		g := math.Max(0, math.Min(owed, left))
		w := State{TS: v.ts, PenaltyUntil: st.PenaltyUntil, Exists: true}
		if p.kind == SlidingWindow {
			c := append([]float64(nil), v.counters...)
			n, _ := subInterval(p, t.At)
			if i := len(c) - 1 - int(v.n-n); v.n >= n && i >= 0 {
				g = math.Min(g, c[i])
				c[i] -= g
			} else {
				g = 0
			}
			w.Counters, w.Value = c, p.rate-estimate(c, v.f)
		} else {
			g = math.Min(g, math.Max(p.max-v.avail, 0))
			w.Value = v.avail + g
		}
		if g > 0 {
			out.Writes[k] = w
			given[k] = g
			left -= g
			out.Remaining += w.Value
		} else {
			out.Remaining += v.avail
		}
	}
	return out, given
}

// shardRefill is what one shard of p refills, in Taken.Refill's units.
func shardRefill(p shardParams) float64 {
	switch p.kind {
	case TokenBucket:
		return p.rate / float64(p.period)
	case FixedWindow:
		return p.rate
	}
	return 0
}

// ShardNumbers are a Taken's Refill and Max for def.
func ShardNumbers(def Definition) (refill, maxPerShard float64) {
	p := def.shardParams()
	return shardRefill(p), p.max
}

// stillCounted is how much of what the hold took from one shard still counts (see GiveBack),
// before capping at what it took; st is the shard's row now and v its view at now.
func (t Taken) stillCounted(p shardParams, ts TakenShard, st State, v shardView, now, origin int64, since float64) float64 {
	switch p.kind {
	case TokenBucket, FixedWindow:
		// GiveBack checked that the refill is still the hold's (t.Refill): per ms or per window.
		elapsed := st.TS - t.At
		if p.kind == FixedWindow {
			elapsed = floorDiv(st.TS-origin, p.period) - floorDiv(t.At-origin, p.period)
		}
		refilled := t.Refill * float64(max(elapsed, 0))
		highest := math.Max(math.Min(p.max, ts.After+refilled+since), v.avail)
		return p.max - highest
	case Quota:
		then, _ := Window(p.calendar, p.zone, p.anchorDay, t.At)
		current, _ := Window(p.calendar, p.zone, p.anchorDay, now)
		if then == current {
			return ts.Took
		}
	case SlidingWindow:
		then, _ := subInterval(p, t.At)
		if current, _ := subInterval(p, now); current-then <= int64(p.resolution) {
			return ts.Took
		}
	}
	return 0
}
