package limiter_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestHoldsGiveBackNoMoreThanStillCounts: closing a hold gives back at most what it took and what
// of that still counts against each limit, so a hold never lets through more than a key that
// never saw it. Each case runs the same traffic on two keys, one with a hold that is released
// (or expires) and one without, and then checks that the held key holds no more than the other:
// a window that rolled over owes nothing for the hold; a bucket gives back only what its refill
// could not have replaced; an allow override or a shadow limit's would-be refusal took nothing;
// a parent added since was never charged; a sliding window takes the count off the sub-interval
// it was taken in.
func TestHoldsGiveBackNoMoreThanStillCounts(t *testing.T) {
	const start = 1_700_000_040_000 // a whole minute: windows of a minute from the epoch start here
	// A step runs once, on both keys.
	type step func(t *testing.T, e *limiter.Engine, c *fakeClock, keys []string)
	take := func(name string, n float64) step {
		return func(t *testing.T, e *limiter.Engine, _ *fakeClock, keys []string) {
			for _, k := range keys {
				mustLimit(t, e, limiter.Request{Name: name, Key: k, Count: n})
			}
		}
	}
	advance := func(ms int64) step {
		return func(_ *testing.T, _ *limiter.Engine, c *fakeClock, _ []string) { c.Advance(ms) }
	}
	reset := func(name string) step {
		return func(t *testing.T, e *limiter.Engine, _ *fakeClock, keys []string) {
			for _, k := range keys {
				if err := e.Reset(context.Background(), tenant, name, &k, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	put := func(name string, def limiter.Definition) step {
		return func(t *testing.T, e *limiter.Engine, _ *fakeClock, _ []string) { mustPut(t, e, name, def) }
	}
	// overrides puts o on each key for an hour; unoverride deletes them.
	overrides := func(name string, o limiter.Override) step {
		return func(t *testing.T, e *limiter.Engine, c *fakeClock, keys []string) {
			exp := c.Now().UnixMilli() + 3_600_000
			for _, k := range keys {
				o.Match, o.ExpiresAt = k, &exp
				if _, _, err := e.PutOverride(context.Background(), tenant, name, o, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	unoverride := func(name string) step {
		return func(t *testing.T, e *limiter.Engine, _ *fakeClock, keys []string) {
			for _, k := range keys {
				if err := e.DeleteOverride(context.Background(), tenant, name, k, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	cases := []struct {
		name  string
		defs  map[string]limiter.Definition
		held  string  // the limit held, with its parents
		count float64 // held
		// before runs on both keys before the hold, between after it; check names the limits
		// compared (each with the key, or "org" with the key "o").
		before, between []step
		check           []string
		expire          bool // the hold expires after a minute and the sweeper closes it, rather than a release
		want            map[string]float64
	}{
		{
			name:    "a fixed window that rolled over",
			defs:    map[string]limiter.Definition{"fw": {Kind: limiter.FixedWindow, Rate: 10, Period: 60_000, Start: ptr(int64(0))}},
			held:    "fw",
			count:   10,
			between: []step{advance(60_000), take("fw", 10)},
			check:   []string{"fw"},
			want:    map[string]float64{"fw": 0},
		},
		{
			name:    "a fixed window that rolled over, the hold expiring",
			defs:    map[string]limiter.Definition{"fw": {Kind: limiter.FixedWindow, Rate: 10, Period: 60_000, Start: ptr(int64(0))}},
			held:    "fw",
			count:   10,
			between: []step{advance(60_000), take("fw", 10)},
			check:   []string{"fw"},
			expire:  true,
			want:    map[string]float64{"fw": 0},
		},
		{
			name:    "a fixed window in the same window",
			defs:    map[string]limiter.Definition{"fw": {Kind: limiter.FixedWindow, Rate: 10, Period: 60_000, Start: ptr(int64(0))}},
			held:    "fw",
			count:   4,
			between: []step{advance(30_000), take("fw", 6)},
			check:   []string{"fw"},
			want:    map[string]float64{"fw": 4},
		},
		{
			name:    "a bucket that refilled while held",
			defs:    map[string]limiter.Definition{"tb": {Kind: limiter.TokenBucket, Rate: 10, Period: 10_000}},
			held:    "tb",
			count:   10,
			between: []step{advance(10_000), take("tb", 10)},
			check:   []string{"tb"},
			want:    map[string]float64{"tb": 0},
		},
		{
			name:    "a bucket that refilled part of it",
			defs:    map[string]limiter.Definition{"tb": {Kind: limiter.TokenBucket, Rate: 10, Period: 10_000}},
			held:    "tb",
			count:   10,
			between: []step{advance(4_000)},
			check:   []string{"tb"},
			want:    map[string]float64{"tb": 10}, // 4 refilled + 6 given back
		},
		{
			// Drained right after the hold: the bucket never came near full, so all of it.
			name:    "a bucket drained by other traffic",
			defs:    map[string]limiter.Definition{"tb": {Kind: limiter.TokenBucket, Rate: 10, Period: 10_000, Capacity: ptr(100.0)}},
			held:    "tb",
			count:   10,
			between: []step{take("tb", 90), advance(10_000)},
			check:   []string{"tb"},
			want:    map[string]float64{"tb": 20},
		},
		{
			// Two shards of 50 (refilling 50 a second each): the hold takes from the fuller one
			// alone, which is full again 200 ms later; only that shard is owed anything.
			name:    "a sharded bucket",
			defs:    map[string]limiter.Definition{"tbs": {Kind: limiter.TokenBucket, Rate: 100, Period: 1000, Shards: 2}},
			held:    "tbs",
			count:   10,
			before:  []step{take("tbs", 50)},
			between: []step{advance(400)},
			check:   []string{"tbs"},
			want:    map[string]float64{"tbs": 70},
		},
		{
			// 100 refilling 10 a window: a window later the key without the hold would have 100
			// (capped), with it 60: 40 come back.
			name:    "a fixed window with a capacity above its rate",
			defs:    map[string]limiter.Definition{"fwc": {Kind: limiter.FixedWindow, Rate: 10, Period: 60_000, Capacity: ptr(100.0), Start: ptr(int64(0))}},
			held:    "fwc",
			count:   50,
			between: []step{advance(60_000)},
			check:   []string{"fwc"},
			want:    map[string]float64{"fwc": 100},
		},
		{
			name: "a capacity lowered while held",
			defs: map[string]limiter.Definition{"low": {Kind: limiter.TokenBucket, Rate: 1, Period: 3_600_000, Capacity: ptr(100.0)}},
			held: "low", count: 10,
			between: []step{func(t *testing.T, e *limiter.Engine, _ *fakeClock, _ []string) {
				mustPut(t, e, "low", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 3_600_000, Capacity: ptr(50.0)})
			}, take("low", 40)},
			check: []string{"low"},
			want:  map[string]float64{"low": 10},
		},
		// Other numbers at the close (a definition changed them), or a reset key: the key's history
		// no longer says what the hold's amount became, so nothing comes back.
		{
			name:    "a rate raised after the key refilled",
			defs:    map[string]limiter.Definition{"up": {Kind: limiter.TokenBucket, Rate: 10, Period: 10_000}},
			held:    "up",
			count:   5,
			between: []step{advance(5_000), take("up", 1), put("up", limiter.Definition{Kind: limiter.TokenBucket, Rate: 20, Period: 10_000})},
			check:   []string{"up"},
			want:    map[string]float64{"up": 9},
		},
		// Numbers changed and changed back: the numbers at the close are the hold's, but the key's
		// history under the others says nothing of what the hold's amount became.
		{
			// Lowered to 50, both keys hold 50; 40 taken, both 10; raised back to 100. The bound
			// from the hold's numbers (90 just after, no refill since) would give 10 back.
			name: "a capacity lowered and raised back while held",
			defs: map[string]limiter.Definition{"aba": {Kind: limiter.TokenBucket, Rate: 1, Period: 3_600_000, Capacity: ptr(100.0)}},
			held: "aba", count: 10,
			between: []step{
				put("aba", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 3_600_000, Capacity: ptr(50.0)}),
				take("aba", 40),
				put("aba", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 3_600_000, Capacity: ptr(100.0)}),
			},
			check: []string{"aba"},
			want:  map[string]float64{"aba": 10},
		},
		{
			// An override refills the key a token a second for 10 s: both keys are full, and 1 is
			// taken from each. Once it is deleted the numbers are the hold's again, and the bound
			// from them (90 just after, 10 s of a token an hour) would give 9.997 back.
			name: "a rate raised by an override that is gone at the close",
			defs: map[string]limiter.Definition{"ovr": {Kind: limiter.TokenBucket, Rate: 1, Period: 3_600_000, Capacity: ptr(100.0)}},
			held: "ovr", count: 10,
			between: []step{
				overrides("ovr", limiter.Override{Rate: ptr(3600.0), Capacity: ptr(100.0)}),
				advance(10_000), take("ovr", 1),
				unoverride("ovr"),
			},
			check: []string{"ovr"},
			want:  map[string]float64{"ovr": 99},
		},
		// What changes no numbers changes nothing.
		{
			name:    "the same definition put again",
			defs:    map[string]limiter.Definition{"same": {Kind: limiter.TokenBucket, Rate: 10, Period: 10_000, Capacity: ptr(1000.0)}},
			held:    "same",
			count:   100,
			before:  []step{take("same", 500)},
			between: []step{put("same", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 10_000, Capacity: ptr(1000.0), Jitter: 5}), advance(5_000)},
			check:   []string{"same"},
			want:    map[string]float64{"same": 505},
		},
		{
			name: "an allow override put and deleted while held",
			defs: map[string]limiter.Definition{"alw": {Kind: limiter.FixedWindow, Rate: 10, Period: 365 * 86_400_000, Start: ptr(int64(0))}},
			held: "alw", count: 10,
			between: []step{overrides("alw", limiter.Override{Action: limiter.ActionAllow}), take("alw", 3), unoverride("alw")},
			check:   []string{"alw"},
			want:    map[string]float64{"alw": 10},
		},
		{
			name:    "a bucket reset, then used again",
			defs:    map[string]limiter.Definition{"rb": {Kind: limiter.TokenBucket, Rate: 1, Period: 3_600_000, Capacity: ptr(10.0)}},
			held:    "rb",
			count:   5,
			between: []step{reset("rb"), take("rb", 8)},
			check:   []string{"rb"},
			want:    map[string]float64{"rb": 2},
		},
		{
			name:    "a quota reset, then used again",
			defs:    map[string]limiter.Definition{"rq": {Kind: limiter.Quota, Rate: 10, Calendar: "month", TimeZone: "UTC"}},
			held:    "rq",
			count:   5,
			between: []step{reset("rq"), take("rq", 8)},
			check:   []string{"rq"},
			want:    map[string]float64{"rq": 2},
		},
		{
			name:    "a sliding window reset, then used again",
			defs:    map[string]limiter.Definition{"rs": {Kind: limiter.SlidingWindow, Rate: 10, Period: 3_600_000}},
			held:    "rs",
			count:   5,
			between: []step{reset("rs"), take("rs", 8)},
			check:   []string{"rs"},
			want:    map[string]float64{"rs": 2},
		},
		{
			name:    "a bucket far from full gets all of it back",
			defs:    map[string]limiter.Definition{"tb": {Kind: limiter.TokenBucket, Rate: 10, Period: 10_000, Capacity: ptr(1000.0)}},
			held:    "tb",
			count:   100,
			before:  []step{take("tb", 500)},
			between: []step{advance(5_000)},
			check:   []string{"tb"},
			want:    map[string]float64{"tb": 505},
		},
		{
			name: "a hold an allow override admitted took nothing",
			defs: map[string]limiter.Definition{"fw": {Kind: limiter.FixedWindow, Rate: 10, Period: 365 * 86_400_000, Start: ptr(int64(0))}},
			held: "fw", count: 10,
			before: []step{take("fw", 10), func(t *testing.T, e *limiter.Engine, c *fakeClock, keys []string) {
				exp := c.Now().UnixMilli() + 60_000
				for _, k := range keys {
					if _, _, err := e.PutOverride(context.Background(), tenant, "fw", limiter.Override{Match: k, Action: limiter.ActionAllow, ExpiresAt: &exp}, nil); err != nil {
						t.Fatal(err)
					}
				}
			}},
			between: []step{advance(120_000)},
			check:   []string{"fw"},
			want:    map[string]float64{"fw": 0},
		},
		{
			name:   "a shadow limit's would-be refusal wrote nothing",
			defs:   map[string]limiter.Definition{"sh": {Kind: limiter.FixedWindow, Rate: 10, Period: 365 * 86_400_000, Start: ptr(int64(0)), Mode: limiter.Shadow}},
			held:   "sh",
			count:  10,
			before: []step{take("sh", 10)},
			check:  []string{"sh"},
			want:   map[string]float64{"sh": 0},
		},
		{
			name: "a parent added while held was never charged",
			defs: map[string]limiter.Definition{
				"org": {Kind: limiter.FixedWindow, Rate: 10, Period: 365 * 86_400_000, Start: ptr(int64(0))},
				"api": {Kind: limiter.FixedWindow, Rate: 100, Period: 365 * 86_400_000, Start: ptr(int64(0))},
			},
			held: "api", count: 10,
			between: []step{func(t *testing.T, e *limiter.Engine, _ *fakeClock, _ []string) {
				mustLimit(t, e, limiter.Request{Name: "org", Key: "o", Count: 10})
				mustPut(t, e, "api", limiter.Definition{Kind: limiter.FixedWindow, Rate: 100, Period: 365 * 86_400_000, Start: ptr(int64(0)),
					Parents: []limiter.Parent{{Name: "org", Key: "o"}}})
			}},
			check: []string{"org"},
			want:  map[string]float64{"org": 0},
		},
		{
			// Ten sub-intervals of 6 s; the hold's sits at the window's weighted end when it is
			// released, so newest first would give it back at full weight.
			name: "a sliding window takes it off the sub-interval it was taken in",
			defs: map[string]limiter.Definition{"sw": {Kind: limiter.SlidingWindow, Rate: 10, Period: 60_000, Resolution: 10}},
			held: "sw", count: 5,
			between: []step{advance(60_000 + 3_000), take("sw", 5)},
			check:   []string{"sw"},
			want:    map[string]float64{"sw": 5},
		},
	}
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				c := newClock(start)
				e := newEngine(t, d, c.opts())
				for name, def := range tc.defs {
					mustPut(t, e, name, def)
				}
				// Keys of the case's own (the cases share the database and the limits' names).
				key, twin := fmt.Sprintf("held-%d", i), fmt.Sprintf("twin-%d", i)
				keys := []string{key, twin}
				for _, s := range tc.before {
					s(t, e, c, keys)
				}
				ttl := int64(3_600_000)
				if tc.expire {
					ttl = 60_000
				}
				h := mustHold(t, e, ttl, limiter.HoldLimit{Name: tc.held, Key: key, Count: tc.count})
				if !h.Decision.OK {
					t.Fatalf("hold refused: %+v", h.Decision)
				}
				twinHold := mustHold(t, e, ttl, limiter.HoldLimit{Name: tc.held, Key: twin, Count: 0})
				for _, s := range tc.between {
					s(t, e, c, keys)
				}
				if tc.expire {
					if n, _, err := e.SweepHolds(ctx, 10); err != nil || n != 2 {
						t.Fatalf("the sweeper released %d holds (%v), want 2", n, err)
					}
				} else {
					if err := e.ReleaseHold(ctx, tenant, h.ID); err != nil {
						t.Fatal(err)
					}
					if err := e.ReleaseHold(ctx, tenant, twinHold.ID); err != nil {
						t.Fatal(err)
					}
				}
				for _, name := range tc.check {
					k, other := key, twin
					if name == "org" {
						k, other = "o", "o"
					}
					got, without := value(t, e, name, k), value(t, e, name, other)
					if got != tc.want[name] || got > without {
						t.Errorf("%s after the give-back: %v, want %v (the key without the hold: %v)", name, got, tc.want[name], without)
					}
				}
			})
		}
	})
}

// TestASettleGivesBackBeforeItTakesTheExtra: a settle's give-backs come before the extras it
// takes, whatever the hold's order, so one limit's give-back makes room for another's extra on
// the same key: a hold of 5 and 5 on a window of 10, settled 10 and 0, charges 10 with no overage.
func TestASettleGivesBackBeforeItTakesTheExtra(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, newClock(1_700_000_000_000).opts())
		mustPut(t, e, "fw", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 365 * 86_400_000, Start: ptr(int64(0))})
		h := mustHold(t, e, 60_000, limiter.HoldLimit{Name: "fw", Key: "k", Count: 5}, limiter.HoldLimit{Name: "fw", Key: "k", Count: 5})
		s, err := e.SettleHold(context.Background(), tenant, h.ID, []float64{10, 0})
		if err != nil {
			t.Fatal(err)
		}
		if s.Overage[0] != 0 || s.Charged[0] != 10 || s.Refunded[1] != 5 || value(t, e, "fw", "k") != 0 {
			t.Fatalf("settle: %+v, value %v; want 10 charged, no overage, 0 left", s, value(t, e, "fw", "k"))
		}
	})
}

