package algo

import (
	"math"
	"strconv"
)

// Outcome is the pure outcome of one limit for one request.
type Outcome struct {
	OK         bool
	RetryAfter float64 // ms until the caller should retry or run reserved work; NaN when none
	Remaining  float64 // tokens left in the shards this decision used (after consumption if OK)
	Writes     []State // new state for each input shard; Exists=false means "leave untouched"
	// WindowStart and WindowEnd (quotas only, else 0) are the calendar window the decision
	// counted in: [start, end) in ms since the epoch; the quota is whole again at WindowEnd.
	WindowStart, WindowEnd int64
	// PenaltyUntil, when not 0, is the end (ms since the epoch) of the penalty this refusal
	// starts: the one thing a refusal writes (WithPenalty), when the definition has a penalty.
	PenaltyUntil int64
	// Penalized means the refusal is a running penalty's, not the tokens': it starts no penalty.
	Penalized bool
	// Used is how many of the given shards the decision used (Remaining is theirs): one, or two
	// pooled; 0 where no shard's balance was weighed (a concurrency limit, a running penalty).
	Used int
}

// Decide applies one request to one or two shard states (DESIGN §3). states holds the shard the
// engine picked, plus a second distinct one when the limit has two or more shards (the power of
// two choices). It never mutates its inputs. A refusal writes nothing, except that with a
// penalty a refusal by the limit itself starts one (PenaltyUntil): until then every decision
// is refused, with retryAfter the time left. A refusal of count 0 (a gateway's look at the
// balance) starts none. Refusals during a penalty do not renew it (a client
// retrying when told to gets its answer), and a penalty never admits anything, so the limit
// alone still bounds what is admitted.
func Decide(def Definition, states []State, count float64, reserve bool, now, origin int64) Outcome {
	if def.Kind == Concurrency { // one shard, no penalty (validation): a lease or not
		return decideConcurrency(def, states[0], now)
	}
	d := decide(def, states, count, reserve, now, origin)
	var until int64
	for _, st := range states {
		until = max(until, st.PenaltyUntil)
	}
	if until > now {
		ra, rem := float64(until-now), d.Remaining
		if d.OK {
			rem += count // nothing is consumed: what was there before
		} else {
			ra = math.Max(ra, d.RetryAfter)
		}
		return Outcome{RetryAfter: ra, Remaining: rem, Writes: make([]State, len(states)), Penalized: true}
	}
	if !d.OK && def.Penalty > 0 && count > 0 { // a check of the balance (count 0) asks; it does not offend
		d.PenaltyUntil = now + def.Penalty
		d.RetryAfter = math.Max(d.RetryAfter, float64(def.Penalty))
	}
	return d
}

// WithPenalty is the state to store for a refusal that starts a penalty ending at until: st
// unchanged but for its penalty (a refusal consumes nothing), or, when there is no row, the full
// state a missing row stands for at now (it reads exactly like no row, so nothing is minted).
func WithPenalty(def Definition, st State, now, origin, until int64) State {
	if !st.Exists {
		p := def.shardParams()
		v := viewOf(p, st, now, origin)
		st = State{Value: v.avail, TS: v.ts, Exists: true}
		if p.kind == SlidingWindow {
			st.Counters = v.counters
		}
	}
	st.PenaltyUntil = max(st.PenaltyUntil, until)
	return st
}

