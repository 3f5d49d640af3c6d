package algo

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// admission is one admitted request of a simulated run.
type admission struct {
	at    int64
	count float64
}

func randomDefinition(r *rand.Rand, kind Kind) Definition {
	d := Definition{Kind: kind, Rate: float64(1 + r.IntN(20)), Period: int64(1000 * (1 + r.IntN(60)))}
	switch kind {
	case TokenBucket, FixedWindow:
		if r.IntN(2) == 0 {
			d.Capacity = ptr(float64(1 + r.IntN(40)))
		}
		if r.IntN(2) == 0 {
			d.MaxReserved = ptr(float64(r.IntN(10)))
		}
		if kind == FixedWindow && r.IntN(2) == 0 {
			d.Start = ptr(int64(r.IntN(100_000)))
		}
	case SlidingWindow:
		d.Resolution = 1 + r.IntN(8)
	}
	return d.Normalized()
}

// refTokenBucket is an independent exact (rational) model of §3.1.
type refTokenBucket struct {
	value, ts *big.Rat
	exists    bool
}

func (m *refTokenBucket) decide(d Definition, now int64, count float64, reserve bool) (ok bool, margin float64) {
	maxV := new(big.Rat).SetFloat64(d.Max())
	value, ts := new(big.Rat).Set(maxV), big.NewRat(now, 1)
	if m.exists {
		t := now
		if m.ts.Cmp(big.NewRat(now, 1)) > 0 {
			t = m.ts.Num().Int64() / m.ts.Denom().Int64()
		}
		elapsed := new(big.Rat).Sub(big.NewRat(t, 1), m.ts)
		refill := new(big.Rat).Mul(elapsed, new(big.Rat).SetFloat64(d.Rate))
		refill.Quo(refill, big.NewRat(d.Period, 1))
		value = new(big.Rat).Add(m.value, refill)
		if value.Cmp(maxV) > 0 {
			value = maxV
		}
		ts = big.NewRat(t, 1)
	}
	value.Sub(value, new(big.Rat).SetFloat64(count))
	f, _ := value.Float64()
	if value.Sign() < 0 {
		if !reserve || (d.MaxReserved != nil && -f > *d.MaxReserved) {
			margin := -f
			if reserve {
				margin = -f - *d.MaxReserved
			}
			return false, margin
		}
	}
	m.value, m.ts, m.exists = value, ts, true
	margin = f
	if reserve && d.MaxReserved != nil {
		margin = f + *d.MaxReserved
	}
	return true, math.Abs(margin)
}

// refFixedWindow is an independent exact model of §3.2.
type refFixedWindow struct {
	value  *big.Rat
	ts     int64
	exists bool
}

func (m *refFixedWindow) decide(d Definition, now, origin int64, count float64, reserve bool) (bool, float64) {
	maxV := new(big.Rat).SetFloat64(d.Max())
	value, ts := new(big.Rat).Set(maxV), now-((now-origin)%d.Period+d.Period)%d.Period
	if m.exists {
		windows := int64(0)
		if now > m.ts {
			windows = (now - m.ts) / d.Period
		}
		value = new(big.Rat).Add(m.value, new(big.Rat).Mul(new(big.Rat).SetFloat64(d.Rate), big.NewRat(windows, 1)))
		if value.Cmp(maxV) > 0 {
			value = maxV
		}
		ts = m.ts + windows*d.Period
	}
	value.Sub(value, new(big.Rat).SetFloat64(count))
	f, _ := value.Float64()
	if value.Sign() < 0 && (!reserve || (d.MaxReserved != nil && -f > *d.MaxReserved)) {
		return false, 1
	}
	m.value, m.ts, m.exists = value, ts, true
	return true, 1
}

// refSliding recomputes the estimate from the log of admissions, not from shifted counters.
func refSlidingAllows(d Definition, log []admission, now int64, count float64) (bool, float64) {
	r := int64(d.Resolution)
	n := floorDiv(now*r, d.Period)
	f := float64(floorMod(now*r, d.Period)) / float64(d.Period)
	var full, prev float64
	for _, a := range log {
		k := floorDiv(a.at*r, d.Period)
		switch {
		case k > n-r && k <= n:
			full += a.count
		case k == n-r:
			prev += a.count
		}
	}
	est := full + prev*(1-f)
	return est+count <= d.Rate, math.Abs(d.Rate - est - count)
}

