package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// TestSkewedInstancesAgreeOnHoldsAndLeases: with process clocks 40 s apart, a lease or hold
// made on one instance expires at the database's time on both: the slow instance cannot take a
// slot the fast one holds, the fast one's sweepers do not end the slow one's holds or leases
// early, and a release or settle on the other instance finds them open.
func TestSkewedInstancesAgreeOnHoldsAndLeases(t *testing.T) {
	ctx := context.Background()
	slow, fast := skewedInstances(t)
	mustPut(t, slow, "jobs", limiter.Definition{Kind: limiter.Concurrency, Rate: 1, LeaseTTL: 5000})
	mustPut(t, slow, "b", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 3_600_000_000, Start: ptr(int64(0))})
	for _, pair := range [][2]*limiter.Engine{{slow, fast}, {fast, slow}} {
		a, b := pair[0], pair[1]
		d := mustLimit(t, a, limiter.Request{Name: "jobs", Key: "k", Count: 1})
		if !d.OK {
			t.Fatalf("first lease: %+v", d)
		}
		if exp := d.LeaseExpiresAt - time.Now().UnixMilli(); exp < 4000 || exp > 5500 {
			t.Fatalf("lease expires in %d ms by the database's clock, want about 5000", exp)
		}
		if d2 := mustLimit(t, b, limiter.Request{Name: "jobs", Key: "k", Count: 1}); d2.OK {
			t.Fatalf("the other instance took the held slot: %+v", d2)
		}
		if n, err := b.SweepLeases(ctx, 0); err != nil || n != 0 {
			t.Fatalf("the sweep on the other instance ended %d leases (%v)", n, err)
		}
		if _, err := b.ExtendLease(ctx, tenant, d.LeaseID); err != nil {
			t.Fatalf("extend on the other instance: %v", err)
		}
		if err := b.ReleaseLease(ctx, tenant, d.LeaseID); err != nil {
			t.Fatalf("release on the other instance: %v", err)
		}
		h := mustHold(t, a, 5000, limiter.HoldLimit{Name: "b", Key: "k", Count: 3})
		if exp := h.ExpiresAt - time.Now().UnixMilli(); exp < 4000 || exp > 5500 {
			t.Fatalf("hold expires in %d ms by the database's clock, want about 5000", exp)
		}
		if n, _, err := b.SweepHolds(ctx, 0); err != nil || n != 0 {
			t.Fatalf("the hold sweep on the other instance released %d holds (%v)", n, err)
		}
		if err := b.ReleaseHold(ctx, tenant, h.ID); err != nil {
			t.Fatalf("release on the other instance: %v", err)
		}
		if v := value(t, b, "b", "k"); v != 10 {
			t.Fatalf("after the release: %v", v)
		}
	}
}
