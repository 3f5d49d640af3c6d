package limiter_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestLeasesBoundWhatIsInFlight: a concurrency limit admits rate leases at once, refuses the next
// with retryAfter the earliest expiry, frees a slot on release and at expiry (the engine's clock,
// no sweep needed), renews on extend, and sits all or nothing in a batch with a rate limit.
func TestLeasesBoundWhatIsInFlight(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		const t0 = 1_700_000_000_000
		clock := newClock(t0)
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "jobs", limiter.Definition{Kind: limiter.Concurrency, Rate: 2, LeaseTTL: 1000})
		a := mustLimit(t, e, limiter.Request{Name: "jobs", Key: "k", Count: 1})
		clock.Advance(100)
		b := mustLimit(t, e, limiter.Request{Name: "jobs", Key: "k", Count: 1})
		if !a.OK || !b.OK || a.LeaseID == "" || a.LeaseID == b.LeaseID || a.LeaseExpiresAt != t0+1000 || b.LeaseExpiresAt != t0+1100 {
			t.Fatalf("two leases: %+v %+v", a, b)
		}
		c := mustLimit(t, e, limiter.Request{Name: "jobs", Key: "k", Count: 1})
		if c.OK || c.LeaseID != "" || c.RetryAfter == nil || *c.RetryAfter != 900 {
			t.Fatalf("third lease: %+v", c)
		}
		if v := value(t, e, "jobs", "k"); v != 0 {
			t.Fatalf("free slots: %v", v)
		}
		if err := e.ReleaseLease(ctx, tenant, a.LeaseID); err != nil {
			t.Fatal(err)
		}
		if err := e.ReleaseLease(ctx, tenant, a.LeaseID); !errors.Is(err, limiter.ErrLeaseNotFound) {
			t.Fatalf("releasing twice: %v", err)
		}
		c = mustLimit(t, e, limiter.Request{Name: "jobs", Key: "k", Count: 1})
		if !c.OK {
			t.Fatalf("after a release: %+v", c)
		}
		clock.Advance(500) // t0+600
		exp, err := e.ExtendLease(ctx, tenant, b.LeaseID)
		if err != nil || exp != t0+1600 {
			t.Fatalf("extend: %d %v", exp, err)
		}
		if _, err := e.ExtendLease(ctx, tenant+1, b.LeaseID); !errors.Is(err, limiter.ErrLeaseNotFound) {
			t.Fatalf("another tenant's lease: %v", err)
		}
		clock.Advance(500) // t0+1100: c (t0+1100) expired, b extended to t0+1600
		if _, err := e.ExtendLease(ctx, tenant, c.LeaseID); !errors.Is(err, limiter.ErrLeaseClosed) {
			t.Fatalf("extending an expired lease: %v", err)
		}
		if d := mustLimit(t, e, limiter.Request{Name: "jobs", Key: "k", Count: 1}); !d.OK {
			t.Fatalf("an expired lease frees its slot without a sweep: %+v", d)
		}
		if d := mustLimit(t, e, limiter.Request{Name: "jobs", Key: "k", Count: 1}); d.OK || *d.RetryAfter != 500 {
			t.Fatalf("the extended lease still holds its slot: %+v", d)
		}
		n, err := e.SweepLeases(ctx, 0)
		if err != nil || n != 1 {
			t.Fatalf("sweep: %d %v", n, err)
		}

		// All or nothing with a rate limit in one batch.
		mustPut(t, e, "rpm", limiter.Definition{Kind: limiter.FixedWindow, Rate: 1, Period: 86_400_000 * 365, Start: ptr(int64(0))})
		batch := func(key string) limiter.BatchDecision {
			t.Helper()
			out, err := e.Batch(ctx, tenant, []limiter.Request{{Name: "jobs", Key: key, Count: 1}, {Name: "rpm", Key: key, Count: 1}}, true)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		if b := batch("z"); !b.OK || b.Results[0].LeaseID == "" {
			t.Fatalf("batch: %+v", b)
		}
		if b := batch("z"); b.OK || b.Results[0].LeaseID != "" || value(t, e, "jobs", "z") != 1 {
			t.Fatalf("a batch the rate limit refuses takes no slot: %+v, free %v", b, value(t, e, "jobs", "z"))
		}
	})
}

