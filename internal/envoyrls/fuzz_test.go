package envoyrls_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/envoyrls"
	"github.com/sluice-dev/sluice/internal/limiter"
)

// FuzzLimitKey: whatever values a visitor's request puts in a descriptor (UTF-8 or not, as
// lenientCodec reads them), the key is valid, is not under a reserved prefix, and (unless it is a
// digest) decodes back to exactly those values, so two different descriptors never share a key.
func FuzzLimitKey(f *testing.F) {
	for _, s := range [][2]string{
		{"alice", ""}, {"10.0.0.1", "/login"}, {"session:x", ""}, {"ip:", "x"}, {"a%3Ab", "c"},
		{"", ""}, {"%empty", ""}, {"%sha256:00", ""}, {"a\x00b", "/"}, {strings.Repeat("é", 200), "x"}, {"Espa\xf1a", "%F1"}, {"\xff\xfe", "\uFFFD"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, values := range [][]string{{a}, {a, b}} {
			kv := make([]string, 0, 2*len(values))
			for i, v := range values {
				kv = append(kv, string(rune('a'+i)), v)
			}
			key := envoyrls.LimitKey(entries(kv...))
			if !limiter.ValidKey(key) || limiter.ReservedKey(key) {
				t.Fatalf("values %q: key %q is invalid or reserved", values, key)
			}
			if strings.HasPrefix(key, "%sha256:") {
				continue
			}
			if got := decodeKey(key); !slices.Equal(got, values) {
				t.Fatalf("values %q: key %q decodes to %q", values, key, got)
			}
		}
	})
}

// decodeKey inverts LimitKey for keys that are not digests: every escape is a byte's %XX.
func decodeKey(key string) []string {
	if key == "%empty" {
		return []string{""}
	}
	parts := strings.Split(key, "/")
	for i, p := range parts {
		var b strings.Builder
		for j := 0; j < len(p); j++ {
			if p[j] == '%' && j+3 <= len(p) {
				if c, err := strconv.ParseUint(p[j+1:j+3], 16, 8); err == nil {
					b.WriteByte(byte(c))
					j += 2
					continue
				}
			}
			b.WriteByte(p[j])
		}
		parts[i] = b.String()
	}
	return parts
}
