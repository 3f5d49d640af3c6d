package sluice_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// TestInvalidUTF8AndDotNamesAreRefusedBeforeSending: encoding/json would send a key's invalid
// bytes as U+FFFD, so that "u\xff" and "u\xfe" would share one bucket; such keys, sessions and
// attributes are ErrInvalidArgument, as are the limit names "." and ".." (dot segments of a URL's
// path), whatever the fail policy.
func TestInvalidUTF8AndDotNamesAreRefusedBeforeSending(t *testing.T) {
	ctx := testCtx(t)
	gone := sluice.New("http://127.0.0.1:1", secretKey, sluice.WithFailPolicy(sluice.FailOpen), sluice.WithTimeout(time.Second))
	for _, tc := range []struct {
		name string
		d    sluice.Decision
	}{
		{"ok", sluice.Decision{Key: "u\xff"}},
		{"ok", sluice.Decision{Session: "s\xfe"}},
		{"ok", sluice.Decision{Attributes: map[string]string{"org": "\xff"}}},
		{".", sluice.Decision{}},
		{"..", sluice.Decision{}},
	} {
		if _, err := gone.Limit(ctx, tc.name, tc.d); !errors.Is(err, sluice.ErrInvalidArgument) {
			t.Errorf("Limit(%q, %+v) = %v, want ErrInvalidArgument", tc.name, tc.d, err)
		}
		if res, err := gone.Bulk(ctx, []sluice.Item{{Name: tc.name, Decision: tc.d}}); err != nil || !errors.Is(res[0].Err, sluice.ErrInvalidArgument) {
			t.Errorf("Bulk with %q, %+v: %+v, %v; want the item's ErrInvalidArgument", tc.name, tc.d, res, err)
		}
	}
	if _, err := gone.Refund(ctx, "ok", sluice.Refund{Key: "u\xff", Count: 1}); !errors.Is(err, sluice.ErrInvalidArgument) {
		t.Errorf("Refund: %v", err)
	}
	if _, err := gone.Hold(ctx, []sluice.HoldItem{{Name: "ok", Key: "u\xff", Count: 1}}, time.Minute); !errors.Is(err, sluice.ErrInvalidArgument) {
		t.Errorf("Hold: %v", err)
	}
	if err := gone.Reset(ctx, "ok", "u\xff"); !errors.Is(err, sluice.ErrInvalidArgument) {
		t.Errorf("Reset: %v", err)
	}
	if _, err := gone.Value(ctx, "ok", "u\xff"); !errors.Is(err, sluice.ErrInvalidArgument) {
		t.Errorf("Value: %v", err)
	}
	// An override's match is a key too ("u\xff" would override the U+FFFD key's limit).
	if _, err := gone.PutOverride(ctx, "ok", sluice.Override{Match: "u\xff", Action: sluice.Deny}); !errors.Is(err, sluice.ErrInvalidArgument) {
		t.Errorf("PutOverride: %v", err)
	}
	if err := gone.DeleteOverride(ctx, "ok", "u\xff"); !errors.Is(err, sluice.ErrInvalidArgument) {
		t.Errorf("DeleteOverride: %v", err)
	}
}

