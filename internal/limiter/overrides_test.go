package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
	"github.com/sluice-dev/sluice/internal/testkit"
)

func mustOverride(t *testing.T, e *limiter.Engine, name string, o limiter.Override) {
	t.Helper()
	if _, _, err := e.PutOverride(context.Background(), tenant, name, o, nil); err != nil {
		t.Fatalf("put override %q: %v", o.Match, err)
	}
}

func TestOverridesExactBeatsLongestPrefixAndNameTheOverride(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "api", limiter.Definition{Kind: limiter.FixedWindow, Rate: 2, Period: 3_600_000})
		mustOverride(t, e, "api", limiter.Override{Match: "org:*", Capacity: ptr(3.0)})
		mustOverride(t, e, "api", limiter.Override{Match: "org:acme:*", Capacity: ptr(5.0)})
		mustOverride(t, e, "api", limiter.Override{Match: "org:acme:42", Capacity: ptr(7.0)})
		for _, c := range []struct {
			key, override string
			admits        int
		}{
			{"org:acme:42", "org:acme:42", 7},
			{"org:acme:1", "org:acme:*", 5},
			{"org:beta", "org:*", 3},
			{"user:1", "", 2},
		} {
			admitted := 0
			for range 10 {
				got := mustLimit(t, e, limiter.Request{Name: "api", Key: c.key, Count: 1})
				if got.Override != c.override {
					t.Fatalf("%s: override %q, want %q", c.key, got.Override, c.override)
				}
				if got.OK {
					admitted++
				}
			}
			if admitted != c.admits {
				t.Errorf("%s admitted %d, want %d", c.key, admitted, c.admits)
			}
		}
	})
}

func TestOverrideExpiresByTheDecisionClock(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 3_600_000})
		exp := clock.Now().UnixMilli() + 1_000
		mustOverride(t, e, "api", limiter.Override{Match: "k", Action: limiter.ActionDeny, ExpiresAt: &exp})
		got := mustLimit(t, e, limiter.Request{Name: "api", Key: "k", Count: 1})
		if got.OK || got.Override != "k" || got.RetryAfter == nil || *got.RetryAfter != 1_000 {
			t.Fatalf("deny until expiry: %+v", got)
		}
		clock.Advance(999)
		if got = mustLimit(t, e, limiter.Request{Name: "api", Key: "k", Count: 1}); got.OK || *got.RetryAfter != 1 {
			t.Fatalf("1 ms before expiry: %+v", got)
		}
		clock.Advance(1)
		if got = mustLimit(t, e, limiter.Request{Name: "api", Key: "k", Count: 1}); !got.OK || got.Override != "" {
			t.Fatalf("at expiry the override no longer applies: %+v", got)
		}
		if _, _, err := e.PutOverride(context.Background(), tenant, "api", limiter.Override{Match: "k", Action: limiter.ActionDeny, ExpiresAt: &exp}, nil); apperr.From(err).Field != "expiresAt" {
			t.Fatalf("an expiry in the past: %v", err)
		}
	})
}

