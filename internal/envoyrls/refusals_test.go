package envoyrls_test

import (
	"context"
	"testing"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestAStoredLimitThatCannotDecideRefusesTheRequest: a quota an earlier version stored with a
// time zone this binary lacks cannot decide (the JSON API answers 400 invalid_config). Over gRPC
// a request on it, or on a child of it, is refused (OVER_LIMIT, nothing counted), not failed
// with INVALID_ARGUMENT, which an Envoy without failure_mode_deny would let through: the limit
// and its children would be switched off. On both dialects.
func TestAStoredLimitThatCannotDecideRefusesTheRequest(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		h := start(t, url, false)
		ctx := context.Background()
		quota := limiter.Definition{Kind: limiter.Quota, Rate: 5, Calendar: "day", TimeZone: "UTC"}
		if _, _, err := h.app.Engine.PutDefinition(ctx, h.tenantID, "api.org", quota, nil); err != nil {
			t.Fatal(err)
		}
		child := limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 3_600_000,
			Parents: []limiter.Parent{{Name: "api.org", Key: "{org}"}}}
		if _, _, err := h.app.Engine.PutDefinition(ctx, h.tenantID, "api.org.user", child, nil); err != nil {
			t.Fatal(err)
		}
		// What an earlier version could store: a zone name this binary's zone database lacks.
		if err := h.app.DB.Gorm.Exec("UPDATE limit_definitions SET time_zone = 'localtime' WHERE tenant_id = ? AND name = 'api.org'", h.tenantID).Error; err != nil {
			t.Fatal(err)
		}
		for _, req := range []*rls.RateLimitRequest{
			request("api", descriptor("org", "acme")),
			request("api", descriptor("org", "acme", "user", "alice")),
		} {
			resp, err := h.call(t, "authorization", "Bearer "+h.key, req)
			if err != nil {
				t.Fatalf("%v: the call failed (%v): Envoy without failure_mode_deny lets the request through", req.Descriptors[0].Entries, err)
			}
			if resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("%v: %v, want OVER_LIMIT", req.Descriptors[0].Entries, resp)
			}
		}
	})
}

// TestAWaitLongerThanADurationHoldsIsTheLongestDuration: a refusal's retryAfter may be up to
// 10^15 ms (31,700 years); duration_until_reset is a google.protobuf.Duration, which holds at
// most 10,000 years, so a longer wait is that most, never an invalid message.
func TestAWaitLongerThanADurationHoldsIsTheLongestDuration(t *testing.T) {
	h := start(t, "sqlite:"+t.TempDir()+"/sluice.db", false)
	capacity := 1.0 // a token per 100,000 years: the wait is clamped at 10^15 ms
	def := limiter.Definition{Kind: limiter.TokenBucket, Rate: 0.0001, Period: 10 * 365 * 86_400_000, Capacity: &capacity}
	if _, _, err := h.app.Engine.PutDefinition(context.Background(), h.tenantID, "api.user", def, nil); err != nil {
		t.Fatal(err)
	}
	req := request("api", descriptor("user", "alice"))
	h.decide(t, req)
	resp := h.decide(t, req)
	d := resp.Statuses[0].DurationUntilReset
	if resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT || d == nil {
		t.Fatalf("the second request: %v, want OVER_LIMIT with duration_until_reset", resp)
	}
	if err := d.CheckValid(); err != nil || d.Seconds != 315_576_000_000 {
		t.Fatalf("duration_until_reset %v (%v), want the longest valid Duration, 315,576,000,000 s", d, err)
	}
}
