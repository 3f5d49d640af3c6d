package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// sendIdem posts body (JSON text) to path with the tenant's key and the given Idempotency-Key
// values (none: no header), and checks the answer against the OpenAPI document.
func sendIdem(t testing.TB, base, path, key string, body string, idemKeys ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for _, k := range idemKeys {
		req.Header.Add(api.IdempotencyKeyHeader, k)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("POST %s: read body: %v", path, err)
	}
	r := response{status: res.StatusCode, header: res.Header, body: raw}
	checkContract(t, request{method: http.MethodPost, target: path, contentType: "application/json", body: []byte(body)}, r)
	return r
}

// requireReplay asserts that again is first replayed: the same status, body and headers, and
// Idempotent-Replayed: true (which first lacks).
func requireReplay(t *testing.T, first, again response) {
	t.Helper()
	if first.header.Get(api.IdempotentReplayedHeader) != "" {
		t.Fatalf("the first answer is marked replayed: %s", first)
	}
	if again.header.Get(api.IdempotentReplayedHeader) != "true" {
		t.Fatalf("the retry lacks Idempotent-Replayed: true: %s", again)
	}
	if again.status != first.status || !bytes.Equal(again.body, first.body) {
		t.Fatalf("retry answered %d %s, want the first answer %d %s", again.status, again.body, first.status, first.body)
	}
	for _, h := range []string{"Content-Type", "RateLimit", "RateLimit-Policy", "Retry-After"} {
		if again.header.Get(h) != first.header.Get(h) {
			t.Fatalf("retry's %s = %q, the first answer's %q", h, again.header.Get(h), first.header.Get(h))
		}
	}
}

// defineFixed defines name: rate per hour in a window that began a second ago (nothing refills
// during a test, so values count consumptions exactly).
func defineFixed(t testing.TB, h *harness, key, name string, rate int) {
	t.Helper()
	h.define(t, key, name, map[string]any{"kind": "fixed window", "rate": rate, "period": 3_600_000, "start": time.Now().UnixMilli() - 1000, "jitter": 5000})
}

func valueOf(t testing.TB, h *harness, key, path string) float64 {
	t.Helper()
	return requireJSON(t, h.send(t, http.MethodGet, path, key, nil), http.StatusOK)["value"].(float64)
}

