package webhooks

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestManualSendingsDoNotPassTheOutboxsBound: an endpoint with MaxWaitingPerEndpoint deliveries
// waiting takes no test event and no resend of a finished delivery (which stays finished), so
// the bound holds at every moment, not only once housekeeping has run; a resend of a delivery
// already waiting adds none and goes; once one is delivered there is room for one more. Another
// tenant's full endpoint is not found, never reported full.
func TestManualSendingsDoNotPassTheOutboxsBound(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		ctx := context.Background()
		tenant, other := newTenant(t, d, "acme"), newTenant(t, d, "other")
		ep, _, err := s.CreateEndpoint(ctx, tenant, "http://127.0.0.1:9/full", []string{EventKeyCreated})
		if err != nil {
			t.Fatal(err)
		}
		start := c.now().UnixMilli()
		rows := []deliveryRow{{ID: "delivered", CreatedAt: start - 1, DeliveredAt: &start, NextAttemptAt: finishedNextAttempt}}
		// One more than the bound, as ordinary events may leave it until housekeeping runs.
		for i := range MaxWaitingPerEndpoint + 1 {
			rows = append(rows, deliveryRow{ID: "waiting-" + strconv.Itoa(10_000+i), CreatedAt: start + int64(i)})
		}
		outboxRows(t, d, ep, rows)
		if err := s.SendTest(ctx, tenant, ep.ID); !errors.Is(err, ErrOutboxFull) || apperr.From(err).Status() != http.StatusConflict {
			t.Fatalf("test event to a full endpoint: %v, want ErrOutboxFull (409)", err)
		}
		if err := s.Resend(ctx, tenant, ep.ID, "delivered"); !errors.Is(err, ErrOutboxFull) {
			t.Fatalf("resend of a delivered delivery to a full endpoint: %v, want ErrOutboxFull", err)
		}
		if ids := outboxIDs(t, d, "delivered_at IS NOT NULL"); len(ids) != 1 {
			t.Fatalf("the refused resend was not rolled back: delivered %q", ids)
		}
		if err := s.Resend(ctx, tenant, ep.ID, "waiting-10000"); err != nil {
			t.Fatalf("resend of a waiting delivery, past the bound: %v", err)
		}
		if err := s.Resend(ctx, other, ep.ID, "waiting-10000"); !errors.Is(err, ErrDeliveryNotFound) {
			t.Fatalf("another tenant's resend: %v, want not found", err)
		}
		if err := s.SendTest(ctx, other, ep.ID); !errors.Is(err, ErrEndpointNotFound) {
			t.Fatalf("another tenant's test event: %v, want not found", err)
		}
		if n := len(outboxIDs(t, d, "delivered_at IS NULL AND given_up_at IS NULL")); n != MaxWaitingPerEndpoint+1 {
			t.Fatalf("%d waiting, want %d", n, MaxWaitingPerEndpoint+1)
		}
		if err := d.Gorm.Model(&deliveryRow{}).Where("id IN ?", []string{"waiting-10001", "waiting-10002"}).Updates(map[string]any{"delivered_at": start, "next_attempt_at": finishedNextAttempt}).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.SendTest(ctx, tenant, ep.ID); err != nil {
			t.Fatalf("test event once below the bound: %v", err)
		}
		if n := len(outboxIDs(t, d, "delivered_at IS NULL AND given_up_at IS NULL")); n != MaxWaitingPerEndpoint {
			t.Fatalf("%d waiting, want %d", n, MaxWaitingPerEndpoint)
		}
	})
}

// TestManualSendingsAreLimitedPerEndpoint: SpendManual lets MaxManualPerMinute through at once,
// then refuses with a rate_limited error saying when to retry, until the engine's clock has moved
// on; another endpoint has its own.
func TestManualSendingsAreLimitedPerEndpoint(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		engine := limiter.NewEngine(d, limiter.Options{Now: c.now})
		testkit.Run(t, engine.Run)
		ctx := context.Background()
		for range MaxManualPerMinute {
			if err := SpendManual(ctx, engine, 1); err != nil {
				t.Fatal(err)
			}
		}
		err := SpendManual(ctx, engine, 1)
		e := apperr.From(err)
		if e.Code != apperr.RateLimited || e.RetryAfterMs == nil || *e.RetryAfterMs <= 0 || *e.RetryAfterMs > time.Minute.Milliseconds() {
			t.Fatalf("sending %d in a minute: %v (retry after %v), want rate_limited with a retry within the minute", MaxManualPerMinute+1, err, e.RetryAfterMs)
		}
		if err := SpendManual(ctx, engine, 2); err != nil {
			t.Fatalf("another endpoint: %v", err)
		}
		c.advance(time.Duration(*e.RetryAfterMs) * time.Millisecond)
		if err := SpendManual(ctx, engine, 1); err != nil {
			t.Fatalf("after retry-after: %v", err)
		}
	})
}
