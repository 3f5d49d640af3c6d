package limiter_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// hooks counts what the engine reports for the metrics and usage charts.
type hooks struct {
	mu                        sync.Mutex
	allowed, refused, shadows map[string]int
}

func newHooks() *hooks {
	return &hooks{allowed: map[string]int{}, refused: map[string]int{}, shadows: map[string]int{}}
}

func (h *hooks) options(o limiter.Options) limiter.Options {
	o.OnDecision = func(_ int64, name string, ok bool) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if ok {
			h.allowed[name]++
		} else {
			h.refused[name]++
		}
	}
	o.OnShadowRefused = func(_ int64, name string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.shadows[name]++
	}
	return o
}

func (h *hooks) counts(name string) (allowed, refused, shadow int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.allowed[name], h.refused[name], h.shadows[name]
}

func batch(t *testing.T, e *limiter.Engine, reqs ...limiter.Request) limiter.BatchDecision {
	t.Helper()
	b, err := e.Batch(context.Background(), tenant, reqs, true)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestShadowInAFamilyIsReportedByEachLimitsOwnMode: each limit of a nested budget is reported
// once per consumed decision by its own mode. A shadow child's would-be refusal still counts its
// enforced parent's admission, and a shadow parent's would-be refusal is shadow-refused, not
// allowed.
func TestShadowInAFamilyIsReportedByEachLimitsOwnMode(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		h := newHooks()
		e := newEngine(t, d, h.options(clock.opts()))
		start := int64(0)
		hourly := func(rate float64, mode limiter.Mode, parents ...limiter.Parent) limiter.Definition {
			return limiter.Definition{Kind: limiter.FixedWindow, Rate: rate, Period: 3_600_000, Start: &start, Mode: mode, Parents: parents}
		}
		mustPut(t, e, "org", hourly(10, ""))
		mustPut(t, e, "shadowChild", hourly(1, limiter.Shadow, limiter.Parent{Name: "org", Key: "org:{org}"}))
		mustPut(t, e, "shadowOrg", hourly(1, limiter.Shadow))
		mustPut(t, e, "child", hourly(10, "", limiter.Parent{Name: "shadowOrg", Key: "org:{org}"}))
		for _, name := range []string{"shadowChild", "child"} {
			for i := range 2 {
				if b := batch(t, e, limiter.Request{Name: name, Key: "k", Count: 1, Attributes: map[string]string{"org": "acme"}}); !b.OK {
					t.Fatalf("%s, decision %d: refused %+v; shadow limits never refuse", name, i+1, b)
				}
			}
		}
		for _, c := range []struct {
			name                     string
			allowed, refused, shadow int
		}{
			{"shadowChild", 1, 0, 1}, // the second would have been refused
			{"org", 2, 0, 0},         // enforced: both admissions spent it
			{"child", 2, 0, 0},
			{"shadowOrg", 1, 0, 1},
		} {
			if a, r, s := h.counts(c.name); a != c.allowed || r != c.refused || s != c.shadow {
				t.Errorf("%s: allowed %d, refused %d, shadow-refused %d; want %d, %d, %d", c.name, a, r, s, c.allowed, c.refused, c.shadow)
			}
		}
	})
}

