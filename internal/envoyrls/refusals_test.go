package envoyrls_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// startLogged is start on SQLite with the application's log in out.
func startLogged(t *testing.T, out *testkit.SyncBuffer) *harness {
	t.Helper()
	cfg := apptest.Config(testkit.URL(t, "sqlite"))
	cfg.GRPCAddr = "127.0.0.1:0"
	return startWith(t, cfg, app.Options{Stdout: out})
}

// logLines are the lines of out that contain every one of parts.
func logLines(out *testkit.SyncBuffer, parts ...string) []string {
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestRefusalWarningsAreThrottledPerTenantAndLimit: two tenants whose requests cannot fill a
// parent's key each get their warning within one minute (one tenant's steady broken traffic does
// not silence the other's), once each however many requests; the warning names the tenant and the
// descriptor's limit (the child), not another descriptor's of the same request.
func TestRefusalWarningsAreThrottledPerTenantAndLimit(t *testing.T) {
	t.Parallel()
	var out testkit.SyncBuffer
	h := startLogged(t, &out)
	h.defineOrgAndUser(t)
	ctx := context.Background()
	other, err := h.app.Tenants.CreateTenant(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, err := h.app.Tenants.CreateKey(ctx, other.ID, tenants.KindSecret, "tests", "test")
	if err != nil {
		t.Fatal(err)
	}
	(&harness{app: h.app, tenantID: other.ID}).defineOrgAndUser(t)
	// The second descriptor's empty org cannot fill api.org.user's parent key "{org}".
	req := request("api", descriptor("org", "acme"), descriptor("org", "", "user", "alice"))
	for _, key := range []string{h.key, h.key, h.key, otherKey, otherKey} {
		resp, err := h.call(t, "authorization", "Bearer "+key, req)
		if err != nil || resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%v, %v: want OVER_LIMIT", resp, err)
		}
	}
	all := logLines(&out, "cannot fill a parent's key")
	for _, tenant := range []int64{h.tenantID, other.ID} {
		if got := logLines(&out, "cannot fill a parent's key", fmt.Sprintf("tenant=%d ", tenant), "limit=api.org.user "); len(got) != 1 {
			t.Fatalf("warnings %q: want one naming tenant=%d and limit=api.org.user", all, tenant)
		}
	}
	if len(all) != 2 {
		t.Fatalf("warnings %q: want two, one per tenant", all)
	}
}

// TestAStoredLimitThatCannotDecideRefusesTheRequest: a quota an earlier version stored with a
// time zone this binary lacks cannot decide (the JSON API answers 400 invalid_config). Over gRPC
// a request on it, or on a child of it, is refused (OVER_LIMIT, nothing counted), not failed
// with INVALID_ARGUMENT, which an Envoy without failure_mode_deny would let through: the limit
// and its children would be switched off. On both dialects.
func TestAStoredLimitThatCannotDecideRefusesTheRequest(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		cfg := apptest.Config(url)
		cfg.GRPCAddr = "127.0.0.1:0"
		var out testkit.SyncBuffer
		h := startWith(t, cfg, app.Options{Stdout: &out})
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
		// One warning for each limit refused, naming the tenant, within the same minute.
		for _, limit := range []string{"api.org", "api.org.user"} {
			if got := logLines(&out, "cannot decide", fmt.Sprintf("tenant=%d ", h.tenantID), "limit="+limit+" "); len(got) != 1 {
				t.Fatalf("warnings %q: want one naming limit=%s", logLines(&out, "cannot decide"), limit)
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
