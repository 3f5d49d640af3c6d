package api_test

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/api"
)

// TestAValueOfTheWrongTypeIsNamedByItsFullPath: a member of the wrong type inside an array is
// named with its item's index (encoding/json alone says "limits.key", which does not say which
// item), and a whole number written with a fraction or exponent says so instead of "out of range".
func TestAValueOfTheWrongTypeIsNamedByItsFullPath(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", bucket10PerMinute)
		cases := []struct {
			name, method, path, body, code, field, detail string
		}{
			{"a batch item's key", "POST", "/v1/limit", `{"limits":[{"name":"x","key":"a"},{"name":"x","key":1}]}`,
				api.CodeInvalidRequest, "limits[1].key", "limits[1].key must be a string"},
			{"a bulk item's count", "POST", "/v1/decisions", `{"decisions":[{"name":"x"},{"name":"x"},{"name":"x","count":"2"}]}`,
				api.CodeInvalidRequest, "decisions[2].count", "decisions[2].count must be a number"},
			{"an inline config's period in a batch", "POST", "/v1/check", `{"limits":[{"name":"x"},{"name":"y","config":{"kind":"token bucket","rate":1,"period":1.5}}]}`,
				api.CodeInvalidConfig, "limits[1].config.period", "whole number written without a decimal point"},
			{"a definition's period written 60000.0", "PUT", "/v1/limits/y", `{"kind":"token bucket","rate":1,"period":60000.0}`,
				api.CodeInvalidConfig, "period", "period must be a whole number written without a decimal point or exponent"},
			{"a definition's period written 6e4", "PUT", "/v1/limits/y", `{"kind":"token bucket","rate":1,"period":6e4}`,
				api.CodeInvalidConfig, "period", "period must be a whole number"},
			// Numbers out of their field's range, named by their item too.
			{"a batch item's count out of range", "POST", "/v1/limit", `{"limits":[{"name":"x"},{"name":"x","count":1e400}]}`,
				api.CodeInvalidRequest, "limits[1].count", "limits[1].count is out of range"},
			{"an inline period out of range in a batch", "POST", "/v1/check", `{"limits":[{"name":"x"},{"name":"y","config":{"kind":"token bucket","rate":1,"period":100000000000000000000}}]}`,
				api.CodeInvalidConfig, "limits[1].config.period", "is out of range"},
			{"a bulk item's count out of range", "POST", "/v1/decisions", `{"decisions":[{"name":"x"},{"name":"x","count":1e400}]}`,
				api.CodeInvalidRequest, "decisions[1].count", "is out of range"},
			{"an override's rate out of range", "PUT", "/v1/limits/x/overrides", `{"match":"k","rate":1e400}`,
				api.CodeInvalidConfig, "rate", "rate is out of range"},
			{"an override's capacity out of range", "PUT", "/v1/limits/x/overrides", `{"match":"k","capacity":1e400}`,
				api.CodeInvalidConfig, "capacity", "capacity is out of range"},
			{"a hold item's count out of range", "POST", "/v1/holds", `{"limits":[{"name":"x","count":1},{"name":"x","count":1e400}],"ttl":1000}`,
				api.CodeInvalidRequest, "limits[1].count", "is out of range"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				p := requireProblem(t, h.send(t, tc.method, tc.path, a.key, tc.body), 400, tc.code)
				if p["field"] != tc.field || !strings.Contains(p["detail"].(string), tc.detail) {
					t.Fatalf("field %q, detail %q; want field %q and a detail with %q", p["field"], p["detail"], tc.field, tc.detail)
				}
			})
		}
	})
}
