package algo

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

func TestValidMatchAcceptsKeysAndOneTrailingStar(t *testing.T) {
	for m, want := range map[string]bool{
		"user:42":                       true,
		"org:acme:*":                    true,
		"*":                             true,
		"":                              false,
		"a**":                           false,
		"*a":                            false,
		"a*b":                           false,
		"a*b*":                          false,
		strings.Repeat("x", 256):        true,
		strings.Repeat("x", 255) + "*":  true,
		strings.Repeat("x", 256) + "*":  false,
		strings.Repeat("x", 257):        false,
		"bad\x00key":                    false,
		string([]byte{0xff, 0xfe, '*'}): false,
	} {
		if got := ValidMatch(m); got != want {
			t.Errorf("ValidMatch(%q) = %v, want %v", m, got, want)
		}
	}
}

func TestLookupPrefersExactThenLongestPrefixAndSkipsExpired(t *testing.T) {
	past, future := int64(1_000), int64(10_000)
	ix := NewOverrideIndex([]Override{
		{Match: "*", Action: ActionAllow},
		{Match: "org:*", Capacity: ptr(1.0)},
		{Match: "org:acme:*", Capacity: ptr(2.0)},
		{Match: "org:acme:42", Capacity: ptr(3.0)},
		{Match: "org:acme:43", Capacity: ptr(4.0), ExpiresAt: &past},
		{Match: "org:beta:*", Action: ActionDeny, ExpiresAt: &future},
	})
	now := int64(5_000)
	for key, want := range map[string]string{
		"org:acme:42": "org:acme:42", // exact beats every prefix
		"org:acme:43": "org:acme:*",  // the exact one expired: the longest prefix applies
		"org:acme:44": "org:acme:*",
		"org:acme:":   "org:acme:*", // a prefix matches the key equal to it
		"org:ac":      "org:*",
		"org:beta:1":  "org:beta:*",
		"user:1":      "*",
		"":            "*", // the global key: only "*" matches it
	} {
		got := ix.Lookup(key, now)
		if got == nil || got.Match != want {
			t.Errorf("Lookup(%q) = %+v, want %q", key, got, want)
		}
	}
	if got := ix.Lookup("org:beta:1", future); got == nil || got.Match != "org:*" {
		t.Errorf("at its expiry the deny override still applies: %+v", got)
	}
	if got := (*OverrideIndex)(nil).Lookup("k", now); got != nil {
		t.Errorf("nil index found %+v", got)
	}
}

// TestLookupAgreesWithALinearScan compares the index with the rule read literally: among the
// active overrides matching the key, an exact one, else the longest prefix.
func TestLookupAgreesWithALinearScan(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 14))
	alphabet := []byte("ab:")
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	for round := range 300 {
		seen := map[string]bool{}
		var os []Override
		for range r.IntN(30) {
			m := word(r.IntN(5))
			if m == "" || r.IntN(2) == 0 {
				m += "*"
			}
			if seen[m] {
				continue
			}
			seen[m] = true
			o := Override{Match: m, Capacity: ptr(float64(len(os)))}
			if r.IntN(4) == 0 {
				exp := int64(r.IntN(100))
				o.ExpiresAt = &exp
			}
			os = append(os, o)
		}
		ix := NewOverrideIndex(append([]Override(nil), os...))
		for range 50 {
			key, now := word(r.IntN(6)), int64(r.IntN(100))
			var want *Override
			for i := range os {
				o := os[i]
				if !o.ActiveAt(now) {
					continue
				}
				switch {
				case !o.IsPrefix() && o.Match == key && key != "":
					want = &os[i]
				case o.IsPrefix() && strings.HasPrefix(key, strings.TrimSuffix(o.Match, "*")):
					if want == nil || (want.IsPrefix() && len(o.Match) > len(want.Match)) {
						want = &os[i]
					}
				}
				if want != nil && !want.IsPrefix() {
					break
				}
			}
			got := ix.Lookup(key, now)
			if (got == nil) != (want == nil) || (got != nil && got.Match != want.Match) {
				t.Fatalf("round %d: Lookup(%q, %d) = %+v, want %+v among %+v", round, key, now, got, want, os)
			}
		}
	}
}

