package api_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// engineClock is a stopped clock for the engine, moved only by the test.
type engineClock struct{ ms atomic.Int64 }

func (c *engineClock) now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *engineClock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// eachDBWithEngineClock is eachDB with the engine's clock in the test's hands.
func eachDBWithEngineClock(t *testing.T, fn func(t *testing.T, h *harness, clock *engineClock)) {
	t.Helper()
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		clock := &engineClock{}
		clock.ms.Store(time.Now().UnixMilli())
		fn(t, startApp(t, url, app.Options{EngineNow: clock.now}), clock)
	})
}

func holdBody(ttl any, limits ...map[string]any) map[string]any {
	return map[string]any{"limits": limits, "ttl": ttl}
}

// TestHoldsOverHTTP: hold, settle (less, more, overage), release, refusal, expiry, another
// tenant's hold, and every bad input, each answer checked against the OpenAPI document.
func TestHoldsOverHTTP(t *testing.T) {
	eachDBWithEngineClock(t, func(t *testing.T, h *harness, clock *engineClock) {
		a, b := h.newTenant(t, "acme"), h.newTenant(t, "other")
		h.define(t, a.key, "tokens", map[string]any{"kind": "fixed window", "rate": 10, "period": 31536000000, "start": 0})
		h.define(t, a.key, "jobs", map[string]any{"kind": "concurrency", "rate": 1, "leaseTtl": 60000})
		tok := func(key string, count any) map[string]any {
			return map[string]any{"name": "tokens", "key": key, "count": count}
		}

		got := requireJSON(t, h.send(t, http.MethodPost, "/v1/holds", a.key, holdBody(60000, tok("k", 4))), http.StatusCreated)
		id, _ := got["holdId"].(string)
		if !strings.HasPrefix(id, "hold_") || number(t, got, "expiresAt") <= 0 {
			t.Fatalf("hold: %v", got)
		}
		// Counts above 1e15 are refused (1e300 once became an infinite overage whose answer could
		// not be encoded, inside the idempotent close's transaction: every later decision hung).
		for _, body := range []string{`{"counts":[1e16]}`, `{"counts":[1e300]}`} {
			p := requireProblem(t, sendIdemMethod(t, http.MethodPost, h.url, "/v1/holds/"+id+"/settle", a.key, body, "settle-"+body), http.StatusBadRequest, "invalid_request")
			if p["field"] != "counts[0]" {
				t.Fatalf("settle %s: %v, want field counts[0]", body, p)
			}
		}
		got = requireJSON(t, h.send(t, http.MethodPost, "/v1/holds/"+id+"/settle", a.key, map[string]any{"counts": []float64{6}}), http.StatusOK)
		l := got["limits"].([]any)[0].(map[string]any)
		if l["held"] != 4.0 || l["charged"] != 6.0 || l["overage"] != 0.0 || l["key"] != "k" {
			t.Fatalf("settle for more: %v", got)
		}
		requireProblem(t, h.send(t, http.MethodPost, "/v1/holds/"+id+"/settle", a.key, map[string]any{"counts": []float64{6}}), http.StatusConflict, "hold_closed")
		requireProblem(t, h.send(t, http.MethodDelete, "/v1/holds/"+id, a.key, nil), http.StatusConflict, "hold_closed")

		// 4 left: a hold of 2 settled for 7 records an overage of 5 and charges 2.
		id = requireJSON(t, h.send(t, http.MethodPost, "/v1/holds", a.key, holdBody(60000, tok("k", 2))), http.StatusCreated)["holdId"].(string)
		got = requireJSON(t, h.send(t, http.MethodPost, "/v1/holds/"+id+"/settle", a.key, map[string]any{"counts": []float64{7}}), http.StatusOK)
		if l := got["limits"].([]any)[0].(map[string]any); l["overage"] != 5.0 || l["charged"] != 2.0 {
			t.Fatalf("overage: %v", got)
		}
		// 2 left: a hold of 3 is refused like a batch.
		p := requireProblem(t, h.send(t, http.MethodPost, "/v1/holds", a.key, holdBody(60000, tok("k", 3))), http.StatusTooManyRequests, "rate_limited")
		if p["retryAfter"] == nil {
			t.Fatalf("refused hold without retryAfter: %v", p)
		}

		// Released: given back. Another tenant's hold is not found.
		id = requireJSON(t, h.send(t, http.MethodPost, "/v1/holds", a.key, holdBody(60000, tok("r", 5))), http.StatusCreated)["holdId"].(string)
		requireProblem(t, h.send(t, http.MethodDelete, "/v1/holds/"+id, b.key, nil), http.StatusNotFound, "not_found")
		requireProblem(t, h.send(t, http.MethodPost, "/v1/holds/"+id+"/settle", b.key, map[string]any{"counts": []float64{1}}), http.StatusNotFound, "not_found")
		if r := h.send(t, http.MethodDelete, "/v1/holds/"+id, a.key, nil); r.status != http.StatusNoContent {
			t.Fatalf("release: %v", r)
		}
		v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/tokens/value?key=r", a.key, nil), http.StatusOK)
		if v["value"] != 10.0 {
			t.Fatalf("after a release: %v", v)
		}
		requireProblem(t, h.send(t, http.MethodDelete, "/v1/holds/hold_nope", a.key, nil), http.StatusNotFound, "not_found")

		// Expiry by the engine's clock.
		id = requireJSON(t, h.send(t, http.MethodPost, "/v1/holds", a.key, holdBody(1000, tok("x", 1))), http.StatusCreated)["holdId"].(string)
		clock.advance(time.Second)
		requireProblem(t, h.send(t, http.MethodPost, "/v1/holds/"+id+"/settle", a.key, map[string]any{"counts": []float64{1}}), http.StatusConflict, "hold_closed")

		// Bad input: a problem naming the field, nothing held.
		many := make([]map[string]any, 65)
		for i := range many {
			many[i] = tok("m", 0)
		}
		for _, c := range []struct {
			body   any
			status int
			code   string
			field  string
		}{
			{holdBody(1000), 400, "invalid_request", "limits"},
			{holdBody(1000, many...), 400, "invalid_request", "limits"},
			{map[string]any{"limits": []any{tok("m", 1)}}, 400, "invalid_request", "ttl"},
			{holdBody(0, tok("m", 1)), 400, "invalid_request", "ttl"},
			{holdBody(86400001, tok("m", 1)), 400, "invalid_request", "ttl"},
			{holdBody(1000, tok("m", 1), tok("m", -1)), 400, "invalid_request", "limits[1].count"},
			{holdBody(1000, tok("m", 1), map[string]any{"name": "nope", "key": "m"}), 404, "limit_not_found", "limits[1].name"},
			{holdBody(1000, tok("m", 1), map[string]any{"name": "jobs", "key": "m"}), 400, "invalid_config", "limits[1].name"},
			{holdBody(1000, tok("m", 11)), 400, "count_exceeds_capacity", "limits[0].count"},
		} {
			p := requireProblem(t, h.send(t, http.MethodPost, "/v1/holds", a.key, c.body), c.status, c.code)
			if f, _ := p["field"].(string); f != c.field {
				t.Errorf("%v: field %q, want %q", c.body, f, c.field)
			}
		}
		id = requireJSON(t, h.send(t, http.MethodPost, "/v1/holds", a.key, holdBody(60000, tok("m", 1), tok("m", 1))), http.StatusCreated)["holdId"].(string)
		for _, c := range []struct {
			body  any
			field string
		}{{map[string]any{}, "counts"}, {map[string]any{"counts": []float64{1}}, "counts"}, {map[string]any{"counts": []float64{1, 1, 1}}, "counts"},
			// encoding/json reads a null item as 0: the hold would settle as if nothing was used.
			{`{"counts":[null,1]}`, "counts[0]"}, {`{"counts":[1,null]}`, "counts[1]"}} {
			p := requireProblem(t, h.send(t, http.MethodPost, "/v1/holds/"+id+"/settle", a.key, c.body), http.StatusBadRequest, "invalid_request")
			if p["field"] != c.field {
				t.Errorf("settle %v: field %v", c.body, p["field"])
			}
		}
		if v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/tokens/value?key=m", a.key, nil), http.StatusOK); v["value"] != 8.0 {
			t.Fatalf("bad input held something: %v", v)
		}
	})
}

