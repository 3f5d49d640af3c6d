package api_test

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/sluice-dev/sluice/internal/api"
)

// TestLimiterErrorsAnswerTheSameProblemBodies pins, byte for byte, the problem bodies of the
// errors the limiter returns (its own sentinels, and validation that only the engine does),
// whatever type carries them from the limiter to ProblemFor.
func TestLimiterErrorsAnswerTheSameProblemBodies(t *testing.T) {
	problem := func(status int, code, title, detail, field string, errs ...api.FieldProblem) api.Problem {
		return api.Problem{Type: "urn:sluice:problem:" + code, Title: title, Status: status, Detail: detail, Code: code, Field: field, Errors: errs}
	}
	cases := []struct {
		name, method, path string
		body               any
		want               api.Problem
	}{
		{"unknown limit", "POST", "/v1/limits/nope/limit", `{}`,
			problem(404, "limit_not_found", "Limit not found", "no such limit", "")},
		{"config with stored definition", "POST", "/v1/limits/x/limit", map[string]any{"config": bucket10PerMinute},
			problem(409, "definition_exists", "Definition exists", "a stored definition exists for this name; omit config", "config")},
		{"count over capacity", "POST", "/v1/check", `{"limits":[{"name":"x","count":11}]}`,
			problem(400, "count_exceeds_capacity", "Count exceeds capacity", "count is more than this limit can ever admit at once", "limits[0].count")},
		{"count beyond every bound", "POST", "/v1/limits/x/limit", `{"count":1e16}`,
			problem(400, "invalid_request", "Invalid request", "count: must be a number >= 0 and <= 1e+15", "count",
				api.FieldProblem{Field: "count", Detail: "must be a number >= 0 and <= 1e+15"})},
		{"reserve on a sliding window", "POST", "/v1/limits/sw/limit", `{"reserve":true}`,
			problem(400, "invalid_request", "Invalid request", "reserve: sliding windows cannot reserve", "reserve",
				api.FieldProblem{Field: "reserve", Detail: "sliding windows cannot reserve"})},
		{"invalid definition", "PUT", "/v1/limits/y", `{"kind":"token bucket","rate":-1,"period":0}`,
			problem(400, "invalid_config", "Invalid limit configuration",
				"rate: must be a number > 0 and <= 1e+15; period: must be a whole number of milliseconds > 0 and <= 316224000000", "rate",
				api.FieldProblem{Field: "rate", Detail: "must be a number > 0 and <= 1e+15"},
				api.FieldProblem{Field: "period", Detail: "must be a whole number of milliseconds > 0 and <= 316224000000"})},
	}
	requestID := regexp.MustCompile(`,"requestId":"[^"]*"`)
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", bucket10PerMinute)
		h.define(t, a.key, "sw", map[string]any{"kind": "sliding window", "rate": 10, "period": 60000})
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := h.send(t, tc.method, tc.path, a.key, tc.body)
				want, _ := json.Marshal(tc.want)
				if got := requestID.ReplaceAll(r.body, nil); r.status != tc.want.Status || string(got) != string(want) {
					t.Fatalf("got %d %s\nwant %d %s", r.status, got, tc.want.Status, want)
				}
				if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
					t.Fatalf("Content-Type %q", ct)
				}
			})
		}
	})
}