// TestAnAllowedKeyOnAConcurrencyLimitReportsTheSlotsAsTheyStand: an allow override admits
// without a lease, so its remaining is the free slots as they stand and its RateLimit t is when
// the leases in flight end, not what a lease it never took would leave.
func TestAnAllowedKeyOnAConcurrencyLimitReportsTheSlotsAsTheyStand(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "conc", limiter.Definition{Kind: limiter.Concurrency, Rate: 3, LeaseTTL: 60_000})
		mustOverride(t, e, "conc", limiter.Override{Match: "vip", Action: limiter.ActionAllow})
		if got := mustLimit(t, e, limiter.Request{Name: "conc", Key: "vip", Count: 1}); !got.OK || got.LeaseID != "" || got.Remaining != 3 {
			t.Fatalf("allowed with nothing in flight: ok %v lease %q remaining %v, want true, none, 3", got.OK, got.LeaseID, got.Remaining)
		}
		if _, l := limiter.RateLimitHeaders([]limiter.Decision{mustLimit(t, e, limiter.Request{Name: "conc", Key: "vip", Count: 1})}); l != `"conc";r=3;t=0` {
			t.Errorf("RateLimit with nothing in flight: %q, want r=3;t=0", l)
		}
		mustOverride(t, e, "conc", limiter.Override{Match: "vip", Rate: ptr(3.0)}) // leases count again
		for range 2 {
			if !mustLimit(t, e, limiter.Request{Name: "conc", Key: "vip", Count: 1}).OK {
				t.Fatal("a lease was refused with slots free")
			}
		}
		clock.Advance(10_000)
		mustOverride(t, e, "conc", limiter.Override{Match: "vip", Action: limiter.ActionAllow})
		got := mustLimit(t, e, limiter.Request{Name: "conc", Key: "vip", Count: 1})
		if v := value(t, e, "conc", "vip"); !got.OK || got.Remaining != 1 || v != 1 {
			t.Errorf("allowed with two in flight: ok %v remaining %v (value %v), want true and 1", got.OK, got.Remaining, v)
		}
		if _, l := limiter.RateLimitHeaders([]limiter.Decision{got}); l != `"conc";r=1;t=50` {
			t.Errorf("RateLimit with two in flight: %q, want r=1;t=50 (when both end)", l)
		}
		mustOverride(t, e, "conc", limiter.Override{Match: "vip", Rate: ptr(3.0)})
		if !mustLimit(t, e, limiter.Request{Name: "conc", Key: "vip", Count: 1}).OK { // the third, at t0+10 s
			t.Fatal("a lease was refused with a slot free")
		}
		mustOverride(t, e, "conc", limiter.Override{Match: "vip", Action: limiter.ActionAllow})
		got = mustLimit(t, e, limiter.Request{Name: "conc", Key: "vip", Count: 1})
		if _, l := limiter.RateLimitHeaders([]limiter.Decision{got}); !got.OK || l != `"conc";r=0;t=60` {
			t.Errorf("allowed with every slot in flight: ok %v, RateLimit %q, want admitted and r=0;t=60 (when all three end)", got.OK, l)
		}
	})
}