// FullAt is when (ms since the epoch) a shard is full again if nothing more is consumed: now when
// it is full already. A token bucket (and gcra) refills continuously: ts + (max - value) *
// period / rate, rounded up to a whole ms; a fixed window refills rate per window: the start of
// the window ceil((max - value) / rate) windows after the current one; a sliding window is full
// when its newest non-zero sub-interval has left the weighted estimate, at the start of the
// sub-interval resolution + 1 after it. Capped at now + MaxRetryAfter. A running penalty is not
// counted: it refuses a full key too.
func FullAt(def Definition, st State, now, origin int64) int64 {
	p := def.shardParams()
	v := viewOf(p, st, now, origin)
	var at float64
	switch p.kind {
	case Concurrency:
		// Every slot is free when the last lease expires.
		if len(v.counters) == 0 {
			return now
		}
		at = v.counters[len(v.counters)-1]
	case Quota:
		// A quota is whole again only when its calendar window ends.
		if isFull(p, v.avail) {
			return now
		}
		_, end := Window(p.calendar, p.zone, p.anchorDay, now)
		at = float64(end)
	case SlidingWindow:
		if isFull(p, v.avail) { // what is left in the counters is rounding (a refund's residue)
			return now
		}
		last := -1
		for i, c := range v.counters {
			if c != 0 {
				last = i
			}
		}
		if last < 0 {
			return now
		}
		// counters[i] is sub-interval n - resolution + i.
		at = float64(subIntervalStart(p, v.n-int64(p.resolution)+int64(last)+int64(p.resolution)+1))
	case FixedWindow:
		missing := p.max - v.avail
		if isFull(p, v.avail) {
			return now
		}
		// The windows the formula counts, checked against the decision's own arithmetic (value
		// + rate × windows): 0.9 / 0.3 is 3 windows where 3 × 0.3 is 0.8999999999999999, and
		// 2.1 / 0.3 is 7.000000000000001, one window more than it takes.
		windows := math.Ceil(missing / p.rate)
		fullAfter := func(k float64) bool {
			t := float64(v.ts) + k*float64(p.period)
			return t >= float64(now+MaxRetryAfter) || isFull(p, viewOf(p, st, int64(t), origin).avail)
		}
		switch {
		case windows > 1 && fullAfter(windows-1):
			windows--
		case !fullAfter(windows):
			windows++
		}
		at = float64(v.ts) + windows*float64(p.period)
	default:
		missing := p.max - v.avail
		if missing <= 0 {
			return now
		}
		at = math.Ceil(float64(v.ts) + missing*float64(p.period)/p.rate)
		// The refill is computed as elapsed * rate / period (viewTokenBucket); where that rounds
		// a hair below max at the exact time, full is the next millisecond.
		for range 2 {
			if at >= float64(now+MaxRetryAfter) || viewOf(p, st, int64(at), origin).avail >= p.max {
				break
			}
			at++
		}
	}
	return int64(math.Min(math.Max(at, float64(now)), float64(now+MaxRetryAfter)))
}

// FullIn is how long (ms) until the shards a decision used are all full again if nothing more is
// consumed: the latest of their FullAt, given the outcome d of Decide on states. Where d wrote
// nothing (a refusal) it is the states as they are.
func FullIn(def Definition, states []State, d Outcome, now, origin int64) float64 {
	at := now
	for i, st := range states {
		if i < len(d.Writes) && d.Writes[i].Exists {
			st = d.Writes[i]
		} else if d.OK {
			continue // a shard the decision did not use
		}
		at = max(at, FullAt(def, st, now, origin))
	}
	return float64(at - now)
}

// decide is Decide without penalties.
func decide(def Definition, states []State, count float64, reserve bool, now, origin int64) Outcome {
	p := def.shardParams()
	views := make([]shardView, len(states))
	for i, st := range states {
		views[i] = viewOf(p, st, now, origin)
	}
	use := shardsToUse(views, count)
	avail := availableIn(views, use)
	rate := p.rate * float64(len(use))
	d := Outcome{RetryAfter: math.NaN(), Writes: make([]State, len(states)), Used: len(use)}
	after := balanceAfter(p.kind, avail, count)
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
			pooled := make([]shardView, len(use))
			for k, i := range use {
				pooled[k] = views[i]
			}
			estimate := slidingRetryAt(p, pooled, rate, count) - float64(now)
			d.RetryAfter = firstFit(now, estimate, func(at int64) bool { return fitsAt(p, states, count, false, at, origin) })
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
			// Snapped as a window's balance is: 10,000 counts of 0.1 add up to 1000.
			c[len(c)-1] = AddCounts(p.kind, c[len(c)-1], take)
			d.Writes[i] = State{Value: views[i].avail - take, TS: views[i].ts, Counters: c, Exists: true}
		}
		return d
	}
	if after < 0 {
		deficit := -after
		if !admits(p, avail, count, reserve, len(use)) {
			// Refused, the shards as they are must first refill the count, or, for a reservation,
			// what brings the deficit within maxReserved (per shard in use); each refills at its own
			// rate up to its maximum (refillNeeded). The formula's wait is then checked against the
			// decision's own arithmetic (firstFit).
			target := count
			if reserve {
				target -= p.maxReserved * float64(len(use))
			}
			tokens, refill := refillNeeded(p, views, use, target)
			estimate := refillWait(p, views, use, tokens, refill, now)
			d.RetryAfter = firstFit(now, estimate, func(at int64) bool { return fitsAt(p, states, count, reserve, at, origin) })
			d.Remaining = avail
			return d
		}
		// A reservation leaves every shard in use at the same balance, so they refill the deficit
		// together: the reserved work may run when they have. The formula's estimate, checked
		// below once the writes are known.
		d.RetryAfter = refillWait(p, views, use, deficit, rate, now)
	}
	d.OK, d.Remaining = true, after
	for _, i := range use {
		d.Writes[i] = State{Value: after / float64(len(use)), TS: views[i].ts, Exists: true}
	}
	if after < 0 {
		// The reservation's wait checked against the decision's own arithmetic, as a refusal's
		// is (firstFit): a fixed window's 2.1 / 0.3 is 7.000000000000001 windows, a whole window
		// late; its 0.9 / 0.3 is 3 where -0.9 + 3 × 0.3 is still below 0.
		d.RetryAfter = firstFit(now, d.RetryAfter, func(at int64) bool {
			for _, i := range use {
				if viewOf(p, d.Writes[i], at, origin).avail < 0 {
					return false
				}
			}
			return true
		})
	}
	return d
}

