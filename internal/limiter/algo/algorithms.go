package algo

import (
	"hash/fnv"
	"math"
	"strconv"
	"strings"
)

// State is one stored shard row. Exists=false means "no row", which every kind reads as full.
type State struct {
	Value float64
	TS    int64
	// Counters (sliding window only) hold the counts of sub-intervals n-resolution .. n, where n
	// is the sub-interval that contains TS; index resolution is the current one.
	Counters []float64
	// PenaltyUntil (ms since the epoch, 0 for none) is when the penalty of the last refusal ends:
	// until then every decision on the key is refused (Definition.Penalty).
	PenaltyUntil int64
	Exists       bool
}

// shardView is one shard brought forward to the decision's clock reading, before consumption.
type shardView struct {
	avail    float64   // tokens available now (sliding window: rate - estimate)
	ts       int64     // ts to store: never earlier than the stored ts
	counters []float64 // sliding window: counts aligned so the last is sub-interval n
	n        int64     // sliding window: current sub-interval
	f        float64   // sliding window: elapsed fraction of sub-interval n
}

// floorDiv is division rounding toward negative infinity.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// floorMod is the remainder matching floorDiv, always in [0, b).
func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }

// Offset is the stable pseudo-random origin in [0, period) of a fixed window without a start,
// so that the windows of different keys do not all roll over at the same instant.
func Offset(tenantID int64, name, key string, period int64) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(strconv.FormatInt(tenantID, 10) + "\x00" + name + "\x00" + key))
	return int64(h.Sum64() % uint64(period))
}

// Origin is where the windows of one key are aligned: a fixed window's start, or its stable
// per-key Offset without one; 0 for the other kinds, which do not use it.
func Origin(def Definition, tenantID int64, name, key string) int64 {
	if def.Kind != FixedWindow {
		return 0
	}
	if def.Start != nil {
		return *def.Start
	}
	return Offset(tenantID, name, key, def.Period)
}

// viewTokenBucket refills a token bucket shard: value + elapsed*rate/period, capped at max.
// A stored ts ahead of now (a skewed clock wrote it) counts as now, so no tokens are minted.
func viewTokenBucket(p shardParams, st State, now int64) shardView {
	if !st.Exists {
		return shardView{avail: p.max, ts: now}
	}
	ts := max(now, st.TS)
	// Multiply before dividing so that whole-token refills are exact in float64.
	v := st.Value + float64(ts-st.TS)*p.rate/float64(p.period)
	return shardView{avail: math.Min(v, p.max), ts: ts}
}

// viewFixedWindow rolls a fixed window shard forward by the whole windows elapsed.
func viewFixedWindow(p shardParams, st State, now, origin int64) shardView {
	if !st.Exists {
		return shardView{avail: p.max, ts: now - floorMod(now-origin, p.period)}
	}
	windows := floorDiv(max(now-st.TS, 0), p.period)
	// On the 9-decimal grid as a window's balances are (balanceAfter): 0.1 + 3 × 0.3 is 1.
	v := math.Min(AddCounts(p.kind, st.Value, timesOnGrid(p.rate, windows)), p.max)
	return shardView{avail: v, ts: st.TS + windows*p.period}
}

// subInterval returns the sliding window sub-interval containing t and the elapsed fraction of it.
// Sub-intervals are period/resolution long and aligned to the epoch.
func subInterval(p shardParams, t int64) (int64, float64) {
	r := int64(p.resolution)
	n := floorDiv(t*r, p.period)
	return n, float64(floorMod(t*r, p.period)) / float64(p.period)
}

// subIntervalStart is the first whole millisecond of sub-interval n; storing it as ts lets
// subInterval(ts) recover n exactly.
func subIntervalStart(p shardParams, n int64) int64 {
	r := int64(p.resolution)
	return -floorDiv(-n*p.period, r)
}