// TestLeasesOverHTTP: a concurrency limit answers a lease, refuses beyond its rate with the
// earliest expiry, and its lease is extended and released; another tenant's lease is not found.
func TestLeasesOverHTTP(t *testing.T) {
	eachDBWithEngineClock(t, func(t *testing.T, h *harness, clock *engineClock) {
		a, b := h.newTenant(t, "acme"), h.newTenant(t, "other")
		def := requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/jobs", a.key, map[string]any{"kind": "concurrency", "rate": 1, "leaseTtl": 60000}), http.StatusOK)
		if def["leaseTtl"] != 60000.0 || def["period"] != nil {
			t.Fatalf("definition: %v", def)
		}
		h.define(t, a.key, "rpm", map[string]any{"kind": "fixed window", "rate": 100, "period": 60000})
		got := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/jobs/limit", a.key, map[string]any{"key": "k"}), http.StatusOK)
		id, _ := got["leaseId"].(string)
		if got["ok"] != true || !strings.HasPrefix(id, "lease_") || number(t, got, "expiresAt") <= 0 {
			t.Fatalf("lease: %v", got)
		}
		// A batch with a rate limit: the concurrency limit refuses, nothing is taken.
		batch := requireJSON(t, h.send(t, http.MethodPost, "/v1/limit", a.key, map[string]any{"limits": []map[string]any{
			{"name": "jobs", "key": "k"}, {"name": "rpm", "key": "k"}}}), http.StatusOK)
		if batch["ok"] != false || number(t, batch, "retryAfter") != 60000 {
			t.Fatalf("batch while the slot is taken: %v", batch)
		}
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/jobs/check", a.key, map[string]any{"key": "k"}), http.StatusOK)
		clock.advance(10 * time.Second)
		ext := requireJSON(t, h.send(t, http.MethodPost, "/v1/leases/"+id+"/extend", a.key, nil), http.StatusOK)
		if number(t, ext, "expiresAt") != number(t, got, "expiresAt")+10000 {
			t.Fatalf("extend by leaseTtl from now: %v, was %v", ext, got)
		}
		requireProblem(t, h.send(t, http.MethodPost, "/v1/leases/"+id+"/release", b.key, nil), http.StatusNotFound, "not_found")
		if r := h.send(t, http.MethodPost, "/v1/leases/"+id+"/release", a.key, nil); r.status != http.StatusNoContent {
			t.Fatalf("release: %v", r)
		}
		requireProblem(t, h.send(t, http.MethodPost, "/v1/leases/"+id+"/release", a.key, nil), http.StatusNotFound, "not_found")
		requireProblem(t, h.send(t, http.MethodPost, "/v1/leases/lease_nope/extend", a.key, nil), http.StatusNotFound, "not_found")
		batch = requireJSON(t, h.send(t, http.MethodPost, "/v1/limit", a.key, map[string]any{"limits": []map[string]any{
			{"name": "jobs", "key": "k"}, {"name": "rpm", "key": "k"}}}), http.StatusOK)
		first := batch["results"].([]any)[0].(map[string]any)
		if batch["ok"] != true || first["leaseId"] == nil {
			t.Fatalf("batch after the release: %v", batch)
		}
		// Expired: extend is 409 lease_closed, and the slot is free.
		clock.advance(60 * time.Second)
		requireProblem(t, h.send(t, http.MethodPost, "/v1/leases/"+first["leaseId"].(string)+"/extend", a.key, nil), http.StatusConflict, "lease_closed")
		if got := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/jobs/limit", a.key, map[string]any{"key": "k"}), http.StatusOK); got["ok"] != true {
			t.Fatalf("after expiry: %v", got)
		}
		// What a concurrency limit does not support.
		requireProblem(t, h.send(t, http.MethodPost, "/v1/limits/jobs/refund", a.key, map[string]any{"key": "k", "count": 1}), http.StatusBadRequest, "invalid_config")
		p := requireProblem(t, h.send(t, http.MethodPost, "/v1/limits/jobs/limit", a.key, map[string]any{"key": "k", "count": 2}), http.StatusBadRequest, "invalid_request")
		if p["field"] != "count" {
			t.Errorf("count 2: %v", p)
		}
		for _, bad := range []map[string]any{
			{"kind": "concurrency", "rate": 2},
			{"kind": "concurrency", "rate": 2, "leaseTtl": 1000, "period": 1000},
			{"kind": "concurrency", "rate": 2, "leaseTtl": 1000, "shards": 2},
		} {
			requireProblem(t, h.send(t, http.MethodPut, "/v1/limits/bad", a.key, bad), http.StatusBadRequest, "invalid_config")
		}
	})
}