// TestBulkItemsSluiceCouldNotDecideFollowTheFailPolicy: an item answered with a 5xx problem of
// its own follows the FailPolicy, as the batched Limit's item does; a 4xx item stays an error.
// The server is a fake: the real one cannot be made to fail one item with a 503 on demand.
func TestBulkItemsSluiceCouldNotDecideFollowTheFailPolicy(t *testing.T) {
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"results":[` +
			`{"error":{"type":"about:blank","title":"Service Unavailable","status":503,"code":"unavailable","detail":"try later"}},` +
			`{"ok":true,"retryAfter":null,"remaining":4,"name":"b","key":"k"},` +
			`{"error":{"type":"about:blank","title":"Bad Request","status":400,"code":"invalid_request","detail":"no","field":"decisions[2].key"}}]}`))
	}))
	defer fake.Close()
	ctx := testCtx(t)
	items := []sluice.Item{{Name: "a", Decision: sluice.Decision{Key: "k"}}, {Name: "b", Decision: sluice.Decision{Key: "k"}}, {Name: "c", Decision: sluice.Decision{Key: "k"}}}

	open, err := sluice.New(fake.URL, "sk", sluice.WithFailPolicy(sluice.FailOpen)).Bulk(ctx, items)
	if err != nil || len(open) != 3 {
		t.Fatalf("fail open: %+v, %v", open, err)
	}
	if open[0].Err != nil || !open[0].OK || !open[0].Degraded || open[0].Name != "a" {
		t.Errorf("fail open, the 503 item: %+v", open[0])
	}
	if open[1].Err != nil || !open[1].OK || open[1].Degraded || open[1].Remaining != 4 {
		t.Errorf("fail open, the decided item: %+v", open[1])
	}
	if e := asError(t, open[2].Err); e.Status != http.StatusBadRequest {
		t.Errorf("fail open, the 400 item: %+v", open[2])
	}

	closed, err := sluice.New(fake.URL, "sk").Bulk(ctx, items)
	if err != nil || len(closed) != 3 {
		t.Fatalf("fail closed: %+v, %v", closed, err)
	}
	if e := asError(t, closed[0].Err); e.Status != http.StatusServiceUnavailable || closed[0].Degraded {
		t.Errorf("fail closed, the 503 item: %+v", closed[0])
	}
}

// TestRetriedDeletesWhoseFirstAnswerWasLostSucceed: when the answer of a delete Sluice carried
// out is lost (the connection dropped, or a proxy's 503 page instead), the retry finds nothing
// (404); the delete did what was asked, so it succeeds. Against the real server, through a proxy
// that loses the first answer (losingFront). A first attempt answered 404 is still an error.
func TestRetriedDeletesWhoseFirstAnswerWasLostSucceed(t *testing.T) {
	ctx := testCtx(t)
	direct := newClient(t)
	front, url := newLosingFront(t)
	c := sluice.New(url, secretKey, sluice.WithBackoff(time.Millisecond, time.Millisecond))
	name := limitName(t, "deleted")

	putLimit(t, direct, name, 5)
	if _, err := direct.PutOverride(ctx, name, sluice.Override{Match: "vip", Action: sluice.Allow}); err != nil {
		t.Fatal(err)
	}
	front.loseNextBy(lossDrop)
	if err := c.DeleteOverride(ctx, name, "vip"); err != nil || front.seen.Load() != 2 {
		t.Fatalf("DeleteOverride with its answer lost: %v (%d attempts)", err, front.seen.Load())
	}
	front.loseNextBy(lossPage)
	if err := c.Delete(ctx, name); err != nil || front.seen.Load() != 2 {
		t.Fatalf("Delete with its answer lost: %v (%d attempts)", err, front.seen.Load())
	}
	hook, _, err := direct.CreateWebhook(ctx, "http://127.0.0.1:1/hook", []string{sluice.EventLimitRefusals}, sluice.WithRefusalThreshold(7))
	if err != nil || hook.RefusalThreshold != 7 {
		t.Fatalf("create a webhook with a refusal threshold: %+v, %v", hook, err)
	}
	front.loseNextBy(lossDrop)
	if err := c.DeleteWebhook(ctx, hook.ID); err != nil || front.seen.Load() != 2 {
		t.Fatalf("DeleteWebhook with its answer lost: %v (%d attempts)", err, front.seen.Load())
	}

	if e := asError(t, c.Delete(ctx, name)); e.Code != sluice.CodeLimitNotFound {
		t.Fatalf("a first attempt answered 404: %+v", e)
	}
}

// TestARetriedDeleteAnswered404AfterA503IsAnError: Sluice's own 503 means it did nothing, so the
// retry's 404 says the thing never existed (or is gone by another's hand): an error, as a first
// answer of 404 is. The server is a fake: the real one cannot be made to answer 503 on demand.
func TestARetriedDeleteAnswered404AfterA503IsAnError(t *testing.T) {
	var calls atomic.Int32
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"code":"unavailable","detail":"try later"}`))
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"type":"about:blank","title":"Not Found","status":404,"code":"limit_not_found","detail":"no such limit"}`))
	}))
	defer fake.Close()
	c := sluice.New(fake.URL, "sk", sluice.WithBackoff(time.Millisecond, time.Millisecond))
	if e := asError(t, c.Delete(testCtx(t), "never")); e.Code != sluice.CodeLimitNotFound || calls.Load() != 2 {
		t.Fatalf("a 503, then 404: %+v after %d attempts; want limit_not_found after 2", e, calls.Load())
	}
}
