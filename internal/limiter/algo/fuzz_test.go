package algo

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// FuzzParentKeyTemplate: whatever a client sends as a parent's key template and attribute value,
// validation and filling never panic, and a key that comes out is a valid key containing the
// value wherever the template named the attribute.
func FuzzParentKeyTemplate(f *testing.F) {
	for _, s := range []struct{ tmpl, value string }{
		{"org:{org}", "acme"}, {"{org}", "x"}, {"{org}/{org}", "a"}, {"org:{", "a"}, {"}{", "b"},
		{"{a-b}", "c"}, {"", ""}, {"{org}" + strings.Repeat("x", 300), "y"}, {"k", "\x00"},
	} {
		f.Add(s.tmpl, s.value)
	}
	f.Fuzz(func(t *testing.T, tmpl, value string) {
		p := Parent{Name: "parent", Key: tmpl}
		if len(parentProblems([]Parent{p})) > 0 {
			return // refused when stored: never filled
		}
		key, err := FillKey("child", p, map[string]string{"org": value})
		if err != nil {
			return // a missing attribute, or a key too long: a problem, not a panic
		}
		if !ValidKey(key) || ReservedKey(key) {
			t.Fatalf("template %q with org=%q filled an invalid or reserved key %q", tmpl, value, key)
		}
		if strings.Contains(tmpl, "{org}") && !strings.Contains(key, value) {
			t.Fatalf("template %q filled %q without the value %q", tmpl, key, value)
		}
	})
}

// FuzzOverrideIndex: any match the API accepts indexes and looks up without panicking; an exact
// match always finds its own key, and a prefix match every key it is a prefix of (unless a longer
// one or an exact one takes precedence, which is still an override matching the key).
func FuzzOverrideIndex(f *testing.F) {
	for _, s := range []struct{ match, key string }{
		{"user:42", "user:42"}, {"org:acme:*", "org:acme:7"}, {"*", ""}, {"a*b*", "ab"}, {"**", "x"},
		{strings.Repeat("p", 256) + "*", "p"}, {"é*", "éa"},
	} {
		f.Add(s.match, s.key)
	}
	f.Fuzz(func(t *testing.T, match, key string) {
		if !ValidMatch(match) {
			return
		}
		ix := NewOverrideIndex([]Override{{Match: match}, {Match: "*"}})
		got := ix.Lookup(key, 0)
		if got == nil {
			t.Fatalf("key %q matched nothing, though \"*\" matches every key", key)
		}
		prefix, isPrefix := strings.CutSuffix(match, "*")
		wants := (isPrefix && strings.HasPrefix(key, prefix)) || (!isPrefix && key == match)
		if wants && got.Match != match {
			t.Fatalf("key %q: got %q, want the more specific %q", key, got.Match, match)
		}
		if !wants && got.Match != "*" {
			t.Fatalf("key %q: got %q, which does not match it", key, got.Match)
		}
	})
}

// FuzzCalendarWindow: for any instant, calendar and billing day, in zones with DST (and one that
// skipped a day), the window contains the instant, ends after it, and the next window starts
// where it ends.
func FuzzCalendarWindow(f *testing.F) {
	f.Add(int64(1_700_000_000_000), uint8(0), uint8(1), uint8(0))
	f.Add(int64(1_320_000_000_000), uint8(2), uint8(31), uint8(3))
	f.Add(int64(-1), uint8(1), uint8(0), uint8(1))
	zones := []string{"Europe/Berlin", "Australia/Sydney", "America/Santiago", "Pacific/Apia", "UTC", "America/Havana"}
	cals := []Calendar{Day, Week, Month}
	f.Fuzz(func(t *testing.T, now int64, cal, anchor, zone uint8) {
		if now < -maxStart || now > maxStart {
			return
		}
		loc, ok := LoadZone(zones[int(zone)%len(zones)])
		if !ok {
			t.Skip("the zone database is not available")
		}
		c, a := cals[int(cal)%len(cals)], int(anchor)%32
		start, end := Window(c, loc, a, now)
		if start > now || now >= end {
			t.Fatalf("%s %s anchor %d at %d (%s): window [%d, %d) does not contain it", c, loc, a, now, time.UnixMilli(now).In(loc), start, end)
		}
		if s2, _ := Window(c, loc, a, end); s2 != end {
			t.Fatalf("%s %s anchor %d: the window after [%d, %d) starts at %d", c, loc, a, start, end, s2)
		}
	})
}

// nameSpec is the rule ValidName implements, as the regular expression it replaced.
var nameSpec = regexp.MustCompile(`^(?:[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,127}|\.[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,126}|\.\.[A-Za-z0-9_.:-]{1,126})$`)

// FuzzValidName: the hand-written name check accepts exactly what the rule's regular expression
// accepts.
func FuzzValidName(f *testing.F) {
	for _, s := range []string{"", "a", ".", "..", "...", ".a", "..a", "a.", "api_calls", "a.b:c-d_e", "a b", "é", "a/b", "a\x00", "ABC09", "[", "`", "{", "@", "/",
		strings.Repeat("a", 128), strings.Repeat("a", 129)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidName(s), nameSpec.MatchString(s); got != want {
			t.Fatalf("ValidName(%q) = %v, the rule says %v", s, got, want)
		}
	})
}
