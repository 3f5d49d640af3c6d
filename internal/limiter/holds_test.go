package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

func mustHold(t *testing.T, e *limiter.Engine, ttl int64, ls ...limiter.HoldLimit) limiter.HoldResult {
	t.Helper()
	h, err := e.Hold(context.Background(), tenant, ls, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func countRows(t *testing.T, d *db.DB, table string) int {
	t.Helper()
	return len(testkit.Rows(t, d, table))
}

// TestHoldsSettleExactlyOnce: a hold takes its amounts all or nothing; settling charges the
// actual amounts (giving back the difference, taking the extra when it fits, recording overage
// when it does not), once; a release gives everything back; an expired hold cannot be settled and
// is released by the sweeper at the engine's clock; another tenant's hold does not exist.
func TestHoldsSettleExactlyOnce(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		// Fixed windows of a day from the epoch: no refill during the test.
		mustPut(t, e, "tokens", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 86_400_000 * 365, Start: ptr(int64(0))})
		mustPut(t, e, "calls", limiter.Definition{Kind: limiter.FixedWindow, Rate: 3, Period: 86_400_000 * 365, Start: ptr(int64(0))})

		h := mustHold(t, e, 60_000, limiter.HoldLimit{Name: "tokens", Key: "k", Count: 4}, limiter.HoldLimit{Name: "calls", Key: "k", Count: 1})
		if !h.Decision.OK || h.ID == "" || h.ExpiresAt != 1_700_000_000_000+60_000 {
			t.Fatalf("hold: %+v", h)
		}
		if v := value(t, e, "tokens", "k"); v != 6 {
			t.Fatalf("held 4 of 10: value %v", v)
		}
		s, err := e.SettleHold(ctx, tenant, h.ID, []float64{3, 1})
		if err != nil {
			t.Fatal(err)
		}
		if s.Charged[0] != 3 || s.Refunded[0] != 1 || s.Overage[0] != 0 || value(t, e, "tokens", "k") != 7 || value(t, e, "calls", "k") != 2 {
			t.Fatalf("settle less: %+v, tokens %v calls %v", s, value(t, e, "tokens", "k"), value(t, e, "calls", "k"))
		}
		if _, err := e.SettleHold(ctx, tenant, h.ID, []float64{3, 1}); !errors.Is(err, limiter.ErrHoldClosed) {
			t.Fatalf("settling twice: %v", err)
		}
		if err := e.ReleaseHold(ctx, tenant, h.ID); !errors.Is(err, limiter.ErrHoldClosed) {
			t.Fatalf("releasing a settled hold: %v", err)
		}

		// More than held: the extra is taken when it fits...
		h = mustHold(t, e, 60_000, limiter.HoldLimit{Name: "tokens", Key: "k", Count: 2})
		if s, err = e.SettleHold(ctx, tenant, h.ID, []float64{5}); err != nil || s.Overage[0] != 0 || value(t, e, "tokens", "k") != 2 {
			t.Fatalf("settle more, fits: %+v %v, value %v", s, err, value(t, e, "tokens", "k"))
		}
		// ...and recorded as overage, never blocking, when it does not.
		h = mustHold(t, e, 60_000, limiter.HoldLimit{Name: "tokens", Key: "k", Count: 1})
		if s, err = e.SettleHold(ctx, tenant, h.ID, []float64{4}); err != nil || s.Overage[0] != 3 || s.Charged[0] != 1 || value(t, e, "tokens", "k") != 1 {
			t.Fatalf("settle more, no room: %+v %v, value %v", s, err, value(t, e, "tokens", "k"))
		}

		// Refused like a batch: nothing taken, no hold.
		before := countRows(t, d, "holds")
		h = mustHold(t, e, 60_000, limiter.HoldLimit{Name: "calls", Key: "k", Count: 1}, limiter.HoldLimit{Name: "tokens", Key: "k", Count: 2})
		if h.Decision.OK || h.ID != "" || h.Decision.Results[1].RetryAfter == nil || value(t, e, "calls", "k") != 2 || countRows(t, d, "holds") != before {
			t.Fatalf("refused hold: %+v, calls %v", h, value(t, e, "calls", "k"))
		}

		// Released: everything back.
		h = mustHold(t, e, 60_000, limiter.HoldLimit{Name: "calls", Key: "r", Count: 2})
		if err := e.ReleaseHold(ctx, tenant, h.ID); err != nil || value(t, e, "calls", "r") != 3 {
			t.Fatalf("release: %v, value %v", err, value(t, e, "calls", "r"))
		}

		// Another tenant's hold, and ids that were never handed out, are not found.
		h = mustHold(t, e, 60_000, limiter.HoldLimit{Name: "calls", Key: "x", Count: 1})
		if _, err := e.SettleHold(ctx, tenant+1, h.ID, []float64{1}); !errors.Is(err, limiter.ErrHoldNotFound) {
			t.Fatalf("another tenant's hold: %v", err)
		}
		for _, id := range []string{"", "hold_x", "hold_aaaaaaaaaaaaaaaaaaaaaaaaaa", "'; drop table holds; --"} {
			if err := e.ReleaseHold(ctx, tenant, id); !errors.Is(err, limiter.ErrHoldNotFound) {
				t.Fatalf("id %q: %v", id, err)
			}
		}

		// Expiry by the engine's clock: refused at expiresAt, released by the sweeper.
		clock.Advance(60_000)
		if _, err := e.SettleHold(ctx, tenant, h.ID, []float64{1}); !errors.Is(err, limiter.ErrHoldClosed) {
			t.Fatalf("settling an expired hold: %v", err)
		}
		if v := value(t, e, "calls", "x"); v != 2 {
			t.Fatalf("before the sweep the amount is still held: %v", v)
		}
		n, _, err := e.SweepHolds(ctx, 0)
		if err != nil || n != 1 || value(t, e, "calls", "x") != 3 {
			t.Fatalf("sweep: %d %v, value %v", n, err, value(t, e, "calls", "x"))
		}
		if n, _, err := e.SweepHolds(ctx, 0); err != nil || n != 0 {
			t.Fatalf("second sweep: %d %v", n, err)
		}
		if _, err := e.SettleHold(ctx, tenant, h.ID, []float64{1}); !errors.Is(err, limiter.ErrHoldClosed) {
			t.Fatalf("settling a swept hold: %v", err)
		}
		// Closed holds are kept a day, then deleted.
		clock.Advance(limiter.ClosedHoldRetention)
		if _, _, err := e.SweepHolds(ctx, 0); err != nil || countRows(t, d, "holds") != 0 || countRows(t, d, "hold_limits") != 0 {
			t.Fatalf("closed holds a day later: %v, %d left", err, countRows(t, d, "holds"))
		}
		if _, err := e.SettleHold(ctx, tenant, h.ID, []float64{1}); !errors.Is(err, limiter.ErrHoldNotFound) {
			t.Fatalf("a deleted hold: %v", err)
		}
	})
}