// TestAHoldGivesBackWhatItTookWhateverOverrideCameSince: a hold takes 6 of 10; an allow override
// on its key arrives while it is open; the release still gives the 6 back, so the key has all 10
// once the override has expired (it gave back nothing, and leaked the 6, before).
func TestAHoldGivesBackWhatItTookWhateverOverrideCameSince(t *testing.T) {
	eachDBWithEngineClock(t, func(t *testing.T, h *harness, clock *engineClock) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "tokens", map[string]any{"kind": "fixed window", "rate": 10, "period": 31536000000, "start": 0})
		id := requireJSON(t, h.send(t, http.MethodPost, "/v1/holds", a.key, holdBody(60000, map[string]any{"name": "tokens", "key": "v", "count": 6})), http.StatusCreated)["holdId"].(string)
		if v := valueOf(t, h, a.key, "/v1/limits/tokens/value?key=v"); v != 4 {
			t.Fatalf("value after a hold of 6: %v, want 4", v)
		}
		override := map[string]any{"match": "v", "action": "allow", "expiresAt": clock.now().Add(time.Second).UTC().Format(time.RFC3339Nano)}
		requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/tokens/overrides", a.key, override), http.StatusOK)
		if r := h.send(t, http.MethodDelete, "/v1/holds/"+id, a.key, nil); r.status != http.StatusNoContent {
			t.Fatalf("release: %s", r)
		}
		clock.advance(2 * time.Second) // the override has expired
		if v := valueOf(t, h, a.key, "/v1/limits/tokens/value?key=v"); v != 10 {
			t.Fatalf("value after the release and the override's expiry: %v, want 10 (the hold's 6 given back)", v)
		}
	})
}