// TestShadowLimitInBatchReportsButNeverRefuses: a batch of an enforced limit (5 per hour) and a
// shadow one (2 per hour). The shadow limit's would-be refusals are reported and counted but
// refuse nothing; the enforced limit still refuses at its bound, and then nothing is written.
func TestShadowLimitInBatchReportsButNeverRefuses(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		h := newHooks()
		e := newEngine(t, d, h.options(clock.opts()))
		start := int64(0)
		mustPut(t, e, "enf", limiter.Definition{Kind: limiter.FixedWindow, Rate: 5, Period: 3_600_000, Start: &start})
		mustPut(t, e, "sh", limiter.Definition{Kind: limiter.FixedWindow, Rate: 2, Period: 3_600_000, Start: &start, Mode: limiter.Shadow})
		reqs := []limiter.Request{{Name: "enf", Key: "k", Count: 1}, {Name: "sh", Key: "k", Count: 1}}
		for i := range 5 {
			b := batch(t, e, reqs...)
			enf, sh := b.Results[0], b.Results[1]
			if !b.OK || !enf.OK || enf.Shadow != nil || !sh.OK || sh.RetryAfter != nil || sh.Shadow == nil {
				t.Fatalf("batch %d: %+v", i, b)
			}
			wouldAdmit := i < 2
			if sh.Shadow.OK != wouldAdmit || (sh.Shadow.RetryAfter == nil) == !wouldAdmit {
				t.Fatalf("batch %d: shadow outcome %+v, want ok=%v with a retryAfter when refused", i, sh.Shadow, wouldAdmit)
			}
			if b.RetryAfter != nil {
				t.Fatalf("batch %d: a shadow would-be refusal gave the batch a retryAfter", i)
			}
		}
		// The shadow limit wrote only what enforcement would have: its 2 admissions.
		if v := value(t, e, "sh", "k"); v != 0 {
			t.Fatalf("shadow value %v, want 0", v)
		}
		if v := value(t, e, "enf", "k"); v != 0 {
			t.Fatalf("enforced value %v, want 0", v)
		}
		// The enforced limit refuses the sixth: the batch is refused, nothing is written, and
		// the shadow limit's result still says what it would have done.
		b := batch(t, e, reqs...)
		if b.OK || b.Results[0].OK || !b.Results[1].OK || b.Results[1].Shadow == nil || b.Results[1].Shadow.OK || b.RetryAfter == nil {
			t.Fatalf("sixth batch: %+v", b)
		}
		if *b.RetryAfter != *b.Results[0].RetryAfter {
			t.Fatalf("the batch's retryAfter %d is not the enforced refusal's %d", *b.RetryAfter, *b.Results[0].RetryAfter)
		}
		// Counted: each shadow would-be refusal once, in admitted batches only; the batch the
		// enforced limit refused is that limit's refusal, not the shadow limit's (which refuses
		// nothing).
		if a, r, s := h.counts("sh"); a != 2 || s != 3 || r != 0 {
			t.Fatalf("shadow limit counted allowed=%d refused=%d shadow_refused=%d, want 2, 0, 3", a, r, s)
		}
		if a, r, s := h.counts("enf"); a != 5 || r != 1 || s != 0 {
			t.Fatalf("enforced limit counted allowed=%d refused=%d shadow_refused=%d, want 5, 1, 0", a, r, s)
		}
		// Check reports the same and counts nothing.
		c, err := e.Check(context.Background(), tenant, limiter.Request{Name: "sh", Key: "k", Count: 1})
		if err != nil || !c.OK || c.Shadow == nil || c.Shadow.OK {
			t.Fatalf("check on the shadow limit: %+v %v", c, err)
		}
		if _, _, s := h.counts("sh"); s != 3 {
			t.Fatalf("a check was counted as a shadow refusal")
		}
	})
}

