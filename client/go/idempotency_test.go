package sluice_test

import (
	"errors"
	"testing"

	sluice "github.com/sluice-dev/sluice/client/go"
)

func TestIdempotencyKeyReplaysTheFirstAnswer(t *testing.T) {
	c := newClient(t)
	name := limitName(t, "api")
	putLimit(t, c, name, 10)
	ctx := sluice.WithIdempotencyKey(testCtx(t), "order-"+name)
	first, err := c.Limit(ctx, name, sluice.Decision{Key: "a", Count: sluice.Count(3)})
	if err != nil || !first.OK || first.Replayed {
		t.Fatalf("first attempt: %+v %v", first, err)
	}
	again, err := c.Limit(ctx, name, sluice.Decision{Key: "a", Count: sluice.Count(3)})
	if err != nil || !again.Replayed || again.Remaining != first.Remaining || again.RateLimit != first.RateLimit {
		t.Fatalf("retry: %+v %v; want the first answer %+v replayed", again, err, first)
	}
	if v, err := c.Value(testCtx(t), name, "a"); err != nil || !near(v.Value, 7) {
		t.Fatalf("value %+v %v, want 7 (one consumption of 3)", v, err)
	}
	_, err = c.Limit(ctx, name, sluice.Decision{Key: "a", Count: sluice.Count(4)})
	if e := asError(t, err); e.Code != sluice.CodeIdempotencyKeyReused || e.Status != 422 {
		t.Fatalf("same key, another request: %+v", e)
	}

	items := []sluice.Item{{Name: name, Decision: sluice.Decision{Key: "b", Count: sluice.Count(2)}}}
	bctx := sluice.WithIdempotencyKey(testCtx(t), "batch-"+name)
	b1, err := c.Batch(bctx, items)
	if err != nil || !b1.OK || b1.Replayed {
		t.Fatalf("batch: %+v %v", b1, err)
	}
	if b2, err := c.Batch(bctx, items); err != nil || !b2.Replayed || b2.Results[0].Remaining != b1.Results[0].Remaining {
		t.Fatalf("batch retry: %+v %v", b2, err)
	}
	if v, err := c.Value(testCtx(t), name, "b"); err != nil || !near(v.Value, 8) {
		t.Fatalf("batch value %+v %v, want 8", v, err)
	}

	// Bulk: the retry's results say they were replayed, as Sluice's answer does.
	bulkCtx := sluice.WithIdempotencyKey(testCtx(t), "bulk-"+name)
	bulk := []sluice.Item{{Name: name, Decision: sluice.Decision{Key: "c", Count: sluice.Count(3)}}}
	u1, err := c.Bulk(bulkCtx, bulk)
	if err != nil || u1[0].Err != nil || !u1[0].OK || u1[0].Replayed {
		t.Fatalf("bulk: %+v %v", u1, err)
	}
	if u2, err := c.Bulk(bulkCtx, bulk); err != nil || u2[0].Err != nil || !u2[0].Replayed || u2[0].Remaining != u1[0].Remaining {
		t.Fatalf("bulk retry: %+v %v; want the first answer %+v replayed", u2, err, u1)
	}
	if v, err := c.Value(testCtx(t), name, "c"); err != nil || !near(v.Value, 7) {
		t.Fatalf("value %+v %v, want 7 (one consumption of 3)", v, err)
	}
}

func TestIdempotencyKeyMakesConsumingCallsRetryable(t *testing.T) {
	items := []sluice.Item{{Name: "x", Decision: sluice.Decision{Key: "k"}}}
	ctx := sluice.WithIdempotencyKey(testCtx(t), "k-1")
	for call, do := range map[string]func(*sluice.Client) error{
		"Limit": func(c *sluice.Client) error { _, err := c.Limit(ctx, "x", sluice.Decision{}); return err },
		"Batch": func(c *sluice.Client) error { _, err := c.Batch(ctx, items); return err },
		"Bulk":  func(c *sluice.Client) error { _, err := c.Bulk(ctx, items); return err },
	} {
		c, ct := unreachable(t, sluice.WithBatching(0, 0))
		if err := do(c); err == nil {
			t.Errorf("%s: no error from an unreachable server", call)
		}
		if got := ct.n.Load(); got != 4 {
			t.Errorf("%s with an Idempotency-Key: %d attempts, want 4 (retried: the retry is replayed, not decided again)", call, got)
		}
	}
	// A malformed key fails before any request.
	c, ct := unreachable(t)
	var e *sluice.Error
	if _, err := c.Limit(sluice.WithIdempotencyKey(testCtx(t), "clé"), "x", sluice.Decision{}); err == nil || errors.As(err, &e) {
		t.Fatalf("a non-ASCII key: %v", err)
	}
	if ct.n.Load() != 0 {
		t.Fatalf("a malformed key was sent (%d requests)", ct.n.Load())
	}
}
