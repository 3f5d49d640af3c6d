package envoyrls_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-dev/sluice/internal/envoyrls"
	"github.com/sluice-dev/sluice/internal/limiter"
)

func entries(kv ...string) []*rlcommon.RateLimitDescriptor_Entry {
	return descriptor(kv...).Entries
}

func TestNamesJoinDomainAndEntryKeys(t *testing.T) {
	if got := envoyrls.LimitName("api", entries("remote_address", "10.0.0.1", "path", "/login")); got != "api.remote_address.path" {
		t.Fatalf("name %q, want api.remote_address.path", got)
	}
}

func TestKeysJoinEscapedValuesOneToOne(t *testing.T) {
	for _, c := range []struct {
		kv   []string
		want string
	}{
		{[]string{"user", "alice"}, "alice"},
		{[]string{"ip", "10.0.0.1", "path", "/login"}, "10.0.0.1/%2Flogin"},
		{[]string{"a", "x/y", "b", "z"}, "x%2Fy/z"},
		{[]string{"a", "x", "b", "y/z"}, "x/y%2Fz"},
		{[]string{"a", "100%", "b", "%2F"}, "100%25/%252F"},
		// The prefixes of the keys the API derives itself are out of a descriptor's reach.
		{[]string{"user", "session:0123456789abcdef0123456789abcdef"}, "session%3A0123456789abcdef0123456789abcdef"},
		{[]string{"user", "ip:ab", "path", "/"}, "ip%3Aab/%2F"},
		{[]string{"user", "session%3Ax"}, "session%253Ax"},
		{[]string{"user", "x", "other", "session:y"}, "x/session:y"},
		{[]string{"user", "a\x00b"}, "a%00b"},
		{[]string{"user", ""}, "%empty"},
		{[]string{"user", "", "path", ""}, "/"},
		// A key longer than 256 bytes counts under its digest; 256 bytes are kept as they are.
		{[]string{"user", strings.Repeat("x", 256)}, strings.Repeat("x", 256)},
		{[]string{"user", strings.Repeat("x", 257)}, "%sha256:" + sha256Hex(strings.Repeat("x", 257))},
		{[]string{"user", strings.Repeat("/", 100)}, "%sha256:" + sha256Hex(strings.Repeat("%2F", 100))},
	} {
		if got := envoyrls.LimitKey(entries(c.kv...)); got != c.want {
			t.Errorf("%v: key %q, want %q", c.kv, got, c.want)
		}
	}
}

func TestCurrentLimitUsesTheLongestUnitThatDividesThePeriod(t *testing.T) {
	const (
		sec    = 1000
		minute = 60 * sec
		hour   = 60 * minute
		day    = 24 * hour
	)
	for _, c := range []struct {
		rate       float64
		period     int64
		perUnit    uint32
		unit       rls.RateLimitResponse_RateLimit_Unit
		multiplier uint32 // 0: none
	}{
		{10, sec, 10, rls.RateLimitResponse_RateLimit_SECOND, 0},
		{100, minute, 100, rls.RateLimitResponse_RateLimit_MINUTE, 0},
		{10, 90 * sec, 10, rls.RateLimitResponse_RateLimit_SECOND, 90},
		{5, 2 * hour, 5, rls.RateLimitResponse_RateLimit_HOUR, 2},
		{1000, day, 1000, rls.RateLimitResponse_RateLimit_DAY, 0},
		{3, 14 * day, 3, rls.RateLimitResponse_RateLimit_WEEK, 2},
		{2.4, minute, 2, rls.RateLimitResponse_RateLimit_MINUTE, 0},
		{0.2, minute, 1, rls.RateLimitResponse_RateLimit_MINUTE, 0},
		{3, 1500, 2, rls.RateLimitResponse_RateLimit_SECOND, 0},
		{1, 250, 4, rls.RateLimitResponse_RateLimit_SECOND, 0},
	} {
		got := envoyrls.CurrentLimit(limiter.Definition{Kind: limiter.TokenBucket, Rate: c.rate, Period: c.period})
		if got.GetRequestsPerUnit() != c.perUnit || got.GetUnit() != c.unit || got.GetUnitMultiplier().GetValue() != c.multiplier {
			t.Errorf("%v per %d ms: %v, want %d per %v ×%d", c.rate, c.period, got, c.perUnit, c.unit, c.multiplier)
		}
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