func TestOverrideValidateNamesTheField(t *testing.T) {
	tb := Definition{Kind: TokenBucket, Rate: 10, Period: 1000}
	sw := Definition{Kind: SlidingWindow, Rate: 10, Period: 1000}
	now := int64(1_000)
	past := int64(999)
	for _, c := range []struct {
		name  string
		o     Override
		def   Definition
		code  string
		field string
	}{
		{"two stars", Override{Match: "a**", Rate: ptr(1.0)}, tb, CodeInvalidRequest, "match"},
		{"star inside", Override{Match: "a*b", Rate: ptr(1.0)}, tb, CodeInvalidRequest, "match"},
		{"too long", Override{Match: strings.Repeat("k", 257), Rate: ptr(1.0)}, tb, CodeInvalidRequest, "match"},
		{"nothing to do", Override{Match: "k"}, tb, CodeInvalidRequest, "action"},
		{"unknown action", Override{Match: "k", Action: "block"}, tb, CodeInvalidRequest, "action"},
		{"action and numbers", Override{Match: "k", Action: ActionDeny, Rate: ptr(1.0)}, tb, CodeInvalidRequest, "action"},
		{"expired", Override{Match: "k", Action: ActionDeny, ExpiresAt: &past}, tb, CodeInvalidRequest, "expiresAt"},
		{"after the year 9999", Override{Match: "k", Action: ActionDeny, ExpiresAt: ptr(int64(MaxExpiresAt + 1))}, tb, CodeInvalidRequest, "expiresAt"},
		{"zero rate", Override{Match: "k", Rate: ptr(0.0)}, tb, CodeInvalidConfig, "rate"},
		{"negative capacity", Override{Match: "k", Capacity: ptr(-1.0)}, tb, CodeInvalidConfig, "capacity"},
		{"capacity on a sliding window", Override{Match: "k", Capacity: ptr(5.0)}, sw, CodeInvalidConfig, "capacity"},
		{"maxReserved on a sliding window", Override{Match: "k", MaxReserved: ptr(5.0)}, sw, CodeInvalidConfig, "maxReserved"},
		// A definition stored before a rule it breaks: its own problem is named, not the override's.
		{"a definition today's rules refuse", Override{Match: "k", Rate: ptr(1.0)},
			Definition{Kind: TokenBucket, Rate: 10, Period: 1000, Parents: []Parent{{Name: "org", Key: "session:{org}"}}}, CodeInvalidConfig, "parents[0].key"},
	} {
		err := c.o.Validate(c.def, now)
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Code != c.code || ve.Fields[0].Field != c.field {
			t.Errorf("%s: got %v, want %s on %s", c.name, err, c.code, c.field)
		}
	}
	for _, o := range []Override{
		{Match: "k", Rate: ptr(100.0), Capacity: ptr(200.0), MaxReserved: ptr(5.0)},
		{Match: "org:*", Action: ActionAllow},
		{Match: "*", Action: ActionDeny, ExpiresAt: ptr(int64(1_001))},
		{Match: "*", Action: ActionDeny, ExpiresAt: ptr(int64(MaxExpiresAt))},
	} {
		if err := o.Validate(tb, now); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

func TestOverrideApplyChangesOnlyTheNumbers(t *testing.T) {
	start := int64(5)
	def := Definition{Kind: FixedWindow, Rate: 10, Period: 60_000, Capacity: ptr(20.0), Shards: 4, Start: &start, Jitter: 7}
	got := Override{Match: "k", Rate: ptr(1.0), MaxReserved: ptr(3.0)}.Apply(def)
	if got.Rate != 1 || *got.Capacity != 20 || *got.MaxReserved != 3 || got.Kind != def.Kind || got.Period != def.Period ||
		got.Shards != 4 || got.Start != def.Start || got.Jitter != 7 {
		t.Fatalf("Apply = %+v", got)
	}
	if StateShapeChanged(def, got) {
		t.Fatal("an override changed the state's shape")
	}
}

func TestDenyRetryAfterRunsToTheExpiryOrTheMaximum(t *testing.T) {
	if got := (Override{Action: ActionDeny}).DenyRetryAfter(5); got != MaxRetryAfter {
		t.Errorf("forever: %d", got)
	}
	exp := int64(2_500)
	if got := (Override{Action: ActionDeny, ExpiresAt: &exp}).DenyRetryAfter(1_000); got != 1_500 {
		t.Errorf("until expiry: %d", got)
	}
}

// BenchmarkLookup1000 looks random keys up among 1,000 overrides (500 exact keys, 500 prefixes of
// one length), as the bench's random-32-overrides scenario has them.
func BenchmarkLookup1000(b *testing.B) {
	var os []Override
	for i := range 500 {
		os = append(os, Override{Match: "k" + itoa(100+i) + "*"}, Override{Match: "k" + itoa(600+i)})
	}
	ix := NewOverrideIndex(os)
	keys := make([]string, 1024)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range keys {
		keys[i] = "k" + itoa(r.IntN(100_000))
	}
	b.ResetTimer()
	hits := 0
	for i := range b.N {
		if ix.Lookup(keys[i%len(keys)], 0) != nil {
			hits++
		}
	}
	if b.N >= len(keys) && hits == 0 {
		b.Fatal("no key matched")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// BenchmarkLookupWorstCase10000 looks a 256-byte key up among 10,000 overrides whose prefixes
// have every length from 1 to 255, none of them matching: one map probe per distinct length.
func BenchmarkLookupWorstCase10000(b *testing.B) {
	var os []Override
	for i := range 10_000 {
		n := 1 + i%255
		os = append(os, Override{Match: strings.Repeat("p", n-1) + string(rune('a'+i%15)) + "*"})
	}
	ix := NewOverrideIndex(os)
	key := strings.Repeat("p", 256)
	b.ResetTimer()
	for range b.N {
		if ix.Lookup(key, 0) != nil {
			b.Fatal("matched")
		}
	}
}
