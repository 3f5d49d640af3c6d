package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// thresholdReceiver is a real HTTP receiver that records the type and data of every event.
type thresholdReceiver struct {
	*httptest.Server
	mu  sync.Mutex
	got []map[string]any
}

func newThresholdReceiver(t *testing.T) *thresholdReceiver {
	r := &thresholdReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var p struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		b, _ := io.ReadAll(req.Body)
		_ = json.Unmarshal(b, &p)
		p.Data["type"] = p.Type
		p.Data["path"] = req.URL.Path
		r.mu.Lock()
		r.got = append(r.got, p.Data)
		r.mu.Unlock()
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *thresholdReceiver) events() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.got...)
}

// TestThresholdEventsReachTheReceiverOncePerLimitAndMinute: refusals of a limit that reach an
// endpoint's threshold within a minute raise limit.refusals once per endpoint, limit and minute
// (however many flushes follow), each endpoint by its own threshold; a decision that leaves a key
// below 20 % raises key.near_limit once per key and hour; the events come through the outbox
// to a real local receiver.
func TestThresholdEventsReachTheReceiverOncePerLimitAndMinute(t *testing.T) {
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		var nowMS atomic.Int64
		nowMS.Store(time.Date(2026, 3, 1, 10, 0, 30, 0, time.UTC).UnixMilli())
		clock := func() time.Time { return time.UnixMilli(nowMS.Load()) }
		cfg := apptest.Config(url)
		cfg.WebhookAllowPrivate = true // the receiver is on loopback
		a := apptest.Start(t, cfg, app.Options{Now: clock})
		h := &harness{app: a, db: a.DB, tenants: a.Tenants, engine: a.Engine, router: a.Router, url: a.BaseURL()}
		ctx := context.Background()
		rcv := newThresholdReceiver(t)
		acme := h.newTenant(t, "acme")

		p := requireProblem(t, h.send(t, http.MethodPost, "/v1/webhooks", acme.key,
			map[string]any{"url": rcv.URL, "events": []string{"limit.refusals"}, "refusalThreshold": 0}), http.StatusBadRequest, "invalid_request")
		if p["field"] != "refusalThreshold" {
			t.Fatalf("a zero threshold: problem names %v, want refusalThreshold", p["field"])
		}
		for _, ep := range []struct {
			path      string
			threshold int
		}{{"/low", 3}, {"/high", 5}} {
			created := requireJSON(t, h.send(t, http.MethodPost, "/v1/webhooks", acme.key,
				map[string]any{"url": rcv.URL + ep.path, "events": []string{"limit.refusals", "key.near_limit"}, "refusalThreshold": ep.threshold}), http.StatusCreated)
			if created["refusalThreshold"] != float64(ep.threshold) {
				t.Fatalf("created endpoint: %v", created)
			}
		}
		if r := h.send(t, http.MethodPut, "/v1/limits/api", acme.key, map[string]any{"kind": "token bucket", "rate": 5, "period": 3_600_000}); r.status != http.StatusOK {
			t.Fatalf("PUT: %v", r)
		}
		consume := func(key string, n int) {
			t.Helper()
			for range n {
				if r := h.send(t, http.MethodPost, "/v1/limits/api/limit", acme.key, map[string]any{"key": key}); r.status != http.StatusOK {
					t.Fatalf("limit: %v", r)
				}
			}
		}
		flush := func() {
			t.Helper()
			if err := a.Usage.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		outbox := func() map[string]int {
			t.Helper()
			var rows []struct{ Event, URL string }
			if err := a.DB.Gorm.Raw(`SELECT d.event, e.url FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id`).Scan(&rows).Error; err != nil {
				t.Fatal(err)
			}
			out := map[string]int{}
			for _, r := range rows {
				out[r.URL[len(rcv.URL):]+" "+r.Event]++
			}
			return out
		}
		check := func(step string, want map[string]int) {
			t.Helper()
			got := outbox()
			if len(got) != len(want) {
				t.Fatalf("%s: outbox %v, want %v", step, got, want)
			}
			for k, v := range want {
				if got[k] != v {
					t.Fatalf("%s: outbox %v, want %v", step, got, want)
				}
			}
		}

		consume("alice", 8) // 5 admitted (the fifth leaves 0 of 5: near), 3 refused
		flush()
		check("3 refusals in 10:00", map[string]int{"/low limit.refusals": 1, "/low key.near_limit": 1, "/high key.near_limit": 1})
		consume("alice", 2) // 5 refusals in the minute
		flush()
		check("5 refusals in 10:00", map[string]int{"/low limit.refusals": 1, "/high limit.refusals": 1, "/low key.near_limit": 1, "/high key.near_limit": 1})
		consume("alice", 4) // still 10:00: nothing new
		flush()
		check("9 refusals in 10:00", map[string]int{"/low limit.refusals": 1, "/high limit.refusals": 1, "/low key.near_limit": 1, "/high key.near_limit": 1})
		nowMS.Add(time.Minute.Milliseconds()) // 10:01
		consume("alice", 3)
		flush()
		check("3 refusals in 10:01", map[string]int{"/low limit.refusals": 2, "/high limit.refusals": 1, "/low key.near_limit": 1, "/high key.near_limit": 1})

		if _, err := a.Webhooks.DeliverDue(ctx); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for len(rcv.events()) < 5 {
			if time.Now().After(deadline) {
				t.Fatalf("waited 30 s for the receiver to get the 5 events of the outbox; it got %v", rcv.events())
			}
			if _, err := a.Webhooks.DeliverDue(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var minutes []string
		for _, e := range rcv.events() {
			switch e["type"] {
			case "limit.refusals":
				if e["limit"] != "api" || e["refused"].(float64) < e["threshold"].(float64) {
					t.Fatalf("limit.refusals below its threshold: %v", e)
				}
				if e["path"] == "/low" {
					minutes = append(minutes, e["minute"].(string))
				}
			case "key.near_limit":
				if e["limit"] != "api" || e["key"] != "alice" {
					t.Fatalf("key.near_limit: %v", e)
				}
			default:
				t.Fatalf("unexpected event %v", e)
			}
		}
		if j := strings.Join(minutes, ","); j != "2026-03-01T10:00:00Z,2026-03-01T10:01:00Z" && j != "2026-03-01T10:01:00Z,2026-03-01T10:00:00Z" {
			t.Fatalf("/low heard limit.refusals for minutes %s, want 10:00 and 10:01", j)
		}
	})
}