func TestAllowAdmitsWithoutCountingAndDenyRefusesForever(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, limiter.Options{Now: clock.Now, IntN: func(n int) int { return n - 1 }})
		ctx := context.Background()
		mustPut(t, e, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 2, Period: 3_600_000, Jitter: 500})
		mustPut(t, e, "other", limiter.Definition{Kind: limiter.TokenBucket, Rate: 5, Period: 3_600_000})
		mustLimit(t, e, limiter.Request{Name: "api", Key: "vip", Count: 1})
		mustOverride(t, e, "api", limiter.Override{Match: "vip", Action: limiter.ActionAllow})
		mustOverride(t, e, "api", limiter.Override{Match: "bad:*", Action: limiter.ActionDeny})
		for range 5 {
			// A count above the capacity is no error for an allow override: nothing is counted.
			got := mustLimit(t, e, limiter.Request{Name: "api", Key: "vip", Count: 3})
			if !got.OK || got.Override != "vip" || got.RetryAfter != nil || got.Remaining != 1 {
				t.Fatalf("allow: %+v", got)
			}
		}
		if v := value(t, e, "api", "vip"); v != 1 {
			t.Fatalf("allow counted: value %v, want 1", v)
		}
		got := mustLimit(t, e, limiter.Request{Name: "api", Key: "bad:1", Count: 1})
		if got.OK || got.Override != "bad:*" || got.RetryAfter == nil || *got.RetryAfter != algo.MaxRetryAfter {
			t.Fatalf("deny for ever (never jittered past the maximum): %+v", got)
		}
		b, err := e.Batch(ctx, tenant, []limiter.Request{{Name: "other", Key: "bad:1", Count: 1}, {Name: "api", Key: "bad:1", Count: 1}}, true)
		if err != nil || b.OK || !b.Results[0].OK || b.Results[1].Override != "bad:*" {
			t.Fatalf("a batch with a denied limit: %+v %v", b, err)
		}
		if v := value(t, e, "other", "bad:1"); v != 5 {
			t.Fatalf("a batch refused by a deny override wrote the other limit: %v", v)
		}
		// A refund under either override gives nothing back (nothing was counted) and answers
		// what the key holds, as GET …/value does: 1 for vip, 2 for a denied key never decided.
		for key, holds := range map[string]float64{"vip": 1, "bad:1": 2} {
			r, err := e.Refund(ctx, tenant, limiter.Request{Name: "api", Key: key, Count: 1})
			if err != nil || r.Refunded != 0 || r.Remaining != holds || value(t, e, "api", key) != holds {
				t.Errorf("refund of %s under its override: %+v, %v; want nothing given back and remaining %v", key, r, err, holds)
			}
		}
	})
}

// TestOverrideChangesApplyAtOnceOnEveryInstance: two engines on one database; a change made
// through one decides the very next decision of the other (the version read with the definition).
func TestOverrideChangesApplyAtOnceOnEveryInstance(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		a, b := newEngine(t, d, clock.opts()), newEngine(t, d, clock.opts())
		ctx := context.Background()
		mustPut(t, a, "api", limiter.Definition{Kind: limiter.FixedWindow, Rate: 100, Period: 3_600_000})
		for step, o := range []limiter.Override{
			{Match: "u:*", Action: limiter.ActionDeny},
			{Match: "u:*", Action: limiter.ActionAllow},
			{Match: "u:*", Capacity: ptr(1.0)},
		} {
			mustOverride(t, a, "api", o)
			got := mustLimit(t, b, limiter.Request{Name: "api", Key: "u:1", Count: 1})
			switch {
			case o.Action == limiter.ActionDeny && got.OK,
				o.Action == limiter.ActionAllow && !got.OK,
				o.Action == "" && got.Remaining != 0:
				t.Fatalf("step %d: the other instance decided %+v under %+v", step, got, o)
			}
		}
		if err := a.DeleteOverride(ctx, tenant, "api", "u:*", nil); err != nil {
			t.Fatal(err)
		}
		if got := mustLimit(t, b, limiter.Request{Name: "api", Key: "u:2", Count: 1}); got.Override != "" || got.Remaining != 99 {
			t.Fatalf("after the delete: %+v", got)
		}
		if err := a.DeleteOverride(ctx, tenant, "api", "u:*", nil); !errors.Is(err, limiter.ErrOverrideNotFound) {
			t.Fatalf("second delete: %v", err)
		}
	})
}