// TestAHoldGivesNothingBackPastAnOverridesExpiry: overrides that expire one after the other can
// change a key's numbers and back with no write. An exact override with the definition's numbers
// hides a prefix override refilling a token a second; the exact one expires, the key refills fast,
// the prefix one expires: at the close the numbers are the hold's again, but the hold's amount
// may no longer count, and nothing comes back.
func TestAHoldGivesNothingBackPastAnOverridesExpiry(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		c := newClock(1_700_000_040_000)
		e := newEngine(t, d, c.opts())
		mustPut(t, e, "ovx", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 3_600_000, Capacity: ptr(100.0)})
		now := c.Now().UnixMilli()
		keys := []string{"held", "twin"}
		for _, k := range keys {
			x1, x2 := now+5_000, now+20_000
			if _, _, err := e.PutOverride(ctx, tenant, "ovx", limiter.Override{Match: k, Rate: ptr(1.0), Capacity: ptr(100.0), ExpiresAt: &x1}, nil); err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.PutOverride(ctx, tenant, "ovx", limiter.Override{Match: k + "*", Rate: ptr(3600.0), Capacity: ptr(100.0), ExpiresAt: &x2}, nil); err != nil {
				t.Fatal(err)
			}
		}
		h := mustHold(t, e, 3_600_000, limiter.HoldLimit{Name: "ovx", Key: "held", Count: 10})
		c.Advance(10_000)
		for _, k := range keys {
			if d := mustLimit(t, e, limiter.Request{Name: "ovx", Key: k, Count: 50}); !d.OK {
				t.Fatalf("%s: 50 refused: %+v", k, d)
			}
		}
		c.Advance(20_000)
		if err := e.ReleaseHold(ctx, tenant, h.ID); err != nil {
			t.Fatal(err)
		}
		if got, twin := value(t, e, "ovx", "held"), value(t, e, "ovx", "twin"); got > twin {
			t.Fatalf("after the release: held %v, more than the twin's %v", got, twin)
		}
	})
}