func TestIdempotencyKeyReplaysTheFirstAnswerOnEveryDecisionRoute(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		defineFixed(t, h, a.key, "api", 10)
		one := func(body string, keys ...string) response {
			return sendIdem(t, h.url, "/v1/limits/api/limit", a.key, body, keys...)
		}

		first := one(`{"key":"alice","count":3}`, "order-1")
		if first.status != http.StatusOK {
			t.Fatalf("first attempt: %s", first)
		}
		requireReplay(t, first, one(`{"key":"alice","count":3}`, "order-1"))
		requireReplay(t, first, one(`{"key":"alice","count":3}`, "order-1"))
		if v := valueOf(t, h, a.key, "/v1/limits/api/value?key=alice"); v != 7 {
			t.Fatalf("value after three attempts of one request = %v, want 7", v)
		}
		// The same key with another body, or on another route, is 422 and consumes nothing.
		requireProblem(t, one(`{"key":"alice","count":4}`, "order-1"), http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
		requireProblem(t, one(`{"key":"alice", "count":3}`, "order-1"), http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
		requireProblem(t, sendIdem(t, h.url, "/v1/limit", a.key, `{"limits":[{"name":"api","key":"alice","count":3}]}`, "order-1"),
			http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
		if v := valueOf(t, h, a.key, "/v1/limits/api/value?key=alice"); v != 7 {
			t.Fatalf("value after reused keys = %v, want 7", v)
		}
		// Without the header nothing is stored: each request decides.
		one(`{"key":"alice","count":1}`)
		if r := one(`{"key":"alice","count":1}`); r.header.Get(api.IdempotentReplayedHeader) != "" {
			t.Fatalf("a request without Idempotency-Key was replayed: %s", r)
		}
		// A refusal with throws (429, Retry-After with jitter, the first request's ID) replays
		// byte for byte.
		refused := one(`{"key":"alice","count":9,"throws":true}`, "big")
		requireProblem(t, refused, http.StatusTooManyRequests, api.CodeRateLimited)
		requireReplay(t, refused, one(`{"key":"alice","count":9,"throws":true}`, "big"))

		// POST /v1/limit (all or nothing).
		defineFixed(t, h, a.key, "b", 5)
		batch := `{"limits":[{"name":"api","key":"bob"},{"name":"b","key":"bob","count":2}]}`
		firstBatch := sendIdem(t, h.url, "/v1/limit", a.key, batch, "batch-1")
		requireJSON(t, firstBatch, http.StatusOK)
		requireReplay(t, firstBatch, sendIdem(t, h.url, "/v1/limit", a.key, batch, "batch-1"))
		if v := valueOf(t, h, a.key, "/v1/limits/b/value?key=bob"); v != 3 {
			t.Fatalf("batch limit value = %v, want 3", v)
		}

		// POST /v1/decisions: an invalid item keeps its problem, the others are decided once.
		bulk := `{"decisions":[{"name":"api","key":"carol"},{"name":"api","key":"session:x"},{"name":"b","key":"carol","count":4}]}`
		firstBulk := sendIdem(t, h.url, "/v1/decisions", a.key, bulk, "bulk-1")
		var got api.BulkResponse
		if err := json.Unmarshal(requireJSONBody(t, firstBulk), &got); err != nil || len(got.Results) != 3 ||
			got.Results[0].DecisionResponse == nil || got.Results[1].Error == nil || got.Results[2].DecisionResponse == nil {
			t.Fatalf("bulk answer %s (%v)", firstBulk.body, err)
		}
		requireReplay(t, firstBulk, sendIdem(t, h.url, "/v1/decisions", a.key, bulk, "bulk-1"))
		if v := valueOf(t, h, a.key, "/v1/limits/b/value?key=carol"); v != 1 {
			t.Fatalf("bulk item value = %v, want 1", v)
		}
		// An item naming an unknown limit is no decision either (the engine's problem, not
		// stored): its retry is replayed as a whole as well, as one with an invalid item is.
		unknown := `{"decisions":[{"name":"api","key":"dave"},{"name":"nowhere","key":"dave"}]}`
		requireReplay(t, sendIdem(t, h.url, "/v1/decisions", a.key, unknown, "bulk-2"), sendIdem(t, h.url, "/v1/decisions", a.key, unknown, "bulk-2"))
		// Nothing decided, nothing replayed: no header.
		allUnknown := `{"decisions":[{"name":"nowhere","key":"dave"}]}`
		sendIdem(t, h.url, "/v1/decisions", a.key, allUnknown, "bulk-3")
		if r := sendIdem(t, h.url, "/v1/decisions", a.key, allUnknown, "bulk-3"); r.header.Get(api.IdempotentReplayedHeader) != "" {
			t.Fatalf("a retried bulk request that decided nothing is marked replayed: %s", r)
		}
		requireProblem(t, sendIdem(t, h.url, "/v1/decisions", a.key, `{"decisions":[{"name":"api","key":"carol"}]}`, "bulk-1"),
			http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
		if v := valueOf(t, h, a.key, "/v1/limits/api/value?key=carol"); v != 9 {
			t.Fatalf("bulk item value after a reused key = %v, want 9", v)
		}

		// Keys are per tenant: another tenant's order-1 is its own.
		b := h.newTenant(t, "other")
		defineFixed(t, h, b.key, "api", 10)
		if r := sendIdem(t, h.url, "/v1/limits/api/limit", b.key, `{"key":"alice","count":3}`, "order-1"); r.status != http.StatusOK || r.header.Get(api.IdempotentReplayedHeader) != "" {
			t.Fatalf("another tenant's key was taken as acme's: %s", r)
		}
	})
}

func TestMalformedIdempotencyKeyIsRejectedNamingTheHeader(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		defineFixed(t, h, a.key, "api", 10)
		for name, keys := range map[string][]string{
			"empty":       {""},
			"256 chars":   {strings.Repeat("k", 256)},
			"non-ASCII":   {"clé"},
			"given twice": {"a", "b"},
		} {
			for _, path := range []string{"/v1/limits/api/limit", "/v1/limit", "/v1/decisions"} {
				body := map[string]string{"/v1/limits/api/limit": `{"key":"k"}`, "/v1/limit": `{"limits":[{"name":"api","key":"k"}]}`,
					"/v1/decisions": `{"decisions":[{"name":"api","key":"k"}]}`}[path]
				p := requireProblem(t, sendIdem(t, h.url, path, a.key, body, keys...), http.StatusBadRequest, api.CodeInvalidRequest)
				if p["field"] != api.IdempotencyKeyHeader {
					t.Errorf("%s on %s: field %v, want %s", name, path, p["field"], api.IdempotencyKeyHeader)
				}
			}
		}
		// 255 printable characters (spaces and punctuation included) are a key.
		long := strings.Repeat("a~ !", 64)[:255]
		requireJSON(t, sendIdem(t, h.url, "/v1/limits/api/limit", a.key, `{"key":"k"}`, long), http.StatusOK)
		if v := valueOf(t, h, a.key, "/v1/limits/api/value?key=k"); v != 9 {
			t.Fatalf("value = %v, want 9: only the valid key's request consumed", v)
		}
	})
}

// sendAtOnce posts n copies of body to path with the tenant's key and one Idempotency-Key, all
// released at once, alternating between the instances, and returns their answers in order.
func sendAtOnce(t *testing.T, hs []*harness, n int, path, key, body, idemKey string) []response {
	t.Helper()
	out := make([]response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			out[i] = sendIdem(t, hs[i%len(hs)].url, path, key, body, idemKey)
		})
	}
	close(start)
	wg.Wait()
	return out
}

