package webhooks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestASecondDispatcherDoesNotSendWhatTheFirstIsStillWorkingThrough: two instances on one
// database. The first finds 16 deliveries due and sends them one by one, each request taking the
// whole request timeout; while it is on its 7th, the second looks for due deliveries. Each
// delivery must reach the receiver once: a dispatcher holds only the delivery it is sending, so
// the second takes the 9 the first has not started and leaves the 7th alone.
func TestASecondDispatcherDoesNotSendWhatTheFirstIsStillWorkingThrough(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		first, second := newService(t, d, c, true), newService(t, d, c, true)
		tenant := newTenant(t, d, "acme")
		var (
			mu           sync.Mutex
			sent         = map[string]int{}
			fromFirst    int
			secondActive atomic.Bool
		)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			mu.Lock()
			sent[req.Header.Get("webhook-id")]++
			if !secondActive.Load() {
				fromFirst++
			}
			n := fromFirst
			mu.Unlock()
			if secondActive.Load() {
				w.WriteHeader(http.StatusOK)
				return
			}
			c.advance(requestTimeout) // the first dispatcher's every request takes as long as it may
			if n == 7 {
				secondActive.Store(true)
				if _, err := second.DeliverDue(context.Background()); err != nil {
					t.Error(err)
				}
				secondActive.Store(false)
			}
			w.WriteHeader(http.StatusOK)
		}))
		t.Cleanup(srv.Close)
		if _, _, err := first.CreateEndpoint(context.Background(), tenant, srv.URL, []string{EventKeyCreated}); err != nil {
			t.Fatal(err)
		}
		for i := range 16 {
			emit(t, first, tenant, EventKeyCreated, map[string]int{"n": i})
		}
		deliverDue(t, first)
		mu.Lock()
		defer mu.Unlock()
		twice := 0
		for _, n := range sent {
			if n > 1 {
				twice++
			}
		}
		if len(sent) != 16 || twice != 0 {
			t.Fatalf("%d deliveries reached the receiver, %d of them more than once; want 16, none twice", len(sent), twice)
		}
	})
}

// TestAnOvertakenDispatcherDoesNotOverwriteTheOutcome: a dispatcher whose request outlasted its
// claim (a stalled process) was overtaken by another, which delivered; the first's late failure
// must not be recorded over that success (it would schedule the delivered event again).
func TestAnOvertakenDispatcherDoesNotOverwriteTheOutcome(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		first, second := newService(t, d, c, true), newService(t, d, c, true)
		tenant := newTenant(t, d, "acme")
		var requests atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if requests.Add(1) > 1 {
				w.WriteHeader(http.StatusOK) // the second dispatcher's
				return
			}
			c.advance(2 * claimLease)
			if n, err := second.DeliverDue(context.Background()); err != nil || n != 1 {
				t.Errorf("the second dispatcher delivered %d (%v), want 1", n, err)
			}
			w.WriteHeader(http.StatusInternalServerError)
		}))
		t.Cleanup(srv.Close)
		ep, _, err := first.CreateEndpoint(context.Background(), tenant, srv.URL, []string{EventKeyCreated})
		if err != nil {
			t.Fatal(err)
		}
		emit(t, first, tenant, EventKeyCreated, nil)
		deliverDue(t, first)
		log, err := first.Deliveries(context.Background(), tenant, ep.ID, 10)
		if err != nil || len(log) != 1 {
			t.Fatalf("delivery log %+v (%v)", log, err)
		}
		if l := log[0]; l.DeliveredAt == nil || l.NextAttempt != nil || l.LastStatus == nil || *l.LastStatus != 200 || l.LastError != "" {
			t.Fatalf("the overtaken dispatcher's failure was recorded over the delivery: %+v", l)
		}
	})
}