// shardsToUse is which shards a decision uses: the fuller alone when it holds count (or is the
// only one); otherwise both, pooled.
func shardsToUse(views []shardView, count float64) []int {
	best := 0
	for i := range views {
		if views[i].avail > views[best].avail {
			best = i
		}
	}
	if views[best].avail < count && len(views) == 2 {
		return []int{0, 1}
	}
	return []int{best}
}

// availableIn is what the shards in use hold together.
func availableIn(views []shardView, use []int) float64 {
	var avail float64
	for _, i := range use {
		avail += views[i].avail
	}
	return avail
}

// admits reports whether shards holding avail together (used of them) admit count: when it fits,
// or when a reservation's deficit is within maxReserved per shard used. (Sliding windows and
// quotas never see a reservation: CheckCount refuses it.)
func admits(p shardParams, avail, count float64, reserve bool, used int) bool {
	after := balanceAfter(p.kind, avail, count)
	return after >= 0 || (reserve && -after <= p.maxReserved*float64(used))
}

// fitsAt reports whether the request decide refused at an earlier instant is admitted at `at` if
// nothing is consumed meanwhile: the decision's own views, choice of shards and test, at `at`.
func fitsAt(p shardParams, states []State, count float64, reserve bool, at, origin int64) bool {
	views := make([]shardView, len(states))
	for i, st := range states {
		views[i] = viewOf(p, st, at, origin)
	}
	use := shardsToUse(views, count)
	return admits(p, availableIn(views, use), count, reserve, len(use))
}

