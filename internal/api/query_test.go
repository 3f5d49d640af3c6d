package api

import (
	"slices"
	"testing"
)

// TestEveryQueryParameterAHandlerReadsIsTheDocuments: the query check takes its list from the
// document, so a parameter a handler reads and the document leaves out would be refused; these
// are every c.Query and c.GetQuery of the handlers, by route.
func TestEveryQueryParameterAHandlerReadsIsTheDocuments(t *testing.T) {
	for route, params := range map[string][]string{
		"GET /v1/limits/:name/value":        {"key"},
		"GET /v1/limits/:name/overrides":    {"limit", "after"},
		"DELETE /v1/limits/:name/overrides": {"match"},
		"GET /v1/captcha/challenge":         {"pk", "sid"},
		"OPTIONS /v1/captcha/challenge":     {"pk", "sid"},
		"GET /v1/webhooks/:id/deliveries":   {"limit"},
	} {
		got, ok := queryParams[route]
		if !ok {
			t.Errorf("%s: no such operation in the document", route)
			continue
		}
		for _, p := range params {
			if !slices.Contains(got, p) {
				t.Errorf("%s: the document gives %v, without %q, which its handler reads", route, got, p)
			}
		}
	}
	if got := queryParams["POST /v1/limits/:name/limit"]; len(got) != 0 {
		t.Errorf("POST /v1/limits/:name/limit takes query parameters %v, want none (Idempotency-Key is a header)", got)
	}
}