// TestAResendIsNotUndoneByTheAttemptInFlight: an admin resends a delivery while an old attempt of
// it is still waiting for the receiver, near the end of its 24 hours. The old attempt's failure
// must not give the delivery up (nor reschedule it): the resend stands, and is sent.
func TestAResendIsNotUndoneByTheAttemptInFlight(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		tenant := newTenant(t, d, "acme")
		var (
			ep       Endpoint
			requests atomic.Int64
		)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if requests.Add(1) > 1 {
				w.WriteHeader(http.StatusOK)
				return
			}
			// The old attempt, near the end of the delivery's 24 hours: meanwhile an admin resends.
			c.advance(retryWindow - time.Second)
			if err := s.Resend(context.Background(), tenant, ep.ID, req.Header.Get("webhook-id")); err != nil {
				t.Error(err)
			}
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		t.Cleanup(srv.Close)
		var err error
		ep, _, err = s.CreateEndpoint(context.Background(), tenant, srv.URL, []string{EventKeyCreated})
		if err != nil {
			t.Fatal(err)
		}
		emit(t, s, tenant, EventKeyCreated, nil)
		deliverDue(t, s)
		log, err := s.Deliveries(context.Background(), tenant, ep.ID, 10)
		if err != nil || len(log) != 1 {
			t.Fatalf("delivery log %+v (%v)", log, err)
		}
		if l := log[0]; l.GivenUpAt != nil || l.DeliveredAt == nil || requests.Load() != 2 {
			t.Fatalf("after a resend during an attempt: %+v, %d requests; want the resend delivered (2 requests)", l, requests.Load())
		}
	})
}

// TestOneTenantsBacklogDoesNotHoldUpAnother: the dispatcher takes due deliveries in turns, one
// tenant at a time, so a tenant with many waiting (a slow receiver costs up to the request
// timeout each) delays another tenant's event by at most one of its own.
func TestOneTenantsBacklogDoesNotHoldUpAnother(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		busy, quiet := newTenant(t, d, "busy"), newTenant(t, d, "quiet")
		var (
			mu    sync.Mutex
			order []string
		)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			mu.Lock()
			order = append(order, req.URL.Path)
			mu.Unlock()
			w.WriteHeader(http.StatusOK)
		}))
		t.Cleanup(srv.Close)
		ctx := context.Background()
		if _, _, err := s.CreateEndpoint(ctx, busy, srv.URL+"/busy", []string{EventKeyCreated}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.CreateEndpoint(ctx, quiet, srv.URL+"/quiet", []string{EventKeyCreated}); err != nil {
			t.Fatal(err)
		}
		const backlog = 48
		for i := range backlog {
			emit(t, s, busy, EventKeyCreated, map[string]int{"n": i})
		}
		c.advance(time.Millisecond) // the quiet tenant's event is the newest
		emit(t, s, quiet, EventKeyCreated, nil)
		if n := deliverDue(t, s); n != backlog+1 {
			t.Fatalf("delivered %d, want %d", n, backlog+1)
		}
		mu.Lock()
		defer mu.Unlock()
		at := -1
		for i, p := range order {
			if p == "/quiet" {
				at = i
			}
		}
		if at < 0 || at > 1 {
			t.Fatalf("the quiet tenant's event was request %d of %d; want it among the first 2", at+1, len(order))
		}
	})
}

