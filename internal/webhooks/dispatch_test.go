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

// TestASecondDispatcherDoesNotSendWhatTheFirstIsStillWorkingThrough: two instances on one
// database. The first finds 16 deliveries due and sends them one by one, each request taking the
// whole request timeout; while it is on its 7th, the second looks for due deliveries. Each
// delivery must reach the receiver once: a dispatcher holds only the delivery it is sending, so
// the second takes the 9 the first has not started and leaves the 7th alone.
func TestASecondDispatcherDoesNotSendWhatTheFirstIsStillWorkingThrough(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := &clock{}
		c.ms.Store(1_700_000_000_000)
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
		c := &clock{}
		c.ms.Store(1_700_000_000_000)
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
		c := &clock{}
		c.ms.Store(1_700_000_000_000)
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
		c := &clock{}
		c.ms.Store(1_700_000_000_000)
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
		for i := range 3 * claimBatch {
			emit(t, s, busy, EventKeyCreated, map[string]int{"n": i})
		}
		c.advance(time.Millisecond) // the quiet tenant's event is the newest
		emit(t, s, quiet, EventKeyCreated, nil)
		if n := deliverDue(t, s); n != 3*claimBatch+1 {
			t.Fatalf("delivered %d, want %d", n, 3*claimBatch+1)
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