// TestShadowDecidesAndWritesExactlyAsEnforcement drives the same random requests through two
// limits with one definition, one enforced and one in shadow mode: at every step the shadow's
// would-be outcome is the enforced outcome and both keys hold the same value, so switching a
// shadow limit to enforce brings no surprise. Then the switch keeps the state.
func TestShadowDecidesAndWritesExactlyAsEnforcement(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		r := rand.New(rand.NewPCG(2, 14))
		defs := []limiter.Definition{
			{Kind: limiter.TokenBucket, Rate: 5, Period: 10_000, Capacity: ptr(8.0), MaxReserved: ptr(3.0), Penalty: 1500},
			{Kind: limiter.GCRA, Rate: 3, Period: 4000},
			{Kind: limiter.FixedWindow, Rate: 6, Period: 7000, Start: ptr(int64(1234))}, // both names' windows aligned
			{Kind: limiter.SlidingWindow, Rate: 6, Period: 9000, Resolution: 3},
		}
		for i, def := range defs {
			enf, sh := "enf"+string(rune('a'+i)), "sh"+string(rune('a'+i))
			mustPut(t, e, enf, def)
			def.Mode = limiter.Shadow
			mustPut(t, e, sh, def)
			for step := range 150 {
				clock.Advance(int64(r.IntN(900)))
				count := float64(1 + r.IntN(3))
				reserve := def.MaxReserved != nil && r.IntN(4) == 0
				a := mustLimit(t, e, limiter.Request{Name: enf, Key: "k", Count: count, Reserve: reserve})
				b := mustLimit(t, e, limiter.Request{Name: sh, Key: "k", Count: count, Reserve: reserve})
				if !b.OK || b.RetryAfter != nil || b.Shadow == nil || b.Shadow.OK != a.OK || !sameMillis(b.Shadow.RetryAfter, a.RetryAfter) || b.Remaining != a.Remaining {
					t.Fatalf("%s step %d: enforced %+v, shadow %+v (%+v)", def.Kind, step, a, b, b.Shadow)
				}
				va, vb := valueOf(t, e, enf, "k"), valueOf(t, e, sh, "k")
				if va.Value != vb.Value || va.TS != vb.TS || va.PenaltyUntil != vb.PenaltyUntil {
					t.Fatalf("%s step %d: enforced state %+v, shadow state %+v", def.Kind, step, va, vb)
				}
			}
			before := valueOf(t, e, sh, "k")
			def.Mode = limiter.Enforce
			mustPut(t, e, sh, def)
			after := valueOf(t, e, sh, "k")
			if before.Value != after.Value || before.TS != after.TS || before.PenaltyUntil != after.PenaltyUntil {
				t.Fatalf("%s: switching to enforce changed the state: %+v -> %+v", def.Kind, before, after)
			}
			a := mustLimit(t, e, limiter.Request{Name: enf, Key: "k", Count: def.Max()})
			b := mustLimit(t, e, limiter.Request{Name: sh, Key: "k", Count: def.Max()})
			if a.OK != b.OK || b.Shadow != nil || !sameMillis(a.RetryAfter, b.RetryAfter) {
				t.Fatalf("%s: after the switch: enforced %+v, switched %+v", def.Kind, a, b)
			}
		}
	})
}

func sameMillis(a, b *int64) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