// TestManyTenantsBacklogsHoldUpAnotherByOneRequestEach: with more tenants waiting than fit in one
// look for due deliveries, a tenant's event still waits for one request of each other tenant,
// not for their backlogs (which stay older than its event all along).
func TestManyTenantsBacklogsHoldUpAnotherByOneRequestEach(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		var (
			mu    sync.Mutex
			order []string
		)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			mu.Lock()
			order = append(order, req.URL.Path)
			mu.Unlock()
			w.WriteHeader(http.StatusOK)
		}))
		t.Cleanup(srv.Close)
		ctx := context.Background()
		const busyTenants, backlog = 20, 3
		for i := range busyTenants {
			tenant := newTenant(t, d, "busy-"+strconv.Itoa(i))
			if _, _, err := s.CreateEndpoint(ctx, tenant, srv.URL+"/busy", []string{EventKeyCreated}); err != nil {
				t.Fatal(err)
			}
			for j := range backlog {
				emit(t, s, tenant, EventKeyCreated, map[string]int{"n": j})
			}
		}
		quiet := newTenant(t, d, "quiet")
		if _, _, err := s.CreateEndpoint(ctx, quiet, srv.URL+"/quiet", []string{EventKeyCreated}); err != nil {
			t.Fatal(err)
		}
		c.advance(time.Millisecond) // the quiet tenant's event is the newest
		emit(t, s, quiet, EventKeyCreated, nil)
		if n := deliverDue(t, s); n != busyTenants*backlog+1 {
			t.Fatalf("delivered %d, want %d", n, busyTenants*backlog+1)
		}
		mu.Lock()
		defer mu.Unlock()
		if at := slices.Index(order, "/quiet"); at < 0 || at > busyTenants {
			t.Fatalf("the quiet tenant's event was request %d of %d; want it within the first %d (one per other tenant, then it)", at+1, len(order), busyTenants+1)
		}
	})
}

// TestADeliveryFallingDueDuringAPassTakesItsTurn: a tenant's delivery that falls due while the
// dispatcher works through another tenant's backlog (a retry, an event written meanwhile) waits
// for one of the other tenant's requests, not for the rest of what was due when the pass began:
// with a receiver that never answers, each of those costs the whole request timeout.
func TestADeliveryFallingDueDuringAPassTakesItsTurn(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		busy, quiet := newTenant(t, d, "busy"), newTenant(t, d, "quiet")
		var (
			mu    sync.Mutex
			order []string
		)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			mu.Lock()
			order = append(order, req.URL.Path)
			mu.Unlock()
			if req.URL.Path == "/busy" {
				c.advance(requestTimeout) // the busy tenant's receiver takes as long as it may
			}
			w.WriteHeader(http.StatusOK)
		}))
		t.Cleanup(srv.Close)
		ctx := context.Background()
		if _, _, err := s.CreateEndpoint(ctx, busy, srv.URL+"/busy", []string{EventKeyCreated}); err != nil {
			t.Fatal(err)
		}
		quietEndpoint, _, err := s.CreateEndpoint(ctx, quiet, srv.URL+"/quiet", []string{EventKeyCreated})
		if err != nil {
			t.Fatal(err)
		}
		const backlog = 16
		for i := range backlog {
			emit(t, s, busy, EventKeyCreated, map[string]int{"n": i})
		}
		// The quiet tenant's retry falls due a second after the pass begins.
		now := c.now().UnixMilli()
		outboxRows(t, d, quietEndpoint, []deliveryRow{{ID: "quiet-retry", CreatedAt: now - 5000, Attempts: 1, NextAttemptAt: now + 1000}})
		if n := deliverDue(t, s); n != backlog+1 {
			t.Fatalf("delivered %d, want %d", n, backlog+1)
		}
		mu.Lock()
		defer mu.Unlock()
		at := slices.Index(order, "/quiet")
		if at < 0 || at > 1 {
			t.Fatalf("the quiet tenant's retry was request %d of %d; want it second, after the busy request during which it fell due", at+1, len(order))
		}
	})
}

// outboxRows writes deliveries of endpoint ep straight into the outbox, as they would be after
// attempts at the times they name.
func outboxRows(t *testing.T, d *db.DB, ep Endpoint, rows []deliveryRow) {
	t.Helper()
	for i := range rows {
		rows[i].TenantID, rows[i].EndpointID, rows[i].Event, rows[i].Payload = ep.TenantID, ep.ID, EventKeyCreated, "{}"
		if rows[i].NextAttemptAt == 0 {
			rows[i].NextAttemptAt = rows[i].CreatedAt
		}
	}
	if err := d.Gorm.CreateInBatches(rows, 200).Error; err != nil {
		t.Fatal(err)
	}
}