// firstFit is a refusal's retryAfter (ms after now), or an admitted reservation's: the first
// whole millisecond at which fits holds, found from estimate, a closed formula's wait. The
// formulas are exact in real numbers, but the decision adds and multiplies in floating point (a
// fixed window's 0.1 + 3 × 0.3 is 0.9999999999999999, not 1; a sliding window's wait of a
// billionth of a sub-interval rounds away), and a formula cannot foresee every choice of shards,
// so a client retrying when told was refused again, or told to wait longer than it had to. So
// the estimate is checked: it usually fits and a millisecond earlier does not (two checks, made
// on refusals and reservations only); otherwise the search moves away from it in doubling steps
// until the answer changes, then bisects. The views of every kind only fill up as time passes
// (to a rounding), so the answer changes once.
// An estimate of MaxRetryAfter or more, or no fit before it, gives MaxRetryAfter, where
// RetryAfterMillis clamps anyway.
func firstFit(now int64, estimate float64, fits func(at int64) bool) float64 {
	if !(estimate < float64(MaxRetryAfter)) {
		return float64(MaxRetryAfter)
	}
	hint := now + RetryAfterMillis(estimate)
	lo, hi := now, hint // refused at lo (now was), admitted at hi once found
	if fits(hint) {
		for step := int64(1); lo == now && hint-step > now; step *= 2 {
			if at := hint - step; fits(at) {
				hi = at
			} else {
				lo = at
			}
		}
	} else {
		lo = hint
		for step := int64(1); ; step *= 2 {
			at := hint + step
			if at-now >= MaxRetryAfter {
				return float64(MaxRetryAfter)
			}
			if fits(at) {
				hi = at
				break
			}
			lo = at
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if fits(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return float64(hi - now)
}

// refillWait is how long (ms) the shards in use take to refill tokens at refill per period, as a
// closed formula. A token bucket counts from the stored ts if a skewed clock put it ahead of now.
// A fixed window refills at window starts: ts + period*ceil(tokens/refill) - now, in floating
// point, as the number of windows can exceed what int64 milliseconds hold (rate 1e-12 per day),
// and RetryAfterMillis clamps.
func refillWait(p shardParams, views []shardView, use []int, tokens, refill float64, now int64) float64 {
	if p.kind == FixedWindow {
		var ts int64
		for _, i := range use {
			ts = max(ts, views[i].ts)
		}
		return float64(ts-now) + float64(p.period)*math.Ceil(tokens/refill)
	}
	var lead int64
	for _, i := range use {
		lead = max(lead, views[i].ts-now)
	}
	return float64(lead) + tokens*float64(p.period)/refill
}

// refillNeeded is what the shards in use must refill before they hold count together, and the
// rate (per period) at which they refill it: each shard refills at its own rate up to its
// maximum, so two pooled shards refill at twice one's rate only until the fuller one is full,
// and then at one's (the rest is what the emptier one still needs).
func refillNeeded(p shardParams, views []shardView, use []int, count float64) (tokens, rate float64) {
	if len(use) == 1 {
		return count - views[use[0]].avail, p.rate
	}
	fuller, other := views[use[0]].avail, views[use[1]].avail
	if fuller < other {
		fuller, other = other, fuller
	}
	if both := count - fuller - other; both/2 <= p.max-fuller {
		return both, 2 * p.rate
	}
	return count - p.max - other, p.rate
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

// isFull reports whether a shard holding avail is full the way a decision sees it: it admits
// the shard's maximum (a window within balanceAfter's rounding, a token bucket exactly).
func isFull(p shardParams, avail float64) bool { return balanceAfter(p.kind, avail, p.max) >= 0 }

// balanceAfter is avail - count, where in a window (fixed, sliding, quota) the difference of two
// numbers of at most 9 decimals (the API's precision) is snapped to the 9-decimal number it
// rounds (snapToGrid): counts of 0.1 taken from 0.3 leave 0.09999999999999998, which refused the
// third 0.1 of a window of 0.3 until the window ended (while the API showed 0.1), and 10,000
// counts of 0.1 from 1000 drift by 1.6e-10 unless each stored balance is snapped. Only such a
// difference is snapped: its real value has at most 9 decimals too, so a real shortfall is at
// least 1e-9, which no snap crosses; a count of 0.1 plus a few ulps gains nothing, and neither
// does a balance a count of more decimals left (2e-10 taken from 1e6, then 1e6, would have been
// admitted). A token bucket refills that noise, and is decided the same way by the one-trip SQL
// function (migration 00024), so it is left exact.
func balanceAfter(kind Kind, avail, count float64) float64 {
	after := avail - count
	if kind == TokenBucket || after == math.Trunc(after) || Decimal9(count) != count || Decimal9(avail) != avail {
		return after
	}
	return snapToGrid(after, math.Max(math.Abs(avail), math.Abs(count)))
}

// AddCounts is a + b the way a limit of kind (its Algorithm) adds counts: in a window as
// balanceAfter subtracts them (0.1 + 0.2 is 0.3), in a token bucket exactly.
func AddCounts(kind Kind, a, b float64) float64 { return -balanceAfter(kind, -a, b) }

// timesOnGrid is rate × n (n whole) the way a window adds its refills: a rate of at most 9
// decimals times a whole number has at most 9 decimals, so the product is snapped to the
// 9-decimal number it rounds (3 × 0.3 is 0.8999999999999999, and 0.9).
func timesOnGrid(rate float64, n int64) float64 {
	prod := rate * float64(n)
	if Decimal9(rate) != rate || prod == math.Trunc(prod) {
		return prod
	}
	return snapToGrid(prod, math.Abs(prod))
}

// snapToGrid is the 9-decimal number nearest v when v is within rounding of it (4 ulps of
// scale, the larger operand, and never more than 2.5e-10: never a whole token, a tolerance of
// 1e-12 forgave 1000 tokens of a window of 1e15), and v otherwise; never -0.
func snapToGrid(v, scale float64) float64 {
	if g := Decimal9(v); math.Abs(g-v) <= math.Min(0x1p-50*scale, 2.5e-10) {
		return g
	}
	return v
}

// Decimal9 is the double nearest v rounded to 9 decimals (the API's precision), and never -0:
// a number of at most 9 decimals is itself (math.Round(v*1e9)/1e9 made 4377141.871
// 4377141.871000001). The API renders token counts with it.
func Decimal9(v float64) float64 {
	g, err := strconv.ParseFloat(strconv.FormatFloat(v, 'f', 9, 64), 64)
	if err != nil {
		return v
	}
	if g == 0 {
		return 0 // not -0
	}
	return g
}