func valueOf(t *testing.T, e *limiter.Engine, name, key string) limiter.Value {
	t.Helper()
	v, err := e.GetValue(context.Background(), tenant, name, key)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestPenaltyKeepsTheKeyRefusedForExactlyThePenalty: 10 per second with a burst of 2 and a
// penalty of 5 s. The refusal that starts the penalty writes its end and nothing else; by the
// injected clock the key is refused until exactly 5 s later (refusals meanwhile do not renew it),
// even though the bucket is full long before; then it admits. Other keys are not affected.
func TestPenaltyKeepsTheKeyRefusedForExactlyThePenalty(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		t0 := int64(1_700_000_000_000)
		clock := newClock(t0)
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "p", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 1000, Capacity: ptr(2.0), Penalty: 5000})
		mustLimit(t, e, limiter.Request{Name: "p", Key: "abuser", Count: 2})
		// check reports a refusal but never writes, so it starts no penalty
		if c, err := e.Check(context.Background(), tenant, limiter.Request{Name: "p", Key: "abuser", Count: 1}); err != nil || c.OK || *c.RetryAfter != 5000 {
			t.Fatalf("check: %+v %v", c, err)
		}
		if v := valueOf(t, e, "p", "abuser"); v.PenaltyUntil != 0 {
			t.Fatalf("a check started a penalty: %d", v.PenaltyUntil)
		}
		got := mustLimit(t, e, limiter.Request{Name: "p", Key: "abuser", Count: 1})
		if got.OK || got.RetryAfter == nil || *got.RetryAfter != 5000 {
			t.Fatalf("the refusal: %+v, want retryAfter 5000 (the penalty)", got)
		}
		v := valueOf(t, e, "p", "abuser")
		if v.Value != 0 || v.PenaltyUntil != t0+5000 {
			t.Fatalf("after the refusal: value %v penaltyUntil %d, want 0 and t0+5000", v.Value, v.PenaltyUntil-t0)
		}
		for _, at := range []int64{1, 300, 2500, 4999} {
			clock.Set(t0 + at)
			got := mustLimit(t, e, limiter.Request{Name: "p", Key: "abuser", Count: 1})
			if got.OK || got.RetryAfter == nil || *got.RetryAfter != 5000-at {
				t.Fatalf("at +%d ms: %+v, want refused with retryAfter %d", at, got, 5000-at)
			}
			if c, err := e.Check(context.Background(), tenant, limiter.Request{Name: "p", Key: "abuser", Count: 1}); err != nil || c.OK {
				t.Fatalf("check at +%d ms: %+v %v", at, c, err)
			}
		}
		if v := valueOf(t, e, "p", "abuser"); v.Value != 2 || v.PenaltyUntil != t0+5000 {
			t.Fatalf("during the penalty the bucket refills (%v) and the penalty is not renewed (%d)", v.Value, v.PenaltyUntil-t0)
		}
		if got := mustLimit(t, e, limiter.Request{Name: "p", Key: "bystander", Count: 2}); !got.OK {
			t.Fatalf("another key was penalized: %+v", got)
		}
		// The sweeper must not delete a row whose penalty is running: it reads full otherwise.
		if _, err := e.Sweep(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		if c, err := e.Check(context.Background(), tenant, limiter.Request{Name: "p", Key: "abuser", Count: 1}); err != nil || c.OK {
			t.Fatalf("after a sweep during the penalty: %+v %v, want refused", c, err)
		}
		clock.Set(t0 + 5000)
		if got := mustLimit(t, e, limiter.Request{Name: "p", Key: "abuser", Count: 2}); !got.OK {
			t.Fatalf("exactly penalty ms after the refusal: %+v, want admitted", got)
		}
		if v := valueOf(t, e, "p", "abuser"); v.PenaltyUntil != 0 {
			t.Fatalf("penalty still reported after its end: %d", v.PenaltyUntil)
		}
	})
}

// TestPenaltyInBatchWritesOnlyThePenalty: in a batch refused by a penalized limit, the other
// limit's consumption is not written (all or nothing), the refusing limit's tokens are untouched,
// and only its penalty end is stored. A shadow limit with a penalty stores it too (enforcement
// would), and its would-be refusals last as long.
func TestPenaltyInBatchWritesOnlyThePenalty(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		t0 := int64(1_700_000_000_000)
		clock := newClock(t0)
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "other", limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 1000})
		mustPut(t, e, "pen", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 60_000, Penalty: 120_000})
		mustPut(t, e, "shpen", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 60_000, Penalty: 120_000, Mode: limiter.Shadow})
		mustLimit(t, e, limiter.Request{Name: "pen", Key: "k", Count: 1})
		mustLimit(t, e, limiter.Request{Name: "shpen", Key: "k", Count: 1})
		b := batch(t, e, limiter.Request{Name: "other", Key: "k", Count: 10}, limiter.Request{Name: "pen", Key: "k", Count: 1})
		if b.OK || *b.RetryAfter != 120_000 {
			t.Fatalf("batch: %+v", b)
		}
		if v := valueOf(t, e, "other", "k"); v.Value != 100 {
			t.Fatalf("the refused batch consumed the other limit: %v", v.Value)
		}
		if v := valueOf(t, e, "pen", "k"); v.Value != 0 || v.TS != t0 || v.PenaltyUntil != t0+120_000 {
			t.Fatalf("the refusing limit: value %v penaltyUntil t0%+d, want 0 (untouched) and t0+120000", v.Value, v.PenaltyUntil-t0)
		}
		// Shadow with penalty: admitted, penalty stored, would-be refusals until it ends.
		b = batch(t, e, limiter.Request{Name: "other", Key: "k", Count: 10}, limiter.Request{Name: "shpen", Key: "k", Count: 1})
		if !b.OK || b.Results[1].Shadow == nil || b.Results[1].Shadow.OK || *b.Results[1].Shadow.RetryAfter != 120_000 {
			t.Fatalf("shadow batch: %+v", b)
		}
		if v := valueOf(t, e, "other", "k"); v.Value != 90 {
			t.Fatalf("the admitted batch did not consume the other limit: %v", v.Value)
		}
		clock.Set(t0 + 119_999)
		got := mustLimit(t, e, limiter.Request{Name: "shpen", Key: "k", Count: 1})
		if !got.OK || got.Shadow.OK || *got.Shadow.RetryAfter != 1 {
			t.Fatalf("shadow during its penalty: %+v %+v", got, got.Shadow)
		}
		clock.Set(t0 + 120_000)
		if got := mustLimit(t, e, limiter.Request{Name: "shpen", Key: "k", Count: 1}); !got.Shadow.OK {
			t.Fatalf("shadow after its penalty: %+v", got.Shadow)
		}
	})
}