// checkBounds verifies the invariants of DESIGN §3.4 over an admission log.
func checkBounds(t *testing.T, d Definition, origin int64, log []admission, reserveUsed bool) {
	t.Helper()
	slack := 1e-6
	if reserveUsed && d.MaxReserved != nil {
		slack += *d.MaxReserved
	}
	switch d.Kind {
	case TokenBucket:
		for i := range log {
			sum := 0.0
			for j := i; j < len(log); j++ {
				sum += log[j].count
				bound := d.Max() + d.Rate*float64(log[j].at-log[i].at)/float64(d.Period)
				if sum > bound+slack {
					t.Fatalf("token bucket admitted %v in [%d, %d], bound %v (+%v): %+v", sum, log[i].at, log[j].at, bound, slack, d)
				}
			}
		}
	case FixedWindow:
		per := map[int64]float64{}
		for _, a := range log {
			w := floorDiv(a.at-origin, d.Period)
			per[w] += a.count
			if per[w] > d.Max()+slack {
				t.Fatalf("fixed window %d admitted %v > capacity %v (+%v)", w, per[w], d.Max(), slack)
			}
		}
	case SlidingWindow:
		r := int64(d.Resolution)
		per := map[int64]float64{}
		for _, a := range log {
			per[floorDiv(a.at*r, d.Period)] += a.count
		}
		for k := range per {
			sum := 0.0
			for j := k; j < k+r; j++ {
				sum += per[j]
			}
			if sum > d.Rate+1e-9 {
				t.Fatalf("sliding window admitted %v in sub-intervals %d..%d, rate %v", sum, k, k+r-1, d.Rate)
			}
		}
	}
}

func TestPropertyDecisionsMatchReferenceAndNeverExceedBounds(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 7))
		kind := []Kind{TokenBucket, FixedWindow, SlidingWindow}[seed%3]
		d := randomDefinition(r, kind)
		origin := Origin(d, 1, "p", "k")
		var st State
		var tb refTokenBucket
		var fw refFixedWindow
		var log []admission
		reserveUsed := false
		now := int64(r.IntN(1_000_000))
		for range 300 {
			now += int64(r.IntN(int(d.Period/3) + 1))
			count := float64(1 + r.IntN(int(math.Max(1, d.Max()/2))))
			reserve := kind != SlidingWindow && d.MaxReserved != nil && r.IntN(4) == 0
			if d.CheckCount(count, reserve) != nil {
				continue
			}
			got := Decide(d, []State{st}, count, reserve, now, origin)
			if !got.OK && !(got.RetryAfter > 0) {
				t.Fatalf("seed %d: at %d count %v: refused with retryAfter %v (def %+v)", seed, now, count, got.RetryAfter, d)
			}
			var want bool
			var margin float64
			switch kind {
			case TokenBucket:
				want, margin = tb.decide(d, now, count, reserve)
			case FixedWindow:
				want, margin = fw.decide(d, now, origin, count, reserve)
			case SlidingWindow:
				want, margin = refSlidingAllows(d, log, now, count)
			}
			if got.OK != want && margin > 1e-6 {
				t.Fatalf("seed %d: at %d count %v reserve %v: engine ok=%v, reference ok=%v (def %+v)", seed, now, count, reserve, got.OK, want, d)
			}
			if got.OK != want { // a float/rational tie: follow the engine, the bound check still applies
				break
			}
			if got.OK {
				st = got.Writes[0]
				log = append(log, admission{now, count})
				reserveUsed = reserveUsed || reserve
			}
		}
		checkBounds(t, d, origin, log, reserveUsed)
	}
}

func TestPropertyShardsNeverAdmitMoreThanTheUnshardedLimit(t *testing.T) {
	for seed := range uint64(150) {
		r := rand.New(rand.NewPCG(seed, 11))
		kind := []Kind{TokenBucket, FixedWindow, SlidingWindow}[seed%3]
		d := randomDefinition(r, kind)
		d.Rate *= 10
		if d.Capacity != nil {
			*d.Capacity *= 10
		}
		d.Shards = 2 + r.IntN(9)
		d.MaxReserved = nil
		origin := Origin(d, 1, "p", "k")
		states := make([]State, d.Shards)
		var log []admission
		now := int64(0)
		for range 400 {
			now += int64(r.IntN(int(d.Period/5) + 1))
			count := float64(1 + r.IntN(3))
			if d.CheckCount(count, false) != nil {
				continue
			}
			a := r.IntN(d.Shards)
			b := (a + 1 + r.IntN(d.Shards-1)) % d.Shards
			got := Decide(d, []State{states[a], states[b]}, count, false, now, origin)
			if !got.OK {
				continue
			}
			for i, idx := range []int{a, b} {
				if got.Writes[i].Exists {
					states[idx] = got.Writes[i]
				}
			}
			log = append(log, admission{now, count})
		}
		if len(log) == 0 {
			t.Fatalf("seed %d: nothing admitted", seed)
		}
		checkBounds(t, d, origin, log, false)
	}
}