func outboxIDs(t *testing.T, d *db.DB, where string, args ...any) []string {
	t.Helper()
	var ids []string
	if err := d.Gorm.Model(&deliveryRow{}).Where(where, args...).Order("id").Pluck("id", &ids).Error; err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestFinishedDeliveriesAreDeletedAfterAWeek: housekeeping deletes what was delivered or given up
// more than KeepFinished ago (however many: it works in batches) and nothing else, above all no
// delivery still waiting.
func TestFinishedDeliveriesAreDeletedAfterAWeek(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		ep, _, err := s.CreateEndpoint(context.Background(), newTenant(t, d, "acme"), "http://127.0.0.1:9/", []string{EventKeyCreated})
		if err != nil {
			t.Fatal(err)
		}
		now := c.now()
		ms := func(ago time.Duration) *int64 { v := now.Add(-ago).UnixMilli(); return &v }
		eightDays := 8 * 24 * time.Hour
		rows := []deliveryRow{
			{ID: "old-delivered", CreatedAt: *ms(eightDays + time.Hour), DeliveredAt: ms(eightDays)},
			{ID: "old-given-up", CreatedAt: *ms(eightDays + retryWindow), GivenUpAt: ms(eightDays)},
			{ID: "recent-delivered", CreatedAt: *ms(eightDays), DeliveredAt: ms(KeepFinished - time.Minute)},
			{ID: "recent-given-up", CreatedAt: *ms(eightDays), GivenUpAt: ms(KeepFinished - time.Minute)},
			{ID: "old-waiting", CreatedAt: *ms(eightDays), NextAttemptAt: now.UnixMilli()},
		}
		for i := range 3*housekeepingBatch + 7 {
			rows = append(rows, deliveryRow{ID: "bulk-" + strconv.Itoa(i), CreatedAt: *ms(eightDays), DeliveredAt: ms(eightDays)})
		}
		outboxRows(t, d, ep, rows)
		if err := s.housekeep(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := outboxIDs(t, d, "endpoint_id = ?", ep.ID)
		if want := []string{"old-waiting", "recent-delivered", "recent-given-up"}; !slices.Equal(got, want) {
			t.Fatalf("after housekeeping the outbox holds %d deliveries, %q first; want %q", len(got), got[:min(len(got), 3)], want)
		}
	})
}

// TestAnEndpointsWaitingDeliveriesAreBounded: past MaxWaitingPerEndpoint waiting deliveries, the
// oldest are given up (and say why in the delivery log); finished deliveries and other
// endpoints' do not count.
func TestAnEndpointsWaitingDeliveriesAreBounded(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		ctx := context.Background()
		tenant := newTenant(t, d, "acme")
		full, _, err := s.CreateEndpoint(ctx, tenant, "http://127.0.0.1:9/full", []string{EventKeyCreated})
		if err != nil {
			t.Fatal(err)
		}
		other, _, err := s.CreateEndpoint(ctx, tenant, "http://127.0.0.1:9/other", []string{EventKeyCreated})
		if err != nil {
			t.Fatal(err)
		}
		start := c.now().UnixMilli()
		delivered := start
		rows := []deliveryRow{{ID: "delivered", CreatedAt: start - 1, DeliveredAt: &delivered}}
		for i := range MaxWaitingPerEndpoint + 3 {
			rows = append(rows, deliveryRow{ID: "full-" + strconv.Itoa(10_000+i), CreatedAt: start + int64(i)})
		}
		outboxRows(t, d, full, rows)
		outboxRows(t, d, other, []deliveryRow{{ID: "other-1", CreatedAt: start}, {ID: "other-2", CreatedAt: start}})
		if err := s.housekeep(ctx); err != nil {
			t.Fatal(err)
		}
		givenUp := outboxIDs(t, d, "given_up_at IS NOT NULL")
		if want := []string{"full-10000", "full-10001", "full-10002"}; !slices.Equal(givenUp, want) {
			t.Fatalf("given up %d deliveries, %q first; want the oldest three: %q", len(givenUp), givenUp[:min(len(givenUp), 3)], want)
		}
		waiting := outboxIDs(t, d, "delivered_at IS NULL AND given_up_at IS NULL AND endpoint_id = ?", full.ID)
		if len(waiting) != MaxWaitingPerEndpoint || waiting[0] != "full-10003" {
			t.Fatalf("%d waiting for the full endpoint, the oldest %q; want %d from full-10003", len(waiting), waiting[0], MaxWaitingPerEndpoint)
		}
		var lastError []string
		d.Gorm.Model(&deliveryRow{}).Where("id = ?", "full-10000").Pluck("last_error", &lastError)
		if len(lastError) != 1 || lastError[0] != outboxFull {
			t.Fatalf("the delivery log does not say why it was given up: %q", lastError)
		}
		if n := len(outboxIDs(t, d, "endpoint_id = ? AND given_up_at IS NULL", other.ID)); n != 2 {
			t.Fatalf("the other endpoint has %d deliveries left, want its 2", n)
		}
	})
}

