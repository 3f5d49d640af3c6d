package algo

import "math"

// Outcome is the pure outcome of one limit for one request.
type Outcome struct {
	OK         bool
	RetryAfter float64 // ms until the caller should retry or run reserved work; NaN when none
	Remaining  float64 // tokens left in the shards this decision used (after consumption if OK)
	Writes     []State // new state for each input shard; Exists=false means "leave untouched"
	// WindowStart and WindowEnd (quotas only, else 0) are the calendar window the decision
	// counted in: [start, end) in ms since the epoch; the quota is whole again at WindowEnd.
	WindowStart, WindowEnd int64
}

// Decide applies one request to one or two shard states (DESIGN §3). states holds the shard the
// engine picked, plus a second distinct one when the limit has two or more shards (the power of
// two choices). It never mutates its inputs. A refusal writes nothing.
func Decide(def Definition, states []State, count float64, reserve bool, now, origin int64) Outcome {
	p := def.shardParams()
	views := make([]shardView, len(states))
	for i, st := range states {
		views[i] = viewOf(p, st, now, origin)
	}
	best := 0
	for i := range views {
		if views[i].avail > views[best].avail {
			best = i
		}
	}
	// Use the fuller shard alone when it suffices (or when there is only one); otherwise pool both.
	use := []int{best}
	if views[best].avail < count && len(views) == 2 {
		use = []int{0, 1}
	}
	var avail, rate float64
	for _, i := range use {
		avail += views[i].avail
		rate += p.rate
	}
	d := Outcome{RetryAfter: math.NaN(), Writes: make([]State, len(states))}
	after := avail - count
	if p.kind == Quota {
		var ts int64
		for _, i := range use {
			ts = max(ts, views[i].ts)
		}
		d.WindowStart, d.WindowEnd = Window(p.calendar, p.zone, p.anchorDay, ts)
		if after < 0 {
			// Quotas cannot reserve: the count fits again only when the next window begins.
			d.RetryAfter, d.Remaining = float64(d.WindowEnd-now), avail
			return d
		}
	}
	if p.kind == SlidingWindow {
		if after < 0 {
			d.RetryAfter = retryAfterSliding(p, views, use, rate, count, now)
			d.Remaining = avail
			return d
		}
		d.OK, d.Remaining = true, after
		// Split the count so that the pooled shards end with equal headroom (half the balance each).
		left := count
		for k, i := range use {
			take := left
			if k == 0 && len(use) == 2 {
				take = math.Min(math.Max(views[i].avail-after/2, 0), left)
			}
			left -= take
			c := append([]float64(nil), views[i].counters...)
			c[len(c)-1] += take
			d.Writes[i] = State{Value: views[i].avail - take, TS: views[i].ts, Counters: c, Exists: true}
		}
		return d
	}
	if after < 0 {
		deficit := -after
		switch p.kind {
		case TokenBucket:
			// Time until the deficit refills, counted from the stored ts if a skewed clock put it ahead.
			var lead int64
			for _, i := range use {
				lead = max(lead, views[i].ts-now)
			}
			d.RetryAfter = float64(lead) + deficit*float64(p.period)/rate
		case FixedWindow:
			var ts int64
			for _, i := range use {
				ts = max(ts, views[i].ts)
			}
			// ts + period*ceil(-value/rate) - now, in floating point: the number of windows can
			// exceed what int64 milliseconds hold (rate 1e-12 per day), and RetryAfterMillis clamps.
			d.RetryAfter = float64(ts-now) + float64(p.period)*math.Ceil(deficit/rate)
		}
		if !reserve || deficit > p.maxReserved*float64(len(use)) {
			d.Remaining = avail
			return d
		}
	}
	d.OK, d.Remaining = true, after
	for _, i := range use {
		d.Writes[i] = State{Value: after / float64(len(use)), TS: views[i].ts, Exists: true}
	}
	return d
}

func retryAfterSliding(p shardParams, views []shardView, use []int, rate, count float64, now int64) float64 {
	pooled := make([]shardView, len(use))
	for k, i := range use {
		pooled[k] = views[i]
	}
	return slidingRetryAt(p, pooled, rate, count) - float64(now)
}

// Peek is the state of a shard brought forward to now without consuming, for getValue.
func Peek(def Definition, st State, now, origin int64) (value float64, ts int64) {
	v := viewOf(def.shardParams(), st, now, origin)
	return v.avail, v.ts
}

// MaxRetryAfter caps retryAfter (ms, about 31,700 years): degenerate definitions (a rate of
// 5e-324 per ten years) would otherwise overflow int64, and JSON numbers stay exact below 2^53.
const MaxRetryAfter = int64(1e15)

// RetryAfterMillis is a retryAfter as whole milliseconds: rounded up, within [1, MaxRetryAfter].
// Never 0: a refusal (or reserved work) that said "now" would invite a retry that cannot
// succeed yet.
func RetryAfterMillis(ms float64) int64 {
	if math.IsNaN(ms) {
		return MaxRetryAfter
	}
	return int64(math.Ceil(math.Min(math.Max(ms, 1), float64(MaxRetryAfter))))
}
