package envoyrls_test

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/internal/envoyrls"
	"github.com/sluice-dev/sluice/internal/limiter"
)

// FuzzLimitKey: whatever values a visitor's request puts in a descriptor, the key is valid, is not
// under a reserved prefix, and (unless it is a digest) decodes back to exactly those values, so
// two different descriptors never share a key.
func FuzzLimitKey(f *testing.F) {
	for _, s := range [][2]string{
		{"alice", ""}, {"10.0.0.1", "/login"}, {"session:x", ""}, {"ip:", "x"}, {"a%3Ab", "c"},
		{"", ""}, {"%empty", ""}, {"%sha256:00", ""}, {"a\x00b", "/"}, {strings.Repeat("é", 200), "x"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if !utf8.ValidString(a) || !utf8.ValidString(b) {
			return // a protobuf string is UTF-8: such a request never reaches the mapping
		}
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

// decodeKey inverts LimitKey for keys that are not digests.
func decodeKey(key string) []string {
	if key == "%empty" {
		return []string{""}
	}
	un := strings.NewReplacer("%25", "%", "%2F", "/", "%00", "\x00", "%3A", ":")
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = un.Replace(p)
	}
	return parts
}