// TestADeliveryGivenUpWhileInFlightStaysGivenUp: housekeeping gives up the oldest delivery of a
// full endpoint while it is being sent; the attempt's late failure is not recorded over that.
func TestADeliveryGivenUpWhileInFlightStaysGivenUp(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		tenant := newTenant(t, d, "acme")
		var ep Endpoint
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			newer := make([]deliveryRow, MaxWaitingPerEndpoint)
			for i := range newer {
				newer[i] = deliveryRow{ID: "newer-" + strconv.Itoa(i), CreatedAt: c.now().UnixMilli() + 1, NextAttemptAt: c.now().Add(time.Hour).UnixMilli()}
			}
			outboxRows(t, d, ep, newer)
			if err := s.housekeep(context.Background()); err != nil {
				t.Error(err)
			}
			w.WriteHeader(http.StatusInternalServerError)
		}))
		t.Cleanup(srv.Close)
		var err error
		if ep, _, err = s.CreateEndpoint(context.Background(), tenant, srv.URL, []string{EventKeyCreated}); err != nil {
			t.Fatal(err)
		}
		emit(t, s, tenant, EventKeyCreated, nil)
		deliverDue(t, s)
		var row deliveryRow
		if err := d.Gorm.Where("id NOT LIKE ?", "newer-%").Take(&row).Error; err != nil {
			t.Fatal(err)
		}
		if row.GivenUpAt == nil || row.LastError != outboxFull {
			t.Fatalf("the in-flight attempt's failure was recorded over its giving up: %+v", row)
		}
	})
}

// TestADeliveryDeliveredWhileHousekeepingGivesItUpStaysDelivered: housekeeping picks the oldest
// delivery of a full endpoint to give up while a dispatcher's "delivered" is being written; it
// must leave the delivery delivered, not mark it given up as well. PostgreSQL only: there the
// statement picks from a snapshot and waits for the row, while SQLite has one writer at a time.
func TestADeliveryDeliveredWhileHousekeepingGivesItUpStaysDelivered(t *testing.T) {
	d := testkit.Open(t, db.Postgres)
	c := newClock()
	s := newService(t, d, c, true)
	ctx := context.Background()
	ep, _, err := s.CreateEndpoint(ctx, newTenant(t, d, "acme"), "http://127.0.0.1:9/", []string{EventKeyCreated})
	if err != nil {
		t.Fatal(err)
	}
	start := c.now().UnixMilli()
	rows := []deliveryRow{{ID: "oldest", CreatedAt: start - 1}}
	for i := range MaxWaitingPerEndpoint {
		rows = append(rows, deliveryRow{ID: "newer-" + strconv.Itoa(i), CreatedAt: start + int64(i)})
	}
	outboxRows(t, d, ep, rows)

	// The dispatcher's "delivered", written but not yet committed: it holds the row.
	recording := d.Gorm.Begin()
	if err := recording.Exec("UPDATE webhook_deliveries SET delivered_at = ?, last_status = 200 WHERE id = 'oldest'", start).Error; err != nil {
		t.Fatal(err)
	}
	// Housekeeping picks the delivery (it still looks waiting), then waits for its row.
	housekeepBehind(t, ctx, s, d, recording, "the delivery being recorded")
	var row deliveryRow
	if err := d.Gorm.Where("id = ?", "oldest").Take(&row).Error; err != nil {
		t.Fatal(err)
	}
	if row.DeliveredAt == nil || row.GivenUpAt != nil || row.LastError != "" {
		t.Fatalf("a delivery delivered while housekeeping gave it up: delivered %t, given up %t, %q; want delivered only", row.DeliveredAt != nil, row.GivenUpAt != nil, row.LastError)
	}
}