// TestHoldBadInputWritesNothing: every bad hold or settle is a problem naming its field, and
// nothing is written.
func TestHoldBadInputWritesNothing(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		e := newEngine(t, d, newClock(1_700_000_000_000).opts())
		mustPut(t, e, "tokens", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000})
		mustPut(t, e, "inflight", limiter.Definition{Kind: limiter.Concurrency, Rate: 2, LeaseTTL: 1000})
		ok := limiter.HoldLimit{Name: "tokens", Key: "k", Count: 1}
		many := make([]limiter.HoldLimit, 65)
		for i := range many {
			many[i] = ok
		}
		for _, c := range []struct {
			ls    []limiter.HoldLimit
			ttl   int64
			code  apperr.Code
			field string
		}{
			{nil, 1000, apperr.InvalidRequest, "limits"},
			{many, 1000, apperr.InvalidRequest, "limits"},
			{[]limiter.HoldLimit{ok}, 0, apperr.InvalidRequest, "ttl"},
			{[]limiter.HoldLimit{ok}, 86_400_001, apperr.InvalidRequest, "ttl"},
			{[]limiter.HoldLimit{ok, {Name: "tokens", Count: -1}}, 1000, apperr.InvalidRequest, "limits[1].count"},
			{[]limiter.HoldLimit{{Name: "tokens", Count: math.NaN()}}, 1000, apperr.InvalidRequest, "limits[0].count"},
			{[]limiter.HoldLimit{{Name: "tokens", Count: math.Inf(1)}}, 1000, apperr.InvalidRequest, "limits[0].count"},
			{[]limiter.HoldLimit{ok, {Name: "nope", Count: 1}}, 1000, apperr.LimitNotFound, "limits[1].name"},
			{[]limiter.HoldLimit{ok, {Name: "inflight", Count: 1}}, 1000, apperr.InvalidConfig, "limits[1].name"},
			{[]limiter.HoldLimit{{Name: "tokens", Count: 11}}, 1000, apperr.CountExceedsCapacity, "limits[0].count"},
		} {
			_, err := e.Hold(ctx, tenant, c.ls, c.ttl)
			if p := apperr.From(err); p == nil || p.Code != c.code || p.Field != c.field {
				t.Errorf("hold %d limits ttl %d: %v (field %q), want %s %q", len(c.ls), c.ttl, err, apperr.From(err).Field, c.code, c.field)
			}
		}
		h := mustHold(t, e, 1000, ok, ok)
		for _, c := range []struct {
			counts []float64
			field  string
		}{{[]float64{1}, "counts"}, {[]float64{1, 1, 1}, "counts"}, {[]float64{1, -1}, "counts[1]"}, {[]float64{math.NaN(), 1}, "counts[0]"}} {
			if _, err := e.SettleHold(ctx, tenant, h.ID, c.counts); apperr.From(err).Code != apperr.InvalidRequest || apperr.From(err).Field != c.field {
				t.Errorf("settle %v: %v", c.counts, err)
			}
		}
		if countRows(t, d, "holds") != 1 || countRows(t, d, "hold_limits") != 2 || value(t, e, "tokens", "k") != 8 {
			t.Fatalf("bad input wrote: holds %d, value %v", countRows(t, d, "holds"), value(t, e, "tokens", "k"))
		}
		if s, err := e.SettleHold(ctx, tenant, h.ID, []float64{1, 1}); err != nil || s.Charged[1] != 1 {
			t.Fatalf("the hold is still open after bad settles: %+v %v", s, err)
		}
	})
}