// TestValueFullAtFollowsTheFormula checks /value's fullAt per kind against the formula: token
// bucket and gcra ts + missing * period / rate, fixed window the next window(s), sliding window
// the sub-interval resolution + 1 after the newest consumption; 0 (null) when full.
func TestValueFullAtFollowsTheFormula(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		t0 := int64(1_700_000_040_000) // a whole minute
		clock := newClock(t0)
		e := newEngine(t, d, clock.opts())
		start := int64(0)
		mustPut(t, e, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000})
		mustPut(t, e, "g", limiter.Definition{Kind: limiter.GCRA, Rate: 10, Period: 60_000, Capacity: ptr(4.0)})
		mustPut(t, e, "fw", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 60_000, Start: &start, Capacity: ptr(25.0)})
		mustPut(t, e, "sw", limiter.Definition{Kind: limiter.SlidingWindow, Rate: 10, Period: 60_000, Resolution: 4})
		mustPut(t, e, "sharded", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000, Shards: 2})
		if v := valueOf(t, e, "tb", "k"); v.FullAt != 0 {
			t.Fatalf("a full key has fullAt %d", v.FullAt)
		}
		mustLimit(t, e, limiter.Request{Name: "tb", Key: "k", Count: 4})
		mustLimit(t, e, limiter.Request{Name: "g", Key: "k", Count: 4})
		mustLimit(t, e, limiter.Request{Name: "fw", Key: "k", Count: 24})
		clock.Advance(20_000)
		mustLimit(t, e, limiter.Request{Name: "sw", Key: "k", Count: 2})
		mustLimit(t, e, limiter.Request{Name: "sharded", Key: "k", Count: 3})
		clock.Advance(1000)
		for _, tc := range []struct {
			name string
			want int64
		}{
			{"tb", t0 + 4*6000},      // 4 missing, 6 s each
			{"g", t0 + 4*6000},       // emission interval 6 s, the whole burst of 4 used
			{"fw", t0 + 3*60_000},    // 24 missing at 10 per window: 3 windows after t0's
			{"sw", t0 + 15_000*6},    // consumed in sub-interval [15 s, 30 s): gone at 90 s
			{"sharded", t0 + 56_000}, // 3 of one shard's 5 at 5 per minute: 12 s each from +20 s
		} {
			if v := valueOf(t, e, tc.name, "k"); v.FullAt != tc.want {
				t.Errorf("%s: fullAt t0%+d, want t0%+d", tc.name, v.FullAt-t0, tc.want-t0)
			}
		}
	})
}