// TestFinishedDeliveriesLeaveTheDueRange: a delivery delivered, given up after its 24 hours, or
// given up past the outbox's bound leaves the range of next_attempt_at the dispatcher looks in
// for due deliveries (its index then reads only waiting deliveries, not the week of finished
// ones the log keeps); a failed one waiting for its retry stays in it.
func TestFinishedDeliveriesLeaveTheDueRange(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		ctx := context.Background()
		tenant := newTenant(t, d, "acme")
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.URL.Path == "/down" {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		}))
		t.Cleanup(srv.Close)
		endpoint := func(path string) Endpoint {
			ep, _, err := s.CreateEndpoint(ctx, tenant, srv.URL+path, []string{EventKeyCreated})
			if err != nil {
				t.Fatal(err)
			}
			return ep
		}
		up, down, full := endpoint("/up"), endpoint("/down"), endpoint("/full")
		now := c.now().UnixMilli()
		outboxRows(t, d, up, []deliveryRow{{ID: "delivered", CreatedAt: now}})
		outboxRows(t, d, down, []deliveryRow{
			{ID: "retried", CreatedAt: now},
			{ID: "given-up-after-24h", CreatedAt: now - retryWindow.Milliseconds() + 1000},
		})
		rows := []deliveryRow{{ID: "given-up-past-the-bound", CreatedAt: now - 1, NextAttemptAt: now + time.Hour.Milliseconds()}}
		for i := range MaxWaitingPerEndpoint {
			rows = append(rows, deliveryRow{ID: "full-" + strconv.Itoa(i), CreatedAt: now + int64(i), NextAttemptAt: now + time.Hour.Milliseconds()})
		}
		outboxRows(t, d, full, rows)
		deliverDue(t, s)
		if err := s.housekeep(ctx); err != nil {
			t.Fatal(err)
		}
		finished := outboxIDs(t, d, "delivered_at IS NOT NULL OR given_up_at IS NOT NULL")
		if want := []string{"delivered", "given-up-after-24h", "given-up-past-the-bound"}; !slices.Equal(finished, want) {
			t.Fatalf("finished deliveries %q, want %q", finished, want)
		}
		aYearOn := c.now().Add(365 * 24 * time.Hour).UnixMilli()
		if inRange := outboxIDs(t, d, "next_attempt_at <= ? AND (delivered_at IS NOT NULL OR given_up_at IS NOT NULL)", aYearOn); len(inRange) != 0 {
			t.Fatalf("finished deliveries %q are still in the due range", inRange)
		}
		if waiting := outboxIDs(t, d, "next_attempt_at <= ? AND delivered_at IS NULL AND given_up_at IS NULL", aYearOn); len(waiting) != MaxWaitingPerEndpoint+1 {
			t.Fatalf("%d waiting deliveries in the due range, want %d", len(waiting), MaxWaitingPerEndpoint+1)
		}
	})
}