// viewSlidingWindow shifts a sliding window shard's counters to the current sub-interval and
// computes the weighted estimate. A stored sub-interval ahead of now is read at its very start,
// where the estimate is largest, so a slow clock can only refuse more, never admit more.
func viewSlidingWindow(p shardParams, st State, now int64) shardView {
	res := p.resolution
	n, f := subInterval(p, now)
	counters := make([]float64, res+1)
	if st.Exists {
		stored, _ := subInterval(p, st.TS)
		if stored > n {
			n, f = stored, 0
		}
		shift := n - stored
		for i, c := range st.Counters {
			j := int64(i) - shift
			if j >= 0 && i < len(counters) {
				counters[j] = c
			}
		}
	}
	est := estimate(counters, f)
	return shardView{avail: balanceAfter(SlidingWindow, p.rate, est), ts: subIntervalStart(p, n), counters: counters, n: n, f: f}
}

// viewQuota reads a quota shard at now: full in a window it has not counted in yet. A stored
// window start ahead of now's window (a skewed clock wrote it) keeps its count until that window
// ends, so a slow clock cannot start a window over.
func viewQuota(p shardParams, st State, now int64) shardView {
	start, _ := Window(p.calendar, p.zone, p.anchorDay, now)
	if !st.Exists || st.TS < start {
		return shardView{avail: p.max, ts: start}
	}
	return shardView{avail: math.Min(st.Value, p.max), ts: st.TS}
}

// viewOf brings a shard of any kind forward to now (see the view functions above).
func viewOf(p shardParams, st State, now, origin int64) shardView {
	switch p.kind {
	case Quota:
		return viewQuota(p, st, now)
	case TokenBucket:
		return viewTokenBucket(p, st, now)
	case FixedWindow:
		return viewFixedWindow(p, st, now, origin)
	case Concurrency:
		return viewConcurrency(p, st, now)
	default:
		return viewSlidingWindow(p, st, now)
	}
}

// estimate is sum(count of sub-intervals n-res+1 .. n) + count(n-res) * (1 - f).
func estimate(counters []float64, f float64) float64 {
	sum := 0.0
	for _, c := range counters[1:] {
		sum += c
	}
	return sum + counters[0]*(1-f)
}

// slidingRetryAt is the earliest time (ms, fractional) at which the shards' combined estimate
// plus count fits their combined rate, assuming no new consumption, in real numbers: decide
// checks it against its own floating point (firstFit). All views share n and f (but for a shard
// a skewed clock wrote ahead of now, which firstFit's check also covers).
func slidingRetryAt(p shardParams, views []shardView, rate, count float64) float64 {
	res := p.resolution
	n, f0 := views[0].n, views[0].f
	for k := 0; k <= res+1; k++ {
		var full, prev float64
		for _, v := range views {
			for i := k + 1; i <= res; i++ {
				full += v.counters[i]
			}
			if k <= res {
				prev += v.counters[k]
			}
		}
		// estimate(f) = full + prev*(1-f); need estimate(f) + count <= rate.
		need := full + prev + count - rate // what prev*f must cover
		var f float64
		switch {
		case need <= 0:
			f = 0
		case prev > 0 && need/prev < 1:
			f = need / prev
		default:
			continue
		}
		if k == 0 {
			f = math.Max(f, f0)
		}
		// The sub-interval's start, then the fraction of one: (n + k + f) * period / res summed
		// first lost f to rounding where it is below the ulp of n (a wait of 1e-9 of a
		// sub-interval, a rate of 1e9).
		return float64((n+int64(k))*p.period)/float64(res) + f*float64(p.period)/float64(res)
	}
	return math.Inf(1) // only when count > rate, which validation rules out
}

// FormatCounters is the stored form of a sliding window's counters.
func FormatCounters(c []float64) string {
	parts := make([]string, len(c))
	for i, v := range c {
		parts[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

// ParseCounters reads the stored counter list of one shard of a sliding window def (normalized);
// a damaged list reads as "window full", which refuses rather than admits until the counters age
// out.
func ParseCounters(def Definition, s string) []float64 {
	if def.Kind == Concurrency {
		return parseLeases(def, s)
	}
	p := def.shardParams()
	res, rate := p.resolution, p.rate
	out := make([]float64, res+1)
	parts := strings.Split(s, ",")
	if s == "" || len(parts) != res+1 {
		out[res] = rate
		return out
	}
	for i, part := range parts {
		v, err := strconv.ParseFloat(part, 64)
		if err != nil || math.IsNaN(v) || v < 0 {
			out[res] = rate
			return out
		}
		out[i] = v
	}
	return out
}
