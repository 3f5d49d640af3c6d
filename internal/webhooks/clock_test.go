package webhooks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// skewedInstances are two services on one PostgreSQL database whose process clocks run a minute
// behind and a minute ahead of real time (two minutes apart, more than claimLease), as two app
// instances with unsynchronised clocks would. Neither sets Options.Now: the outbox takes its time
// from the database.
func skewedInstances(t *testing.T) (slow, fast *Service, d *db.DB) {
	t.Helper()
	url := testkit.URL(t, db.Postgres)
	open := func(skew time.Duration) (*Service, *db.DB) {
		d := testkit.OpenURL(t, url)
		s, err := NewService(d, sealKey, Options{AllowPrivate: true, Clock: func() time.Time { return time.Now().Add(skew) }})
		if err != nil {
			t.Fatal(err)
		}
		return s, d
	}
	slow, d = open(-time.Minute)
	fast, _ = open(time.Minute)
	return slow, fast, d
}

// dbNow is the database's time, in ms since the epoch.
func dbNow(t *testing.T, d *db.DB) int64 {
	t.Helper()
	var ms int64
	if err := d.Gorm.Raw(db.SQLNow).Scan(&ms).Error; err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestSkewedInstancesDoNotSendADeliveryTwiceNorRetryEarly: on PostgreSQL the outbox's times are
// the database's. A delivery the slow instance claimed and is still sending (its receiver has not
// answered yet) is not due for the fast instance, whose clock is past the claim's lease by its own
// reckoning: each webhook-id reaches the receiver once. And a failed attempt's retry is due
// firstRetry after the database's time of the attempt, not after the slow instance's clock (which
// the fast instance would find long due).
func TestSkewedInstancesDoNotSendADeliveryTwiceNorRetryEarly(t *testing.T) {
	slow, fast, d := skewedInstances(t)
	ctx := context.Background()
	tenant := newTenant(t, d, "acme")
	var (
		mu         sync.Mutex
		requests   = map[string]int{}
		status     = http.StatusOK
		inner      atomic.Bool
		innerSent  int
		innerErr   error
		innerCalls int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		requests[req.Header.Get("webhook-id")]++
		answer := status
		mu.Unlock()
		// The first request of each round: the fast instance looks for due deliveries while
		// the slow one waits for this answer.
		if inner.CompareAndSwap(false, true) {
			n, err := fast.DeliverDue(req.Context())
			mu.Lock()
			innerSent, innerErr, innerCalls = innerSent+n, err, innerCalls+1
			mu.Unlock()
		}
		w.WriteHeader(answer)
	}))
	t.Cleanup(srv.Close)
	if _, _, err := slow.CreateEndpoint(ctx, tenant, srv.URL, []string{EventKeyCreated}); err != nil {
		t.Fatal(err)
	}

	// A delivery sent while the fast instance looks.
	before := dbNow(t, d)
	emit(t, slow, tenant, EventKeyCreated, map[string]string{"id": "1"})
	if n := deliverDue(t, slow); n != 1 {
		t.Fatalf("the slow instance delivered %d, want 1", n)
	}
	after := dbNow(t, d)
	mu.Lock()
	if innerCalls != 1 || innerErr != nil || innerSent != 0 {
		t.Fatalf("the fast instance, looking while the slow one was sending: %d looks, %d sent, err %v; want 1 look and nothing sent", innerCalls, innerSent, innerErr)
	}
	for id, n := range requests {
		if n != 1 {
			t.Fatalf("delivery %s reached the receiver %d times, want once", id, n)
		}
	}
	mu.Unlock()
	var row deliveryRow
	if err := d.Gorm.Where("tenant_id = ?", tenant).Take(&row).Error; err != nil {
		t.Fatal(err)
	}
	if row.CreatedAt < before || row.CreatedAt > after || row.DeliveredAt == nil || *row.DeliveredAt < before || *row.DeliveredAt > after {
		t.Fatalf("created at %d, delivered at %v: want the database's times, within [%d, %d]", row.CreatedAt, msTime(row.DeliveredAt), before, after)
	}

	// A failed attempt: its retry is firstRetry after the database's time of the attempt.
	mu.Lock()
	status = http.StatusInternalServerError
	mu.Unlock()
	inner.Store(true) // no look from inside the handler this time
	before = dbNow(t, d)
	emit(t, slow, tenant, EventKeyCreated, map[string]string{"id": "2"})
	if n := deliverDue(t, slow); n != 0 {
		t.Fatalf("the slow instance delivered %d to a failing receiver", n)
	}
	after = dbNow(t, d)
	var failed deliveryRow
	if err := d.Gorm.Where("tenant_id = ? AND delivered_at IS NULL", tenant).Take(&failed).Error; err != nil {
		t.Fatal(err)
	}
	if failed.Attempts != 1 || failed.NextAttemptAt < before+firstRetry.Milliseconds() || failed.NextAttemptAt > after+firstRetry.Milliseconds() {
		t.Fatalf("after %d attempts the retry is due at %d; want %s after the attempt's database time, within [%d, %d]",
			failed.Attempts, failed.NextAttemptAt, firstRetry, before+firstRetry.Milliseconds(), after+firstRetry.Milliseconds())
	}
}