// TestInlineConfigPenaltyOutlivesTheInlineStateTTL: an inline-config limit's state is swept
// InlineStateTTL after its ts, but a penalty started later runs to its end: the sweeper keeps
// the row while the penalty runs.
func TestInlineConfigPenaltyOutlivesTheInlineStateTTL(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		t0 := int64(1_700_000_000_000)
		clock := newClock(t0)
		e := newEngine(t, d, clock.opts())
		const hour = int64(3_600_000)
		inline := &limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 30 * hour, Penalty: 24 * hour}
		req := limiter.Request{Name: "adhoc", Key: "k", Count: 1, Config: inline}
		if got := mustLimit(t, e, req); !got.OK {
			t.Fatalf("first: %+v", got)
		}
		clock.Set(t0 + 23*hour)
		if got := mustLimit(t, e, req); got.OK || *got.RetryAfter != 24*hour {
			t.Fatalf("refusal at +23 h: %+v (want the penalty, 24 h)", got)
		}
		// ts is 30 h old, past InlineStateTTL, and the bucket is full; the penalty runs until +47 h.
		clock.Set(t0 + 30*hour)
		if n, err := e.Sweep(context.Background(), 0); err != nil || n != 0 {
			t.Fatalf("sweep during the penalty deleted %d rows (%v)", n, err)
		}
		if got := mustLimit(t, e, req); got.OK || *got.RetryAfter != 17*hour {
			t.Fatalf("at +30 h: %+v, want refused for the penalty's 17 h left", got)
		}
		clock.Set(t0 + 47*hour + limiter.SweepClockGrace.Milliseconds())
		if n, err := e.Sweep(context.Background(), 0); err != nil || n != 1 {
			t.Fatalf("sweep after the penalty deleted %d rows (%v), want 1", n, err)
		}
	})
}

// TestShadowRetryAfterIsJitteredAsEnforcementWould: a would-be refusal's retryAfter is the one
// enforcement would give, jitter included; a shadow reservation's is not jittered.
func TestShadowRetryAfterIsJitteredAsEnforcementWould(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, limiter.Options{Now: clock.Now, IntN: func(n int) int { return n - 1 }})
		mustPut(t, e, "j", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000, MaxReserved: ptr(3.0), Jitter: 500, Mode: limiter.Shadow})
		mustLimit(t, e, limiter.Request{Name: "j", Key: "k", Count: 10})
		got := mustLimit(t, e, limiter.Request{Name: "j", Key: "k", Count: 2, Reserve: true})
		if !got.OK || got.RetryAfter != nil || !got.Shadow.OK || *got.Shadow.RetryAfter != 12_000 {
			t.Fatalf("shadow reservation: %+v %+v", got, got.Shadow)
		}
		got = mustLimit(t, e, limiter.Request{Name: "j", Key: "k", Count: 2, Reserve: true})
		if !got.OK || got.RetryAfter != nil || got.Shadow.OK || *got.Shadow.RetryAfter != 6_000+499 {
			t.Fatalf("shadow would-be refusal: %+v %+v, want retryAfter 6000 + jitter 499", got, got.Shadow)
		}
	})
}

