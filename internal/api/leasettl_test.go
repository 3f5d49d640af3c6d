package api_test

import (
	"net/http"
	"testing"
)

// TestLeaseTTLOnlyOnConcurrencyLimits: PUT with a leaseTtl on another kind is refused naming it,
// 0 included (it was stored without it and answered 200), and a concurrency limit's leaseTtl of 0
// is below the document's minimum.
func TestLeaseTTLOnlyOnConcurrencyLimits(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		for _, body := range []string{
			`{"kind":"token bucket","rate":1,"period":1000,"leaseTtl":0}`,
			`{"kind":"fixed window","rate":1,"period":1000,"leaseTtl":0}`,
			`{"kind":"token bucket","rate":1,"period":1000,"leaseTtl":1000}`,
			`{"kind":"concurrency","rate":1,"leaseTtl":0}`,
		} {
			p := requireProblem(t, h.send(t, http.MethodPut, "/v1/limits/lt", a.key, body), http.StatusBadRequest, "invalid_config")
			if p["field"] != "leaseTtl" {
				t.Errorf("%s: field %v, want leaseTtl", body, p["field"])
			}
		}
		requireProblem(t, h.send(t, http.MethodGet, "/v1/limits/lt", a.key, nil), http.StatusNotFound, "limit_not_found")
		p := requireProblem(t, h.send(t, http.MethodPost, "/v1/limits/lt/limit", a.key,
			`{"config":{"kind":"sliding window","rate":1,"period":1000,"leaseTtl":0}}`), http.StatusBadRequest, "invalid_config")
		if p["field"] != "config.leaseTtl" {
			t.Errorf("inline config with leaseTtl 0: field %v, want config.leaseTtl", p["field"])
		}
		requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/lt", a.key, `{"kind":"concurrency","rate":1,"leaseTtl":1}`), http.StatusOK)
	})
}
