package api_test

import (
	"net/http"
	"testing"

	"github.com/sluice-dev/sluice/internal/api"
)

// A batch holds 1 to MaxBatch limits (the OpenAPI document's maxItems): one more is a 400 on
// the limits field, never decided.
func TestABatchOfOneMoreThanMaxBatchIsRefusedAs400(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", map[string]any{"kind": "token bucket", "rate": 1000, "period": 60000})
		items := func(n int) map[string]any {
			l := make([]any, n)
			for i := range l {
				l[i] = map[string]any{"name": "x", "key": "k"}
			}
			return map[string]any{"limits": l}
		}
		requireJSON(t, h.send(t, http.MethodPost, "/v1/check", a.key, items(api.MaxBatch)), http.StatusOK)
		p := requireProblem(t, h.send(t, http.MethodPost, "/v1/check", a.key, items(api.MaxBatch+1)), http.StatusBadRequest, "invalid_request")
		if p["field"] != "limits" {
			t.Fatalf("problem %v, want field limits", p)
		}
	})
}