// TestHoldAndLeaseLimitNames: what the dashboard checks a release against: the limits a hold
// reserves (each once, in its order, also once it is closed) and a lease's limit, the tenant's
// own only.
func TestHoldAndLeaseLimitNames(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		e := newEngine(t, d, newClock(1_700_000_000_000).opts())
		mustPut(t, e, "tokens", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000})
		mustPut(t, e, "calls", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000})
		mustPut(t, e, "inflight", limiter.Definition{Kind: limiter.Concurrency, Rate: 2, LeaseTTL: 1000})
		h := mustHold(t, e, 1000, limiter.HoldLimit{Name: "calls", Key: "a", Count: 1}, limiter.HoldLimit{Name: "tokens", Key: "a", Count: 1}, limiter.HoldLimit{Name: "calls", Key: "b", Count: 1})
		if err := e.ReleaseHold(ctx, tenant, h.ID); err != nil {
			t.Fatal(err)
		}
		if names, err := e.HoldLimitNames(ctx, tenant, h.ID); err != nil || strings.Join(names, ",") != "calls,tokens" {
			t.Fatalf("hold limit names: %v %v", names, err)
		}
		lease := mustLimit(t, e, limiter.Request{Name: "inflight", Key: "w", Count: 1}).LeaseID
		if name, err := e.LeaseLimitName(ctx, tenant, lease); err != nil || name != "inflight" {
			t.Fatalf("lease limit name: %q %v", name, err)
		}
		if _, err := e.HoldLimitNames(ctx, tenant+1, h.ID); !errors.Is(err, limiter.ErrHoldNotFound) {
			t.Fatalf("another tenant's hold: %v", err)
		}
		if _, err := e.LeaseLimitName(ctx, tenant+1, lease); !errors.Is(err, limiter.ErrLeaseNotFound) {
			t.Fatalf("another tenant's lease: %v", err)
		}
		if err := e.ReleaseLease(ctx, tenant, lease); err != nil {
			t.Fatal(err)
		}
		if _, err := e.LeaseLimitName(ctx, tenant, lease); !errors.Is(err, limiter.ErrLeaseNotFound) {
			t.Fatalf("a released lease: %v", err)
		}
	})
}