func TestOverridesAreCappedPerLimitAndStayFastAtTheCap(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		ctx := context.Background()
		mustPut(t, e, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000})
		// 9,999 overrides written directly, then the 10,000th through the engine.
		insertOverrides(t, d, "api", limiter.MaxOverrides-1)
		mustOverride(t, e, "api", limiter.Override{Match: "last", Capacity: ptr(4.0)})
		_, _, err := e.PutOverride(ctx, tenant, "api", limiter.Override{Match: "one-more", Capacity: ptr(4.0)}, nil)
		if e := apperr.From(err); e.Code != apperr.InvalidRequest || e.Field != "match" || !strings.Contains(e.Message, "10000") {
			t.Fatalf("the 10,001st override: %v", err)
		}
		// Replacing one at the cap is fine.
		mustOverride(t, e, "api", limiter.Override{Match: "last", Capacity: ptr(5.0)})
		for key, want := range map[string]string{"org:4999:x": "org:4999:*", "user:4998": "user:4998", "last": "last", "nobody": ""} {
			if got := mustLimit(t, e, limiter.Request{Name: "api", Key: key, Count: 1}); got.Override != want {
				t.Fatalf("%s: override %q, want %q", key, got.Override, want)
			}
		}
		page, next, err := e.ListOverrides(ctx, tenant, "api", "", 1000)
		if err != nil || len(page) != 1000 || next != page[999].Override.Match {
			t.Fatalf("first page: %d, next %q, %v", len(page), next, err)
		}
		total := len(page)
		for next != "" {
			if page, next, err = e.ListOverrides(ctx, tenant, "api", next, 1000); err != nil {
				t.Fatal(err)
			}
			total += len(page)
		}
		if total != limiter.MaxOverrides {
			t.Fatalf("paged through %d overrides, want %d", total, limiter.MaxOverrides)
		}
	})
}

func TestOverrideErrorsAndTheirDefinition(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, newClock(1_700_000_000_000).opts())
		ctx := context.Background()
		if _, _, err := e.PutOverride(ctx, tenant, "nope", limiter.Override{Match: "k", Action: limiter.ActionAllow}, nil); !errors.Is(err, limiter.ErrLimitNotFound) {
			t.Fatalf("override of a missing limit: %v", err)
		}
		if _, _, err := e.ListOverrides(ctx, tenant, "nope", "", 10); !errors.Is(err, limiter.ErrLimitNotFound) {
			t.Fatalf("list of a missing limit: %v", err)
		}
		if err := e.DeleteOverride(ctx, tenant, "nope", "k", nil); !errors.Is(err, limiter.ErrLimitNotFound) {
			t.Fatalf("delete of a missing limit: %v", err)
		}
		mustPut(t, e, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 1000})
		_, _, err := e.PutOverride(ctx, tenant, "tb", limiter.Override{Match: "a*b", Rate: ptr(1.0)}, nil)
		if ae := apperr.From(err); ae.Code != apperr.InvalidRequest || ae.Field != "match" {
			t.Fatalf("bad match: %v", err)
		}
		_, _, err = e.PutOverride(ctx, tenant, "tb", limiter.Override{Match: "k", Rate: ptr(-1.0)}, nil)
		if ae := apperr.From(err); ae.Code != apperr.InvalidConfig || ae.Field != "rate" {
			t.Fatalf("bad rate: %v", err)
		}
		// Another tenant sees nothing of it.
		mustOverride(t, e, "tb", limiter.Override{Match: "k", Capacity: ptr(20.0)})
		if _, _, err := e.ListOverrides(ctx, tenant+1, "tb", "", 10); !errors.Is(err, limiter.ErrLimitNotFound) {
			t.Fatalf("another tenant: %v", err)
		}
		// A replacement the override would make invalid is refused, naming the override.
		_, _, err = e.PutDefinition(ctx, tenant, "tb", limiter.Definition{Kind: limiter.SlidingWindow, Rate: 10, Period: 1000}, nil)
		if ae := apperr.From(err); ae.Code != apperr.InvalidConfig || ae.Field != "capacity" || !strings.Contains(ae.Message, `"k"`) {
			t.Fatalf("replacement that breaks an override: %v", err)
		}
		// Replacing keeps the overrides; deleting the limit deletes them.
		mustPut(t, e, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 5, Period: 1000})
		if got := mustLimit(t, e, limiter.Request{Name: "tb", Key: "k", Count: 1}); got.Override != "k" || got.Remaining != 19 {
			t.Fatalf("after replacing the definition: %+v", got)
		}
		if err := e.DeleteDefinition(ctx, tenant, "tb", nil); err != nil {
			t.Fatal(err)
		}
		mustPut(t, e, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 5, Period: 1000})
		if got := mustLimit(t, e, limiter.Request{Name: "tb", Key: "k", Count: 1}); got.Override != "" {
			t.Fatalf("an override outlived its limit: %+v", got)
		}
		if list, _, _ := e.ListOverrides(ctx, tenant, "tb", "", 10); len(list) != 0 {
			t.Fatalf("overrides of a recreated limit: %+v", list)
		}
	})
}

