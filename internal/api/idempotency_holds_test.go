package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/api"
)

// sendIdemMethod is sendIdem for any method; an empty body sends none.
func sendIdemMethod(t testing.TB, method, base, path, key, body, idemKey string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set(api.IdempotencyKeyHeader, idemKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	r := response{status: res.StatusCode, header: res.Header, body: raw}
	ct := ""
	if body != "" {
		ct = "application/json"
	}
	checkContract(t, request{method: method, target: path, contentType: ct, body: []byte(body)}, r)
	return r
}

// TestIdempotencyKeyOnHoldsAndLeases: a hold, a settle, a release and a lease extension retried
// with their Idempotency-Key replay the first answer and do nothing again (the settle is not
// charged twice, the retried release is not 409 hold_closed); another request under a used key
// is 422; a lease decision retried replays the same lease and takes no second slot.
func TestIdempotencyKeyOnHoldsAndLeases(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "tokens", map[string]any{"kind": "fixed window", "rate": 10, "period": 31536000000, "start": 0})
		h.define(t, a.key, "jobs", map[string]any{"kind": "concurrency", "rate": 1, "leaseTtl": 60000})
		value := func() float64 { return valueOf(t, h, a.key, "/v1/limits/tokens/value?key=k") }

		holdJSON := `{"limits":[{"name":"tokens","key":"k","count":4}],"ttl":60000}`
		first := sendIdemMethod(t, http.MethodPost, h.url, "/v1/holds", a.key, holdJSON, "hold-1")
		if first.status != http.StatusCreated {
			t.Fatalf("hold: %s", first)
		}
		requireReplay(t, first, sendIdemMethod(t, http.MethodPost, h.url, "/v1/holds", a.key, holdJSON, "hold-1"))
		if v := value(); v != 6 {
			t.Fatalf("after a hold of 4 retried: value %v, want 6 (held once)", v)
		}
		var hold struct{ HoldID string }
		if err := json.Unmarshal(first.body, &hold); err != nil || hold.HoldID == "" {
			t.Fatalf("hold body %s: %v", first.body, err)
		}
		requireProblem(t, sendIdemMethod(t, http.MethodPost, h.url, "/v1/holds", a.key, strings.Replace(holdJSON, "4", "5", 1), "hold-1"),
			http.StatusUnprocessableEntity, "idempotency_key_reused")

		settle := `{"counts":[1]}`
		settled := sendIdemMethod(t, http.MethodPost, h.url, "/v1/holds/"+hold.HoldID+"/settle", a.key, settle, "settle-1")
		if settled.status != http.StatusOK {
			t.Fatalf("settle: %s", settled)
		}
		requireReplay(t, settled, sendIdemMethod(t, http.MethodPost, h.url, "/v1/holds/"+hold.HoldID+"/settle", a.key, settle, "settle-1"))
		if v := value(); v != 9 {
			t.Fatalf("after settling for 1, retried: value %v, want 9 (3 given back once)", v)
		}
		// Without the key (or with a new one) a second settle is what it is: the hold is closed.
		requireProblem(t, sendIdemMethod(t, http.MethodPost, h.url, "/v1/holds/"+hold.HoldID+"/settle", a.key, settle, "settle-2"),
			http.StatusConflict, "hold_closed")

		// A release retried replays 204 rather than 409, and gives back once.
		id := requireJSON(t, h.send(t, http.MethodPost, "/v1/holds", a.key, holdBody(60000, map[string]any{"name": "tokens", "key": "k", "count": 2})), http.StatusCreated)["holdId"].(string)
		rel := sendIdemMethod(t, http.MethodDelete, h.url, "/v1/holds/"+id, a.key, "", "release-1")
		again := sendIdemMethod(t, http.MethodDelete, h.url, "/v1/holds/"+id, a.key, "", "release-1")
		if rel.status != http.StatusNoContent || again.status != http.StatusNoContent || again.header.Get(api.IdempotentReplayedHeader) != "true" {
			t.Fatalf("release and its retry: %s / %s", rel, again)
		}
		if v := value(); v != 9 {
			t.Fatalf("after a hold of 2 released twice with one key: value %v, want 9", v)
		}

		// A lease decision retried replays its lease and takes no second slot (rate 1).
		lease := sendIdemMethod(t, http.MethodPost, h.url, "/v1/limits/jobs/limit", a.key, `{"key":"k"}`, "lease-1")
		requireReplay(t, lease, sendIdemMethod(t, http.MethodPost, h.url, "/v1/limits/jobs/limit", a.key, `{"key":"k"}`, "lease-1"))
		var l struct {
			OK      bool
			LeaseID string
		}
		if err := json.Unmarshal(lease.body, &l); err != nil || !l.OK || l.LeaseID == "" {
			t.Fatalf("lease body %s: %v", lease.body, err)
		}
		ext := sendIdemMethod(t, http.MethodPost, h.url, "/v1/leases/"+l.LeaseID+"/extend", a.key, "", "extend-1")
		if ext.status != http.StatusOK {
			t.Fatalf("extend: %s", ext)
		}
		requireReplay(t, ext, sendIdemMethod(t, http.MethodPost, h.url, "/v1/leases/"+l.LeaseID+"/extend", a.key, "", "extend-1"))
		r1 := sendIdemMethod(t, http.MethodPost, h.url, "/v1/leases/"+l.LeaseID+"/release", a.key, "", "lrel-1")
		r2 := sendIdemMethod(t, http.MethodPost, h.url, "/v1/leases/"+l.LeaseID+"/release", a.key, "", "lrel-1")
		if r1.status != http.StatusNoContent || r2.status != http.StatusNoContent || r2.header.Get(api.IdempotentReplayedHeader) != "true" {
			t.Fatalf("lease release and its retry: %s / %s", r1, r2)
		}
		requireProblem(t, sendIdemMethod(t, http.MethodPost, h.url, "/v1/leases/"+l.LeaseID+"/release", a.key, "", "lrel-2"),
			http.StatusNotFound, "not_found")
	})
}

