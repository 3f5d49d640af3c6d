package envoyrls_test

import (
	"context"
	"strconv"
	"testing"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestADenyThatNeverExpiresStatesOneWait: a deny override without expiresAt refuses with a
// retryAfter of 10^15 ms, longer than the 10,000 years duration_until_reset can hold; Retry-After
// is the longest duration_until_reset rounded up (docs/envoy.md), so both say 315,576,000,000 s.
func TestADenyThatNeverExpiresStatesOneWait(t *testing.T) {
	t.Parallel()
	h := start(t, testkit.URL(t, "sqlite"), false)
	h.define(t, "api.user", 10)
	if _, _, err := h.app.Engine.PutOverride(context.Background(), h.tenantID, "api.user",
		limiter.Override{Match: "mallory", Action: limiter.ActionDeny}, nil); err != nil {
		t.Fatal(err)
	}
	resp := h.decide(t, request("api", descriptor("user", "mallory")))
	d := resp.Statuses[0].DurationUntilReset
	if resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT || d == nil {
		t.Fatalf("%v, want OVER_LIMIT with duration_until_reset", resp)
	}
	retry, err := strconv.ParseInt(headers(resp)["retry-after"], 10, 64)
	if err != nil || d.Seconds != 315_576_000_000 || retry != d.Seconds {
		t.Fatalf("duration_until_reset %d s, Retry-After %q: want both 315576000000", d.Seconds, headers(resp)["retry-after"])
	}
}

// TestOverridesMatchTheEscapedKey: a per-key override applies through gRPC to the key the
// descriptor maps to (docs/envoy.md), escaped: the masked address 192.0.2.7/32 is the key
// 192.0.2.7%2F32, and with the path /login it is 192.0.2.7%2F32/%2Flogin, which the prefix
// 192.0.2.7%2F32/* matches. An override written with the raw "/" matches nothing.
func TestOverridesMatchTheEscapedKey(t *testing.T) {
	t.Parallel()
	h := start(t, testkit.URL(t, "sqlite"), false)
	h.define(t, "api.masked_remote_address", 10)
	h.define(t, "api.masked_remote_address.path", 10)
	ctx := context.Background()
	for name, match := range map[string]string{
		"api.masked_remote_address":      "192.0.2.7%2F32",
		"api.masked_remote_address.path": "192.0.2.7%2F32/*",
	} {
		if _, _, err := h.app.Engine.PutOverride(ctx, h.tenantID, name, limiter.Override{Match: match, Action: limiter.ActionDeny}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := h.app.Engine.PutOverride(ctx, h.tenantID, "api.masked_remote_address",
		limiter.Override{Match: "192.0.2.8/32", Action: limiter.ActionDeny}, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req  *rls.RateLimitRequest
		want rls.RateLimitResponse_Code
	}{
		{request("api", descriptor("masked_remote_address", "192.0.2.7/32")), rls.RateLimitResponse_OVER_LIMIT},
		{request("api", descriptor("masked_remote_address", "192.0.2.7/32", "path", "/login")), rls.RateLimitResponse_OVER_LIMIT},
		{request("api", descriptor("masked_remote_address", "192.0.2.8/32")), rls.RateLimitResponse_OK}, // the raw "/" matches nothing
		{request("api", descriptor("masked_remote_address", "192.0.2.9/32", "path", "/login")), rls.RateLimitResponse_OK},
	} {
		if resp := h.decide(t, tc.req); resp.OverallCode != tc.want {
			t.Fatalf("%v: %v, want %v", tc.req.Descriptors[0].Entries, resp, tc.want)
		}
	}
}