// TestTheOutboxIsKeptWhileDeliveriesKeepFallingDue: the dispatcher runs while deliveries never
// stop falling due (each request takes the whole request timeout, and an event comes in during
// each), so its pass never finds nothing due. A delivery finished just under KeepFinished ago
// must still be deleted once its week is over: housekeeping goes on during the pass.
func TestTheOutboxIsKeptWhileDeliveriesKeepFallingDue(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s, err := NewService(d, sealKey, Options{AllowPrivate: true, Now: c.now, Interval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		tenant := newTenant(t, d, "acme")
		// Housekeeping that runs every housekeepingEvery deletes the old delivery within two of
		// them; far beyond that, the pass is taken to have stopped housekeeping.
		maxRequests := int(10 * housekeepingEvery / requestTimeout)
		var (
			requests int
			pruned   bool
			done     = make(chan struct{})
		)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			defer w.WriteHeader(http.StatusOK)
			select {
			case <-done:
				return // the test is over: no more events, so the pass ends
			default:
			}
			c.advance(requestTimeout)
			requests++
			var left int64
			if err := d.Gorm.Model(&deliveryRow{}).Where("id = ?", "finished-last-week").Count(&left).Error; err != nil {
				t.Error(err)
			}
			if pruned = left == 0; pruned || requests >= maxRequests {
				close(done)
				return
			}
			err := s.db.Serializable(context.Background(), func(tx *gorm.DB) error { return s.Enqueue(tx, tenant, EventKeyCreated, nil) })
			if err != nil {
				t.Error(err)
			}
		}))
		t.Cleanup(srv.Close)
		ep, _, err := s.CreateEndpoint(context.Background(), tenant, srv.URL, []string{EventKeyCreated})
		if err != nil {
			t.Fatal(err)
		}
		deliveredAt := c.now().Add(-KeepFinished + time.Minute).UnixMilli()
		outboxRows(t, d, ep, []deliveryRow{{ID: "finished-last-week", CreatedAt: deliveredAt - 1000, DeliveredAt: &deliveredAt}})
		emit(t, s, tenant, EventKeyCreated, nil)

		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			_ = s.Run(ctx)
		}()
		<-done
		cancel()
		<-stopped
		if !pruned {
			t.Fatalf("after %d requests (%s), a delivery finished more than %s ago is still in the outbox", requests, time.Duration(requests)*requestTimeout, KeepFinished)
		}
	})
}

// TestADeliveryResentWhileHousekeepingDeletesItStaysResent: housekeeping picks a delivery
// delivered more than KeepFinished ago to delete while an admin's resend of it is being written;
// it must leave the resent delivery waiting (the resend told the admin it would be sent), not
// delete it. PostgreSQL only: there the statement picks from a snapshot and waits for the row,
// while SQLite has one writer at a time.
func TestADeliveryResentWhileHousekeepingDeletesItStaysResent(t *testing.T) {
	d := testkit.Open(t, db.Postgres)
	c := newClock()
	s := newService(t, d, c, true)
	ctx := context.Background()
	ep, _, err := s.CreateEndpoint(ctx, newTenant(t, d, "acme"), "http://127.0.0.1:9/", []string{EventKeyCreated})
	if err != nil {
		t.Fatal(err)
	}
	now := c.now().UnixMilli()
	deliveredAt := c.now().Add(-8 * 24 * time.Hour).UnixMilli()
	outboxRows(t, d, ep, []deliveryRow{{ID: "old", CreatedAt: deliveredAt - 1000, DeliveredAt: &deliveredAt, NextAttemptAt: finishedNextAttempt}})

	// Resend's UPDATE, written but not yet committed: it holds the row.
	resending := d.Gorm.Begin()
	if err := resending.Exec(`UPDATE webhook_deliveries SET next_attempt_at = ?, delivered_at = NULL, given_up_at = NULL, attempts = 0, created_at = ?
		WHERE id = 'old'`, now, now).Error; err != nil {
		t.Fatal(err)
	}
	// Housekeeping picks the delivery (it still looks finished), then waits for its row.
	housekeepBehind(t, ctx, s, d, resending, "the resend being written")
	var rows []deliveryRow
	if err := d.Gorm.Where("id = ?", "old").Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].DeliveredAt != nil || rows[0].NextAttemptAt != now {
		t.Fatalf("a delivery resent while housekeeping deleted it: %+v; want it waiting, due now", rows)
	}
}