// TestShadowAndPenaltiesInNestedBudgets: shadow mode and penalties act on ancestors as on the
// limit itself. A shadow parent never refuses the family but reports its would-be refusals and
// is spent exactly as if enforced; an enforced parent under a shadow child refuses the family;
// a parent's penalty keeps refusing the family after its refusal.
func TestShadowAndPenaltiesInNestedBudgets(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		window := func(rate float64) limiter.Definition {
			return limiter.Definition{Kind: limiter.FixedWindow, Rate: rate, Period: 3_600_000, Start: ptr(int64(0))}
		}
		org := window(2)
		org.Mode = limiter.Shadow
		mustPut(t, e, "org", org)
		user := window(10)
		user.Parents = []limiter.Parent{{Name: "org", Key: "org:{org}"}}
		mustPut(t, e, "user", user)
		acme := map[string]string{"org": "acme"}
		for i := range 4 {
			got := mustLimit(t, e, limiter.Request{Name: "user", Key: "u", Count: 1, Attributes: acme})
			if !got.OK || len(got.Parents) != 1 || got.Parents[0].Shadow == nil {
				t.Fatalf("decision %d under a shadow parent: %+v", i+1, got)
			}
			if wouldRefuse := i >= 2; got.Parents[0].Shadow.OK == wouldRefuse || !got.Parents[0].OK {
				t.Fatalf("decision %d: the shadow parent reports %+v, want would-be ok %v and ok", i+1, got.Parents[0].Shadow, !wouldRefuse)
			}
		}
		if v := value(t, e, "org", "org:acme"); v != 0 {
			t.Fatalf("the shadow parent's value is %v: it is spent as if enforced (2 admitted, refusals write nothing)", v)
		}

		strict := window(1)
		strict.Penalty = 2 * 3_600_000 // longer than a window
		mustPut(t, e, "team", strict)
		member := window(10)
		member.Mode = limiter.Shadow
		member.Parents = []limiter.Parent{{Name: "team", Key: "team:{org}"}}
		mustPut(t, e, "member", member)
		if got := mustLimit(t, e, limiter.Request{Name: "member", Key: "m", Count: 1, Attributes: acme}); !got.OK {
			t.Fatalf("first decision under the enforced parent: %+v", got)
		}
		refused := mustLimit(t, e, limiter.Request{Name: "member", Key: "m", Count: 1, Attributes: acme})
		if refused.OK || refused.RetryAfter == nil {
			t.Fatalf("an enforced parent's refusal must refuse the family, even under a shadow child: %+v", refused)
		}
		clock.Advance(3_600_000) // a new window: the parent's tokens are back, its penalty is not over
		if got := mustLimit(t, e, limiter.Request{Name: "member", Key: "m", Count: 1, Attributes: acme}); got.OK {
			t.Fatalf("the parent's penalty did not hold across the window: %+v", got)
		}
	})
}

// TestOverridesApplyToAncestorsAndShadowLimits: an override on a parent's key changes that
// parent's numbers in a child's decision (and is named there); a deny override on a shadow limit
// is reported as its would-be refusal and admits.
func TestOverridesApplyToAncestorsAndShadowLimits(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		window := func(rate float64) limiter.Definition {
			return limiter.Definition{Kind: limiter.FixedWindow, Rate: rate, Period: 3_600_000, Start: ptr(int64(0))}
		}
		mustPut(t, e, "org", window(1))
		user := window(10)
		user.Parents = []limiter.Parent{{Name: "org", Key: "org:{org}"}}
		mustPut(t, e, "user", user)
		if _, _, err := e.PutOverride(ctx, tenant, "org", limiter.Override{Match: "org:big*", Rate: ptr(3.0)}, nil); err != nil {
			t.Fatal(err)
		}
		admitted := 0
		for range 5 {
			got := mustLimit(t, e, limiter.Request{Name: "user", Key: "u", Count: 1, Attributes: map[string]string{"org": "bigco"}})
			if got.OK {
				admitted++
			}
			if len(got.Parents) != 1 || got.Parents[0].Override != "org:big*" {
				t.Fatalf("the parent's decision does not name its override: %+v", got.Parents)
			}
		}
		if admitted != 3 {
			t.Fatalf("%d admitted under an org overridden to 3 per window, want 3", admitted)
		}
		if got := mustLimit(t, e, limiter.Request{Name: "user", Key: "v", Count: 1, Attributes: map[string]string{"org": "small"}}); !got.OK || got.Parents[0].Override != "" {
			t.Fatalf("an org without an override: %+v", got)
		}

		watched := window(10)
		watched.Mode = limiter.Shadow
		mustPut(t, e, "watched", watched)
		if _, _, err := e.PutOverride(ctx, tenant, "watched", limiter.Override{Match: "blocked", Action: limiter.ActionDeny}, nil); err != nil {
			t.Fatal(err)
		}
		got := mustLimit(t, e, limiter.Request{Name: "watched", Key: "blocked", Count: 1})
		if !got.OK || got.Shadow == nil || got.Shadow.OK || got.Shadow.RetryAfter == nil || got.Override != "blocked" {
			t.Fatalf("a deny override on a shadow limit: %+v (shadow %+v)", got, got.Shadow)
		}
	})
}

