package sluice_test

import (
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// TestShadowPenaltyGCRAAndFullAtRoundTrip: a gcra limit in shadow mode with a penalty keeps its
// kind, mode and penalty through Put and Get (so reading and writing back a definition loses
// neither), a would-be refusal is admitted with its Shadow outcome, and Value reports fullAt and
// the running penalty.
func TestShadowPenaltyGCRAAndFullAtRoundTrip(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	name := limitName(t, "shadow")
	capacity := 2.0
	def := sluice.Definition{Kind: sluice.GCRA, Rate: 1, Period: 3_600_000, Capacity: &capacity, Mode: sluice.Shadow, Penalty: 60_000}
	put, err := c.Put(ctx, name, def)
	if err != nil {
		t.Fatal(err)
	}
	if put.Kind != sluice.GCRA || put.Mode != sluice.Shadow || put.Penalty != 60_000 {
		t.Fatalf("put = %+v", put)
	}
	got, err := c.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, name, got.Definition); err != nil { // read, write back: nothing lost
		t.Fatal(err)
	}
	if again, err := c.Get(ctx, name); err != nil || again.Mode != sluice.Shadow || again.Penalty != 60_000 || again.Kind != sluice.GCRA {
		t.Fatalf("after writing back: %+v %v", again, err)
	}
	first, err := c.Limit(ctx, name, sluice.Decision{Key: "k", Count: sluice.Count(2)})
	if err != nil || !first.OK || first.Shadow == nil || !first.Shadow.OK {
		t.Fatalf("first = %+v (%+v) %v", first, first.Shadow, err)
	}
	r, err := c.Limit(ctx, name, sluice.Decision{Key: "k"})
	if err != nil || !r.OK || r.RetryAfter != 0 || r.Shadow == nil || r.Shadow.OK || r.Shadow.RetryAfter < 59*time.Minute {
		t.Fatalf("would-be refusal = %+v (%+v) %v", r, r.Shadow, err)
	}
	v, err := c.Value(ctx, name, "k")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	if v.FullAt == nil || *v.FullAt < now+7_100_000 || v.PenaltyUntil == nil || *v.PenaltyUntil < now+50_000 {
		t.Fatalf("value = %+v (fullAt %v, penaltyUntil %v)", v, v.FullAt, v.PenaltyUntil)
	}
}