// housekeepBehind runs s's housekeeping while holding, an open transaction, holds a delivery's
// row (PostgreSQL): once housekeeping waits for that row's lock (it has picked the row from its
// snapshot), holding commits, and housekeeping then finishes. what names holding's change in a
// failure.
func housekeepBehind(t *testing.T, ctx context.Context, s *Service, d *db.DB, holding *gorm.DB, what string) {
	t.Helper()
	housekept := make(chan error, 1)
	go func() { housekept <- s.housekeep(ctx) }()
	testkit.WaitForLockWaiter(t, d.SQL, 10*time.Second, "housekeeping (behind "+what+")")
	if err := holding.Commit().Error; err != nil {
		t.Fatal(err)
	}
	if err := <-housekept; err != nil {
		t.Fatal(err)
	}
}

// TestLastStatusIsTheLastAttemptsOwn: after an attempt answered HTTP 500, a resend whose attempt
// gets no answer (the receiver drops the connection) leaves no status in the delivery log, not
// the 500 of the attempt before.
func TestLastStatusIsTheLastAttemptsOwn(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		ctx := context.Background()
		tenant := newTenant(t, d, "acme")
		var requests atomic.Int32
		r := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if requests.Add(1) == 1 {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			conn, _, err := http.NewResponseController(w).Hijack() // no answer at all
			if err == nil {
				_ = conn.Close()
			}
		}))
		t.Cleanup(r.Close)
		ep, _, err := s.CreateEndpoint(ctx, tenant, r.URL+"/hooks", []string{EventKeyCreated})
		if err != nil {
			t.Fatal(err)
		}
		emit(t, s, tenant, EventKeyCreated, map[string]string{"keyId": "k1"})
		deliverDue(t, s)
		last := func() Delivery {
			t.Helper()
			ds, err := s.Deliveries(ctx, tenant, ep.ID, 1)
			if err != nil || len(ds) != 1 {
				t.Fatalf("deliveries %v, %v", ds, err)
			}
			return ds[0]
		}
		if got := last(); got.LastStatus == nil || *got.LastStatus != http.StatusInternalServerError {
			t.Fatalf("after the HTTP 500: last status %v, want 500", got.LastStatus)
		}
		if err := s.Resend(ctx, tenant, ep.ID, last().ID); err != nil {
			t.Fatal(err)
		}
		deliverDue(t, s)
		got := last()
		if requests.Load() != 2 || got.LastError == "" || strings.HasPrefix(got.LastError, "HTTP ") {
			t.Fatalf("%d requests, last error %q; want 2, the second without an answer", requests.Load(), got.LastError)
		}
		if got.LastStatus != nil {
			t.Fatalf("after an attempt that got no answer (%q): last status %d, want none", got.LastError, *got.LastStatus)
		}
	})
}

// TestEveryRecordedAttemptIsReportedWithItsOutcome: OnAttempt hears each attempt whose outcome is
// recorded (what sluice_webhook_attempts_total counts): a 2xx delivered, an error failed while the
// delivery has time left to be retried, and given_up once its last try fails.
func TestEveryRecordedAttemptIsReportedWithItsOutcome(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		var mu sync.Mutex
		var outcomes []string
		s, err := NewService(d, sealKey, Options{AllowPrivate: true, Now: c.now, OnAttempt: func(o string) {
			mu.Lock()
			defer mu.Unlock()
			outcomes = append(outcomes, o)
		}})
		if err != nil {
			t.Fatal(err)
		}
		tenant := newTenant(t, d, "acme")
		var fail atomic.Bool
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if fail.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(srv.Close)
		if _, _, err := s.CreateEndpoint(context.Background(), tenant, srv.URL, []string{EventKeyCreated}); err != nil {
			t.Fatal(err)
		}
		emit(t, s, tenant, EventKeyCreated, nil)
		deliverDue(t, s)
		fail.Store(true)
		emit(t, s, tenant, EventKeyCreated, nil)
		deliverDue(t, s)
		c.advance(retryWindow)
		deliverDue(t, s)
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"delivered", "failed", "given_up"}; !slices.Equal(outcomes, want) {
			t.Fatalf("outcomes reported %q, want %q", outcomes, want)
		}
	})
}