// TestARefusalByThePlanAloneIsNotTheLimits: a batch the tenant's plan refuses while its limits
// would admit is reported as the plan's refusal only; the tenant's limits refused nothing (their
// counts feed analytics' refusals and limit.refusals events). A refusal of the limit itself, with
// the plan admitting, is the limit's.
func TestARefusalByThePlanAloneIsNotTheLimits(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		h := newHooks()
		e := newEngine(t, d, h.options(newClock(1_700_000_000_000).opts()))
		mustPut(t, e, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1000, Period: 1000})
		mustPut(t, e, "tiny", limiter.Definition{Kind: limiter.FixedWindow, Rate: 1, Period: 3_600_000})
		plan := limiter.PlanRequest(tenant, 2, 1) // a burst of 2
		for range 3 {
			if _, err := e.Batch(context.Background(), tenant, []limiter.Request{{Name: "api", Key: "alice", Count: 1}, *plan}, true); err != nil {
				t.Fatal(err)
			}
		}
		if allowed, refused, _ := h.counts("api"); allowed != 2 || refused != 0 {
			t.Fatalf("api: %d allowed, %d refused; want 2 and 0 (the plan refused the third)", allowed, refused)
		}
		if _, refused, _ := h.counts(limiter.PlanLimitName); refused != 1 {
			t.Fatalf("the plan: %d refused, want 1", refused)
		}
		e2 := newEngine(t, d, h.options(newClock(1_700_000_000_000).opts()))
		for range 2 {
			if _, err := e2.Batch(context.Background(), tenant, []limiter.Request{{Name: "tiny", Key: "bob", Count: 1}, *limiter.PlanRequest(tenant+1, 100, 1)}, true); err != nil {
				t.Fatal(err)
			}
		}
		if allowed, refused, _ := h.counts("tiny"); allowed != 1 || refused != 1 {
			t.Fatalf("tiny: %d allowed, %d refused; want 1 and 1", allowed, refused)
		}
		// The same for a sibling in a batch and for a member of a family: the limit that refused
		// is reported, the one that would have admitted its part is not.
		if b := batch(t, e2, limiter.Request{Name: "api", Key: "alice", Count: 1}, limiter.Request{Name: "tiny", Key: "bob", Count: 1}); b.OK {
			t.Fatalf("a batch with the spent tiny: %+v, want refused", b)
		}
		if allowed, refused, _ := h.counts("api"); allowed != 2 || refused != 0 {
			t.Fatalf("api beside tiny's refusal: %d allowed, %d refused; want 2 and 0", allowed, refused)
		}
		if _, refused, _ := h.counts("tiny"); refused != 2 {
			t.Fatalf("tiny: %d refused, want 2", refused)
		}
		mustPut(t, e2, "org", limiter.Definition{Kind: limiter.FixedWindow, Rate: 1, Period: 3_600_000})
		mustPut(t, e2, "member", limiter.Definition{Kind: limiter.FixedWindow, Rate: 5, Period: 3_600_000, Parents: []limiter.Parent{{Name: "org", Key: "acme"}}})
		mustLimit(t, e2, limiter.Request{Name: "org", Key: "acme", Count: 1})
		if got := mustLimit(t, e2, limiter.Request{Name: "member", Key: "m", Count: 1}); got.OK || got.Parents[0].OK {
			t.Fatalf("a member of a spent org: %+v, want refused by the org", got)
		}
		if _, refused, _ := h.counts("member"); refused != 0 {
			t.Fatalf("member, refused by its parent only: %d refused, want 0", refused)
		}
		if allowed, refused, _ := h.counts("org"); allowed != 1 || refused != 1 {
			t.Fatalf("org: %d allowed, %d refused; want 1 and 1", allowed, refused)
		}
	})
}