// TestDeletingAnOverrideNoMatchCanNameIsNotFound: a match PutOverride would refuse (NUL bytes,
// invalid UTF-8, overlong, a star inside) names no override: ErrOverrideNotFound, never the
// database's error (PostgreSQL refuses NUL and invalid UTF-8 in a query), and the limit's
// overrides stay. A missing limit is still ErrLimitNotFound first. The dashboard's delete form
// passed such a match through as a 500 on PostgreSQL.
func TestDeletingAnOverrideNoMatchCanNameIsNotFound(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, newClock(1_700_000_000_000).opts())
		ctx := context.Background()
		mustPut(t, e, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 1000})
		mustOverride(t, e, "tb", limiter.Override{Match: "k", Capacity: ptr(20.0)})
		for _, m := range []string{"k\x00", "\x00", "\xff\xfe", "k\xff", strings.Repeat("k", 10_000), "a*b", ""} {
			if err := e.DeleteOverride(ctx, tenant, "tb", m, nil); !errors.Is(err, limiter.ErrOverrideNotFound) {
				t.Errorf("DeleteOverride(%q): %v, want ErrOverrideNotFound", m, err)
			}
			if err := e.DeleteOverride(ctx, tenant, "nope", m, nil); !errors.Is(err, limiter.ErrLimitNotFound) {
				t.Errorf("DeleteOverride of a missing limit, match %q: %v, want ErrLimitNotFound", m, err)
			}
		}
		if list, _, err := e.ListOverrides(ctx, tenant, "tb", "", 10); err != nil || len(list) != 1 {
			t.Fatalf("overrides after the refused deletes: %+v %v", list, err)
		}
		if err := e.DeleteOverride(ctx, tenant, "tb", "k", nil); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSweepKeepsStateAnOverrideStillNeeds: a row full under the definition (capacity 2) but
// short under the key's override (capacity 10) must stay, or the key would read full at 10.
func TestSweepKeepsStateAnOverrideStillNeeds(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		ctx := context.Background()
		mustPut(t, e, "s", limiter.Definition{Kind: limiter.TokenBucket, Rate: 2, Period: 3_600_000})
		mustOverride(t, e, "s", limiter.Override{Match: "big:*", Capacity: ptr(10.0)})
		for range 8 {
			mustLimit(t, e, limiter.Request{Name: "s", Key: "big:1", Count: 1})
		}
		mustLimit(t, e, limiter.Request{Name: "s", Key: "small", Count: 1})
		clock.Advance(int64(2 * time.Hour / time.Millisecond)) // refills 4: "small" is full, "big:1" holds 6 of 10
		if _, err := e.Sweep(ctx, 0); err != nil {
			t.Fatal(err)
		}
		rows := testkit.Rows(t, d, "limit_state")
		if len(rows) != 1 || !strings.Contains(fmt.Sprint(rows[0]), "big:1") {
			t.Fatalf("state after the sweep: %v", rows)
		}
		admitted := 0
		for range 10 {
			if mustLimit(t, e, limiter.Request{Name: "s", Key: "big:1", Count: 1}).OK {
				admitted++
			}
		}
		if admitted != 6 {
			t.Fatalf("admitted %d after the sweep, want the 6 left", admitted)
		}
	})
}