// TestConcurrencyMisuseIsRefused: what a concurrency limit does not support is a 400 naming the field.
func TestConcurrencyMisuseIsRefused(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		e := newEngine(t, d, newClock(1_700_000_000_000).opts())
		mustPut(t, e, "jobs", limiter.Definition{Kind: limiter.Concurrency, Rate: 2, LeaseTTL: 1000})
		for _, c := range []struct {
			def   limiter.Definition
			field string
		}{
			{limiter.Definition{Kind: limiter.Concurrency, Rate: 2}, "leaseTtl"},
			{limiter.Definition{Kind: limiter.Concurrency, Rate: 2, LeaseTTL: 86_400_001}, "leaseTtl"},
			{limiter.Definition{Kind: limiter.Concurrency, Rate: 2.5, LeaseTTL: 1000}, "rate"},
			{limiter.Definition{Kind: limiter.Concurrency, Rate: 2, LeaseTTL: 1000, Period: 1000}, "period"},
			{limiter.Definition{Kind: limiter.Concurrency, Rate: 2, LeaseTTL: 1000, Shards: 2}, "shards"},
			{limiter.Definition{Kind: limiter.Concurrency, Rate: 2, LeaseTTL: 1000, Mode: limiter.Shadow}, "mode"},
			{limiter.Definition{Kind: limiter.TokenBucket, Rate: 2, Period: 1000, LeaseTTL: 1000}, "leaseTtl"},
		} {
			_, _, err := e.PutDefinition(ctx, tenant, "bad", c.def, nil)
			var ve *limiter.ValidationError
			if !errors.As(err, &ve) || ve.Fields[0].Field != c.field {
				t.Errorf("%+v: %v", c.def, err)
			}
		}
		if _, err := e.Refund(ctx, tenant, limiter.Request{Name: "jobs", Count: 1}); apperr.From(err).Code != apperr.InvalidConfig {
			t.Errorf("refund: %v", err)
		}
		if _, err := e.Limit(ctx, tenant, limiter.Request{Name: "jobs", Count: 2}); apperr.From(err).Field != "count" {
			t.Errorf("count 2: %v", err)
		}
		if _, err := e.Limit(ctx, tenant, limiter.Request{Name: "jobs", Count: 1, Reserve: true}); apperr.From(err).Field != "reserve" {
			t.Errorf("reserve: %v", err)
		}
		inline := limiter.Definition{Kind: limiter.Concurrency, Rate: 2, LeaseTTL: 1000}
		if _, err := e.Limit(ctx, tenant, limiter.Request{Name: "inline", Count: 1, Config: &inline}); apperr.From(err).Code != apperr.InvalidConfig {
			t.Errorf("inline: %v", err)
		}
		// A concurrency limit in a family of nested budgets is refused when stored, both ways
		// round: as a parent, and made concurrency while a definition names it as one.
		if _, _, err := e.PutDefinition(ctx, tenant, "child", limiter.Definition{Kind: limiter.TokenBucket, Rate: 2, Period: 1000,
			Parents: []limiter.Parent{{Name: "jobs", Key: "k"}}}, nil); err == nil || apperr.From(err).Code != apperr.InvalidConfig || apperr.From(err).Field != "parents" {
			t.Errorf("storing a concurrency parent: %v, want invalid_config on parents", err)
		}
		mustPut(t, e, "child", limiter.Definition{Kind: limiter.TokenBucket, Rate: 2, Period: 1000, Parents: []limiter.Parent{{Name: "later", Key: "k"}}})
		if _, _, err := e.PutDefinition(ctx, tenant, "later", limiter.Definition{Kind: limiter.Concurrency, Rate: 2, LeaseTTL: 1000}, nil); err == nil || apperr.From(err).Code != apperr.InvalidConfig || apperr.From(err).Field != "kind" {
			t.Errorf("storing a concurrency limit that child names as a parent: %v, want invalid_config on kind", err)
		}
		// One stored before PutDefinition refused it is refused by the decision.
		if err := d.Gorm.Exec(`UPDATE limit_definitions SET parents = '[{"name":"jobs","key":"k"}]' WHERE tenant_id = ? AND name = 'child'`, tenant).Error; err != nil {
			t.Fatal(err)
		}
		if _, err := e.Limit(ctx, tenant, limiter.Request{Name: "child", Count: 1}); apperr.From(err).Code != apperr.InvalidConfig || apperr.From(err).Field != "parents" {
			t.Errorf("concurrency parent: %v", err)
		}
		if countRows(t, d, "leases") != 0 {
			t.Fatal("misuse wrote leases")
		}
	})
}