// TestAHoldSeesWhatOlderHoldsGaveBackSince: another hold's give-back after this hold was made
// raised the key, which may then have refilled to its maximum: this hold's amount no longer
// counts. Both keys hold 60 first; the held key also holds 40 (0 left); the 60s are released
// (held 60, twin 100), both refill to 100 and spend it: releasing the 40 gives nothing back.
// Holds made before their snapshots were kept (migration 00020), or before their charges were
// (00018), and open across the upgrade, still let no key through more than its twin: one
// without a snapshot does not know what older holds gave back since and gives a refilling limit
// nothing; one without charges logs what it gives back, so that holds taken before it count it.
func TestAHoldSeesWhatOlderHoldsGaveBackSince(t *testing.T) {
	for _, tc := range []struct {
		name          string
		legacyIsOlder bool   // the 60s (true) or the 40 (false) are from before
		strip         string // what a hold from before lacks ("": every hold is new)
	}{
		{"every hold is new", false, ""},
		{"the newer hold has no snapshot", false, "DELETE FROM hold_snapshots WHERE hold_id = ?"},
		{"the older holds have no charges", true, "UPDATE hold_limits SET charges = '' WHERE hold_id = ?"},
		{"the older holds have no snapshot", true, "DELETE FROM hold_snapshots WHERE hold_id = ?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.Each(t, func(t *testing.T, d *db.DB) {
				ctx := context.Background()
				c := newClock(1_700_000_040_000)
				e := newEngine(t, d, c.opts())
				mustPut(t, e, "two", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 1000, Capacity: ptr(100.0)})
				var first []string
				for _, k := range []string{"held", "twin"} {
					first = append(first, mustHold(t, e, 3_600_000, limiter.HoldLimit{Name: "two", Key: k, Count: 60}).ID)
				}
				h := mustHold(t, e, 3_600_000, limiter.HoldLimit{Name: "two", Key: "held", Count: 40})
				legacy := []string{h.ID}
				if tc.legacyIsOlder {
					legacy = first
				}
				for _, id := range legacy {
					if tc.strip == "" {
						break
					}
					if err := d.Gorm.Exec(tc.strip, id).Error; err != nil {
						t.Fatal(err)
					}
				}
				for _, id := range first {
					if err := e.ReleaseHold(ctx, tenant, id); err != nil {
						t.Fatal(err)
					}
				}
				c.Advance(40_000)
				for _, k := range []string{"held", "twin"} { // the same traffic: admitted or not
					mustLimit(t, e, limiter.Request{Name: "two", Key: k, Count: 100})
				}
				if err := e.ReleaseHold(ctx, tenant, h.ID); err != nil {
					t.Fatal(err)
				}
				got, twin := value(t, e, "two", "held"), value(t, e, "two", "twin")
				if got > twin || (tc.strip == "" && (got != 0 || twin != 0)) {
					t.Fatalf("after the release: held %v, twin %v; want no more than the twin (0 and 0 when every hold is new)", got, twin)
				}
			})
		})
	}
}

