package tenants

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseKey checks that ParseKey never panics and never accepts a string whose checksum,
// recomputed independently, is wrong. Besides the raw input it also tries the input with one
// byte replaced, so the fuzzer explores near misses of valid keys, not only random noise.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{newKeySecret(KindSecret), newKeySecret(KindPublishable), "", "sk_live_", "pk_live_0000000000000000000000000000"} {
		f.Add(s, uint8(0), byte('A'))
		f.Add(s, uint8(35), byte('z'))
		f.Add(s, uint8(12), byte('_'))
	}
	f.Fuzz(func(t *testing.T, s string, pos uint8, c byte) {
		check := func(s string) {
			kind, err := ParseKey(s)
			if err != nil {
				if !errors.Is(err, ErrUnauthorized) || kind != "" {
					t.Fatalf("ParseKey(%q) = %q, %v; rejections must wrap ErrUnauthorized", s, kind, err)
				}
				return
			}
			if len(s) != KeyLen || refChecksum(s[:30]) != s[30:] {
				t.Fatalf("ParseKey accepted %q, whose checksum is wrong", s)
			}
			if (kind == KindSecret) != strings.HasPrefix(s, "sk_live_") || (kind == KindPublishable) != strings.HasPrefix(s, "pk_live_") {
				t.Fatalf("ParseKey(%q) = %q: kind does not match prefix", s, kind)
			}
		}
		check(s)
		if int(pos) < len(s) && s[pos] != c {
			check(s[:pos] + string(c) + s[pos+1:])
		}
	})
}
