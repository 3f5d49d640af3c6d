package envoyrls_test

import (
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestConfigurationErrorsAreNotMaskedByAHugeCount: docs/envoy.md says a request with a
// descriptor whose name is invalid, without entries or with is_negative_hits fails with
// INVALID_ARGUMENT (the route's configuration); a visitor-derived hits_addend above 10^15 on an
// earlier descriptor must not turn that into OVER_LIMIT.
func TestConfigurationErrorsAreNotMaskedByAHugeCount(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		h := start(t, url, false)
		h.define(t, "api.user", 10)
		huge := descriptor("user", "alice")
		huge.HitsAddend = wrapperspb.UInt64(1_000_000_000_000_001)
		for name, bad := range map[string]*rlcommon.RateLimitDescriptor{
			"negative hits": {Entries: descriptor("user", "bob").Entries, IsNegativeHits: true},
			"no entries":    {},
			"invalid name":  descriptor("us er", "bob"),
		} {
			for _, order := range [][]*rlcommon.RateLimitDescriptor{{bad, huge}, {huge, bad}} {
				resp, err := h.call(t, "authorization", "Bearer "+h.key, &rls.RateLimitRequest{Domain: "api", Descriptors: order})
				if err == nil {
					t.Errorf("%s (bad descriptor %s): answered %v, want INVALID_ARGUMENT", name, map[bool]string{true: "first", false: "second"}[order[0] == bad], resp.GetOverallCode())
					continue
				}
				requireCode(t, err, codes.InvalidArgument)
			}
		}
	})
}
