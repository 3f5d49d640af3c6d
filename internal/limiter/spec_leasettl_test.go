package limiter_test

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/limiter"
)

// TestSpecRefusesALeaseTTLItCannotUse: a leaseTtl given on a kind other than concurrency is
// refused, 0 included (it was copied into the definition as 0, which reads as "none", and
// dropped without a word), and a leaseTtl of 0 on a concurrency limit is refused as below the
// minimum, not as missing. A present zero is an error, as for shards and resolution.
func TestSpecRefusesALeaseTTLItCannotUse(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	f64 := func(v float64) *float64 { return &v }
	str := func(v string) *string { return &v }
	for _, tc := range []struct {
		name    string
		spec    limiter.Spec
		message string // a part of leaseTtl's message; "" when the spec is valid
	}{
		{"token bucket, 0", limiter.Spec{Kind: "token bucket", Rate: f64(1), Period: i64(1000), LeaseTTL: i64(0)}, "applies to concurrency limits only"},
		{"token bucket, 5000", limiter.Spec{Kind: "token bucket", Rate: f64(1), Period: i64(1000), LeaseTTL: i64(5000)}, "applies to concurrency limits only"},
		{"fixed window, 0", limiter.Spec{Kind: "fixed window", Rate: f64(1), Period: i64(1000), LeaseTTL: i64(0)}, "applies to concurrency limits only"},
		{"gcra, -1", limiter.Spec{Kind: "gcra", Rate: f64(1), Period: i64(1000), LeaseTTL: i64(-1)}, "applies to concurrency limits only"},
		{"quota, 0", limiter.Spec{Kind: "quota", Rate: f64(1), Calendar: str("day"), TimeZone: str("UTC"), LeaseTTL: i64(0)}, "applies to concurrency limits only"},
		{"concurrency, 0", limiter.Spec{Kind: "concurrency", Rate: f64(1), LeaseTTL: i64(0)}, "must be a whole number of milliseconds from 1 to"},
		{"concurrency, -5", limiter.Spec{Kind: "concurrency", Rate: f64(1), LeaseTTL: i64(-5)}, "must be a whole number of milliseconds from 1 to"},
		{"concurrency, absent", limiter.Spec{Kind: "concurrency", Rate: f64(1)}, "is required for concurrency limits"},
		{"concurrency, 1", limiter.Spec{Kind: "concurrency", Rate: f64(1), LeaseTTL: i64(1)}, ""},
		{"token bucket, absent", limiter.Spec{Kind: "token bucket", Rate: f64(1), Period: i64(1000)}, ""},
	} {
		d, err := tc.spec.ToDefinition()
		if tc.message == "" {
			if err != nil {
				t.Errorf("%s: %v, want valid", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted as %+v, want leaseTtl refused (%s)", tc.name, d, tc.message)
			continue
		}
		e := apperr.From(err)
		found := false
		for _, f := range e.Fields {
			found = found || (f.Field == "leaseTtl" && strings.Contains(f.Message, tc.message))
		}
		if e.Code != apperr.InvalidConfig || !found {
			t.Errorf("%s: %s %+v, want invalid_config with leaseTtl %q", tc.name, e.Code, e.Fields, tc.message)
		}
	}
}

// TestSpecRefusesAnEmptyCalendar: "calendar": "" (which the document's enum refuses) was copied
// as "", which reads as none, and so accepted without a word on any kind but a quota (which
// refuses it as missing).
func TestSpecRefusesAnEmptyCalendar(t *testing.T) {
	rate, period, empty := 1.0, int64(1000), ""
	for _, kind := range []string{"token bucket", "sliding window", "concurrency"} {
		s := limiter.Spec{Kind: kind, Rate: &rate, Calendar: &empty}
		if kind == "concurrency" {
			s.LeaseTTL = &period
		} else {
			s.Period = &period
		}
		_, err := s.ToDefinition()
		e := apperr.From(err)
		if err == nil || e.Code != apperr.InvalidConfig || e.Field != "calendar" || !strings.Contains(e.Message, `must be "day", "week" or "month"`) {
			t.Errorf("%s with calendar \"\": %v, want invalid_config naming calendar", kind, err)
		}
	}
}

// TestALeaseTTLOnAnUnknownKindNamesTheKind: the kind is the mistake to name first; saying only
// that leaseTtl does not apply to "bucket" would hide it.
func TestALeaseTTLOnAnUnknownKindNamesTheKind(t *testing.T) {
	rate, period, ttl := 1.0, int64(1000), int64(5000)
	_, err := limiter.Spec{Kind: "bucket", Rate: &rate, Period: &period, LeaseTTL: &ttl}.ToDefinition()
	e := apperr.From(err)
	for _, f := range e.Fields {
		if f.Field == "kind" && e.Code == apperr.InvalidConfig {
			return
		}
	}
	t.Fatalf("a leaseTtl on kind \"bucket\": %s %+v, want invalid_config naming kind", e.Code, e.Fields)
}