// TestIdempotencyKeysOfClosesAreTheTenants: an Idempotency-Key on a lease's or hold's close is
// the tenant's own, as on every other route: another tenant may use the same key on its own
// closes, and a key this tenant used for a decision is refused on a close (422).
func TestIdempotencyKeysOfClosesAreTheTenants(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a, b := h.newTenant(t, "acme"), h.newTenant(t, "bravo")
		lease := func(key string) string {
			m := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/jobs/limit", key, map[string]any{"key": "k"}), http.StatusOK)
			return m["leaseId"].(string)
		}
		hold := func(key string) string {
			m := requireJSON(t, h.send(t, http.MethodPost, "/v1/holds", key, holdBody(60000, map[string]any{"name": "tok", "key": "k", "count": 1})), http.StatusCreated)
			return m["holdId"].(string)
		}
		for _, tk := range []tenantKey{a, b} {
			h.define(t, tk.key, "jobs", map[string]any{"kind": "concurrency", "rate": 5, "leaseTtl": 60000})
			h.define(t, tk.key, "tok", frozenWindow)
		}
		for _, tk := range []tenantKey{a, b} {
			if r := sendIdemMethod(t, http.MethodPost, h.url, "/v1/leases/"+lease(tk.key)+"/release", tk.key, "", "shared-lease"); r.status != http.StatusNoContent {
				t.Fatalf("%s's release of its own lease under a key another tenant used: %s", tk.tenant, r)
			}
			if r := sendIdemMethod(t, http.MethodDelete, h.url, "/v1/holds/"+hold(tk.key), tk.key, "", "shared-hold"); r.status != http.StatusNoContent {
				t.Fatalf("%s's release of its own hold under a key another tenant used: %s", tk.tenant, r)
			}
		}
		sendIdemMethod(t, http.MethodPost, h.url, "/v1/limits/tok/limit", a.key, `{"key":"z"}`, "decided")
		r := sendIdemMethod(t, http.MethodPost, h.url, "/v1/leases/"+lease(a.key)+"/release", a.key, "", "decided")
		requireProblem(t, r, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	})
}

// TestABulkRequestHoldsItsKeyWhereAnItemStoredNothing: a bulk request whose first item stored no
// answer (an unknown limit) still holds its Idempotency-Key: another request under it is 422 and
// decides nothing, and the bulk request's own retry replays.
func TestABulkRequestHoldsItsKeyWhereAnItemStoredNothing(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "tb", bucket10PerMinute)
		bulk := `{"decisions":[{"name":"nope"},{"name":"tb","key":"k"}]}`
		first := sendIdemMethod(t, http.MethodPost, h.url, "/v1/decisions", a.key, bulk, "bk")
		if first.status != http.StatusOK {
			t.Fatalf("the bulk request: %s", first)
		}
		other := sendIdemMethod(t, http.MethodPost, h.url, "/v1/limits/tb/limit", a.key, `{"key":"other"}`, "bk")
		requireProblem(t, other, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
		if v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/tb/value?key=other", a.key, nil), http.StatusOK)["value"].(float64); v != 10 {
			t.Fatalf("the refused request consumed: value %v, want 10", v)
		}
		again := sendIdemMethod(t, http.MethodPost, h.url, "/v1/decisions", a.key, bulk, "bk")
		if again.status != http.StatusOK || !bytes.Equal(again.body, first.body) {
			t.Fatalf("the bulk request's retry: %s, want the first answer %s", again, first.body)
		}
	})
}