// concurrentHTTPRetries sends 32 copies of one request with one Idempotency-Key at once,
// alternating between the instances, and checks that all got the first answer and the limit
// counted once.
func concurrentHTTPRetries(t *testing.T, hs []*harness, key, idemKey string) {
	t.Helper()
	const n = 32
	out := sendAtOnce(t, hs, n, "/v1/limits/once/limit", key, `{"key":"hot","count":1}`, idemKey)
	fresh := 0
	for i, r := range out {
		if r.status != http.StatusOK {
			t.Fatalf("attempt %d: %s", i, r)
		}
		if r.header.Get(api.IdempotentReplayedHeader) == "" {
			fresh++
		}
		if !strings.Contains(string(r.body), `"remaining":99`) {
			t.Fatalf("attempt %d answered %s, want the first decision (remaining 99)", i, r.body)
		}
	}
	if fresh != 1 {
		t.Fatalf("%d of %d concurrent retries were answered as first attempts, want 1", fresh, n)
	}
	if v := valueOf(t, hs[0], key, "/v1/limits/once/value?key=hot"); v != 99 {
		t.Fatalf("stored value after %d concurrent retries = %v, want 99 (one consumption)", n, v)
	}
}

func TestConcurrentIdempotentRetriesOverHTTPConsumeOnce(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		defineFixed(t, h, a.key, "once", 100)
		concurrentHTTPRetries(t, []*harness{h}, a.key, "retry-me")
	})
}

func TestConcurrentIdempotentRetriesThroughTwoInstancesConsumeOnce(t *testing.T) {
	t.Parallel()
	url := testkit.URL(t, db.Postgres)
	first := newHarness(t, url)
	second := newHarness(t, url)
	a := first.newTenant(t, "acme")
	defineFixed(t, first, a.key, "once", 100)
	for round := range 3 {
		first.send(t, http.MethodPost, "/v1/limits/once/reset", a.key, map[string]any{"key": "hot"})
		concurrentHTTPRetries(t, []*harness{first, second}, a.key, fmt.Sprint("retry-", round))
	}
}

// TestTheStoredAnswerCarriesTheDecidingCallsID: a Sluice-Call-Id sent beside an Idempotency-Key
// is stored with the answer: the first answer carries it, and a replay carries the deciding
// call's, not the retrying one's, so a client tells its own lost attempt's answer from another
// call's (a hold's close alike). Without one the answer carries none; a malformed one is 400.
func TestTheStoredAnswerCarriesTheDecidingCallsID(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", bucket10PerMinute)
		send := func(path, body, key, callID string) response {
			t.Helper()
			req, err := http.NewRequest(http.MethodPost, h.url+path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+a.key)
			req.Header.Set(api.IdempotencyKeyHeader, key)
			if callID != "" {
				req.Header.Set(api.CallIDHeader, callID)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			raw, _ := io.ReadAll(res.Body)
			return response{status: res.StatusCode, header: res.Header, body: raw}
		}
		first := send("/v1/limits/x/limit", `{"key":"u"}`, "k1", "call-A")
		if first.status != http.StatusOK || first.header.Get(api.CallIDHeader) != "call-A" {
			t.Fatalf("the first answer: %s, Sluice-Call-Id %q; want 200 carrying call-A", first, first.header.Get(api.CallIDHeader))
		}
		for _, retry := range []string{"call-A", "call-B", ""} {
			again := send("/v1/limits/x/limit", `{"key":"u"}`, "k1", retry)
			if again.header.Get(api.IdempotentReplayedHeader) != "true" || again.header.Get(api.CallIDHeader) != "call-A" {
				t.Fatalf("a replay asked by call %q: %s, Sluice-Call-Id %q; want the replay carrying call-A", retry, again, again.header.Get(api.CallIDHeader))
			}
		}
		if plain := send("/v1/limits/x/limit", `{"key":"v"}`, "k2", ""); plain.status != http.StatusOK || plain.header.Get(api.CallIDHeader) != "" {
			t.Fatalf("an answer decided without a call ID: %s, Sluice-Call-Id %q; want none", plain, plain.header.Get(api.CallIDHeader))
		}
		hold := send("/v1/holds", `{"limits":[{"name":"x","key":"w","count":1}],"ttl":60000}`, "h1", "call-H")
		if hold.status != http.StatusCreated || hold.header.Get(api.CallIDHeader) != "call-H" {
			t.Fatalf("a hold: %s, Sluice-Call-Id %q; want 201 carrying call-H", hold, hold.header.Get(api.CallIDHeader))
		}
		for _, bad := range []string{"a b", strings.Repeat("x", 65), "é", "a,b"} {
			p := requireProblem(t, send("/v1/limits/x/limit", `{"key":"u"}`, "k3", bad), http.StatusBadRequest, api.CodeInvalidRequest)
			if p["field"] != api.CallIDHeader {
				t.Fatalf("Sluice-Call-Id %q: %v; want 400 naming the header", bad, p)
			}
		}
	})
}