// TestTheSweeperPrunesTheLogAndNumberingWithTheirKeys: give-backs and numberings older than two
// days go, a key's log with its numbering even where the log is younger (a hold taken at once and
// released a day later), and the sweeper says when a batch was full.
func TestTheSweeperPrunesTheLogAndNumberingWithTheirKeys(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		c := newClock(1_700_000_040_000)
		e := newEngine(t, d, c.opts())
		// A token a year: the late release still gives back.
		mustPut(t, e, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 365 * 86_400_000, Capacity: ptr(100.0)})
		var late string
		for i := range 5 {
			h := mustHold(t, e, limiter.MaxHoldTTL, limiter.HoldLimit{Name: "tb", Key: fmt.Sprint("k", i), Count: 10})
			if i == 0 {
				late = h.ID
				continue
			}
			if err := e.ReleaseHold(ctx, tenant, h.ID); err != nil {
				t.Fatal(err)
			}
		}
		c.Advance(limiter.MaxHoldTTL - 1)
		if err := e.ReleaseHold(ctx, tenant, late); err != nil {
			t.Fatal(err)
		}
		if n := countRows(t, d, "hold_give_backs"); n != 5 || countRows(t, d, "hold_key_seqs") != 5 {
			t.Fatalf("%d give-backs and %d numberings logged, want 5 and 5", n, countRows(t, d, "hold_key_seqs"))
		}
		sweep := func() (more bool) {
			t.Helper()
			_, more, err := e.SweepHolds(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			return more
		}
		c.Advance(limiter.ClosedHoldRetention + 1)
		for sweep() { // the closed holds go
		}
		c.Advance(2) // just past two days after the takes; the late release's log is a day younger
		if !sweep() {
			t.Fatal("the first sweep of batches of 2 over 5 numberings said nothing more was due")
		}
		for sweep() {
		}
		if countRows(t, d, "hold_give_backs") != 0 || countRows(t, d, "hold_key_seqs") != 0 {
			t.Fatalf("left: %d give-backs, %d numberings", countRows(t, d, "hold_give_backs"), countRows(t, d, "hold_key_seqs"))
		}
	})
}
