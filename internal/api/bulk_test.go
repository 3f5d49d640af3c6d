package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// bulkResults posts decisions to /v1/decisions and returns the results.
func bulkResults(t testing.TB, h *harness, key string, decisions []map[string]any) []map[string]any {
	t.Helper()
	r := h.send(t, http.MethodPost, "/v1/decisions", key, map[string]any{"decisions": decisions})
	body := requireJSON(t, r, http.StatusOK)
	raw, _ := json.Marshal(body["results"])
	var out []map[string]any
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != len(decisions) {
		t.Fatalf("results %s (%v), want %d", raw, err, len(decisions))
	}
	return out
}

// TestBulkDecidesEachItemOnItsOwnInOrder: a bad item gets its own problem and the others are
// decided, in order, each seeing the consumption of the ones before it.
func TestBulkDecidesEachItemOnItsOwnInOrder(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", map[string]any{"kind": "fixed window", "rate": 3, "period": 3_600_000})
		res := bulkResults(t, h, a.key, []map[string]any{
			{"name": "x", "key": "alice"},
			{"name": "nope", "key": "alice"},
			{"name": "x", "key": "alice", "count": -1},
			{"name": "x", "key": "alice", "count": 2},
			{"name": "x", "key": "alice"},
			{"name": "inline", "config": map[string]any{"kind": "token bucket", "rate": 1, "period": 60_000}},
			{"name": "x", "session": "AAAAAAAAAAAAAAAAAAAAAA"},
			{"name": "nope", "session": "AAAAAAAAAAAAAAAAAAAAAA"},
		})
		want := []struct {
			ok        any
			remaining float64
			code      string
			field     string
		}{
			{true, 2, "", ""},
			{nil, 0, api.CodeLimitNotFound, ""},
			{nil, 0, api.CodeInvalidRequest, "decisions[2].count"},
			{true, 0, "", ""},
			{false, 0, "", ""},
			{true, 0, "", ""},
			{nil, 0, api.CodeSessionNotAuthorized, "decisions[6].session"},
			{nil, 0, api.CodeLimitNotFound, "decisions[7].name"},
		}
		for i, w := range want {
			r := res[i]
			if w.code != "" {
				p, _ := r["error"].(map[string]any)
				if p == nil || p["code"] != w.code || (w.field != "" && p["field"] != w.field) || r["ok"] != nil {
					t.Errorf("result %d = %v, want the problem %s %s", i, r, w.code, w.field)
				}
				continue
			}
			if r["ok"] != w.ok || r["error"] != nil || r["remaining"] != w.remaining {
				t.Errorf("result %d = %v, want ok %v remaining %v", i, r, w.ok, w.remaining)
			}
		}
		if v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/x/value?key=alice", a.key, nil), http.StatusOK); number(t, v, "value") != 0 {
			t.Fatalf("x after the bulk = %v, want 0 (1 + 2 consumed, the refusal wrote nothing)", v)
		}
	})
}

func TestBulkRefusesAWholeBodyThatIsWrong(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		one := map[string]any{"name": "x"}
		tooMany := make([]map[string]any, api.MaxBulk+1)
		for i := range tooMany {
			tooMany[i] = one
		}
		for name, body := range map[string]any{
			"no items":      map[string]any{"decisions": []any{}},
			"too many":      map[string]any{"decisions": tooMany},
			"not an object": `[]`,
			"unknown field": `{"decisions":[{"name":"x"}],"throws":true}`,
		} {
			if p := requireProblem(t, h.send(t, http.MethodPost, "/v1/decisions", a.key, body), http.StatusBadRequest, api.CodeInvalidRequest); p["code"] == nil {
				t.Errorf("%s: %v", name, p)
			}
		}
		huge := `{"decisions":[{"name":"x","key":"` + strings.Repeat("k", 1<<20) + `"}]}`
		requireProblem(t, h.send(t, http.MethodPost, "/v1/decisions", a.key, huge), http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge)
	})
}

// TestBulkNeverOverAdmitsAcrossInstances: concurrent bulk requests on one key through two
// application instances on one PostgreSQL admit exactly the limit.
func TestBulkNeverOverAdmitsAcrossInstances(t *testing.T) {
	t.Parallel()
	url := testkit.URL(t, db.Postgres)
	first := newHarness(t, url)
	second := newHarness(t, url)
	a := first.newTenant(t, "acme")
	first.define(t, a.key, "x", map[string]any{"kind": "fixed window", "rate": 100, "period": 3_600_000})
	const workers, perBulk, rounds = 8, 25, 2
	var mu sync.Mutex
	admitted, refused := 0, 0
	var wg sync.WaitGroup
	for w := range workers {
		h := first
		if w%2 == 1 {
			h = second
		}
		wg.Go(func() {
			for range rounds {
				items := make([]map[string]any, perBulk)
				for i := range items {
					items[i] = map[string]any{"name": "x", "key": "shared"}
				}
				for _, r := range bulkResults(t, h, a.key, items) {
					mu.Lock()
					switch r["ok"] {
					case true:
						admitted++
					case false:
						refused++
					default:
						t.Errorf("an item failed: %v", r)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if admitted != 100 || admitted+refused != workers*perBulk*rounds {
		t.Fatalf("admitted %d, refused %d of %d decisions on a limit of 100", admitted, refused, workers*perBulk*rounds)
	}
	t.Logf("%d concurrent bulk requests through two instances: %d admitted, %d refused", workers*rounds, admitted, refused)
}