// TestOpenHoldsLeaveOutExpiredOnes: a hold past its expiry holds nothing (closing it is refused),
// so the holds summary leaves it out before the sweeper has come by.
func TestOpenHoldsLeaveOutExpiredOnes(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock(1_700_000_000_000)
		e := newEngine(t, d, c.opts())
		mustPut(t, e, "fw", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 60_000})
		mustHold(t, e, 1_000, limiter.HoldLimit{Name: "fw", Key: "short", Count: 2})
		long := mustHold(t, e, 60_000, limiter.HoldLimit{Name: "fw", Key: "long", Count: 3})
		c.Advance(1_000)
		stats, list, err := e.OpenHolds(context.Background(), tenant, "fw", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if stats.Open != 1 || stats.Held != 3 || len(list) != 1 || list[0].ID != long.ID {
			t.Fatalf("open holds after the first expired: %+v %+v, want only the 60 s hold", stats, list)
		}
	})
}

// TestOpenHoldsSayWhenTheyListOnlySome: a hold that holds a limit under two keys is one open hold
// and two entries; the dashboard's "more" came from comparing the holds with the entries listed,
// so a list cut short by such a hold said nothing was left out.
func TestOpenHoldsSayWhenTheyListOnlySome(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock(1_700_000_000_000)
		e := newEngine(t, d, c.opts())
		mustPut(t, e, "fw", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 60_000})
		mustHold(t, e, 60_000, limiter.HoldLimit{Name: "fw", Key: "a", Count: 2}, limiter.HoldLimit{Name: "fw", Key: "b", Count: 3})
		for n, more := range map[int]bool{1: true, 2: false, 3: false} {
			stats, list, err := e.OpenHolds(context.Background(), tenant, "fw", 0, n)
			if err != nil {
				t.Fatal(err)
			}
			if stats.Open != 1 || stats.Held != 5 || len(list) != min(n, 2) || stats.More != more {
				t.Fatalf("open holds, %d listed: %+v %+v; want 1 hold holding 5, %d entries, more %v", n, stats, list, min(n, 2), more)
			}
		}
	})
}

// TestOpenHoldsOnAParentCountEveryHoldBelowItAndListTheOldest: a parent's summary counts the
// open holds of its children (read row by row, keeping only the oldest entries, so that a parent
// with many holds below it does not cost their size in memory): every hold is counted once,
// every amount is summed, and the entries listed are the oldest, whatever order the rows come in.
func TestOpenHoldsOnAParentCountEveryHoldBelowItAndListTheOldest(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock(1_700_000_000_000)
		e := newEngine(t, d, c.opts())
		mustPut(t, e, "org", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1000, Period: 86_400_000})
		mustPut(t, e, "user", limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 86_400_000,
			Parents: []limiter.Parent{{Name: "org", Key: "org:{org}"}}})
		acme := map[string]string{"org": "acme"}
		var ids []string
		held := 0.0
		for i := range 9 {
			c.Advance(1)
			ls := []limiter.HoldLimit{{Name: "user", Key: fmt.Sprintf("u%d", i), Count: float64(i + 1), Attributes: acme}}
			held += float64(i + 1)
			if i == 4 { // one hold with two rows below the parent: one hold, two entries
				ls = append(ls, limiter.HoldLimit{Name: "user", Key: "second", Count: 10, Attributes: acme})
				held += 10
			}
			h := mustHold(t, e, 60_000, ls...)
			if !h.Decision.OK {
				t.Fatalf("hold %d refused: %+v", i, h)
			}
			ids = append(ids, h.ID)
		}
		stats, list, err := e.OpenHolds(context.Background(), tenant, "org", 0, 2)
		if err != nil {
			t.Fatal(err)
		}
		if stats.Open != 9 || stats.Held != held || !stats.More || stats.Oldest != 1_700_000_000_001 {
			t.Fatalf("the parent's summary: %+v; want 9 open holds holding %v, more listed, the oldest at …001", stats, held)
		}
		if len(list) != 2 || list[0].ID != ids[0] || list[1].ID != ids[1] || list[0].Key != "org:acme" {
			t.Fatalf("the parent's two listed entries: %+v; want the holds %s and %s on org:acme", list, ids[0], ids[1])
		}
		_, all, err := e.OpenHolds(context.Background(), tenant, "org", 0, 20)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 10 {
			t.Fatalf("the parent's entries, 20 asked: %d; want 10 (nine holds, one of them with two rows)", len(all))
		}
	})
}
