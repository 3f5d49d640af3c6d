package algo

import (
	"errors"
	"strings"
	"testing"
)

func TestParentGraphAndKeyTemplates(t *testing.T) {
	graph := map[string][]string{"user": {"team"}, "team": {"org"}, "org": {"region"}, "region": {"planet"}}
	if err := CheckParentGraph(graph, "user"); err != nil {
		t.Fatalf("four generations: %v", err)
	}
	graph["planet"] = []string{"galaxy"}
	if err := CheckParentGraph(graph, "planet"); err == nil || !strings.Contains(err.Error(), "user → team → org → region → planet → galaxy") {
		t.Fatalf("five generations: %v", err)
	}
	graph["planet"] = []string{"team"}
	if err := CheckParentGraph(graph, "planet"); err == nil || !strings.Contains(err.Error(), "planet → team → org → region → planet") {
		t.Fatalf("cycle: %v", err)
	}
	// A diamond is no cycle.
	if err := CheckParentGraph(map[string][]string{"a": {"b", "c"}, "b": {"d"}, "c": {"d"}}, "a"); err != nil {
		t.Fatalf("diamond: %v", err)
	}
	for _, tc := range []struct {
		tmpl  string
		attrs map[string]string
		want  string
		field string
	}{
		{"org:{org}", map[string]string{"org": "acme"}, "org:acme", ""},
		{"{org}/{team}/x", map[string]string{"org": "a", "team": "b"}, "a/b/x", ""},
		{"global", nil, "global", ""},
		{"{org}-{org}", map[string]string{"org": "é"}, "é-é", ""},
		{"org:{org}", map[string]string{"team": "x"}, "", "attributes.org"},
		{"{a}{b}", map[string]string{"a": "x"}, "", "attributes.b"},
		// Filled keys may not land among the keys the API derives itself.
		{"{org}", map[string]string{"org": "session:0123"}, "", "attributes"},
		{"s{org}", map[string]string{"org": "ession:x"}, "", "attributes"},
		{"{a}{b}", map[string]string{"a": "ip", "b": ":1"}, "", "attributes"},
		{"{org}", map[string]string{"org": "sessions"}, "sessions", ""},
		{"x{org}", map[string]string{"org": "session:y"}, "xsession:y", ""},
	} {
		got, err := FillKey("child", Parent{Name: "p", Key: tc.tmpl}, tc.attrs)
		var ve *ValidationError
		switch {
		case tc.field == "" && (err != nil || got != tc.want):
			t.Errorf("%q with %v: %q, %v; want %q", tc.tmpl, tc.attrs, got, err, tc.want)
		case tc.field != "" && (!errors.As(err, &ve) || ve.Fields[0].Field != tc.field):
			t.Errorf("%q with %v: %v, want a problem naming %s", tc.tmpl, tc.attrs, err, tc.field)
		}
	}
}

// TestKeyTemplatesCannotNameReservedKeys: a template whose text starts with a reserved prefix is
// refused when the definition is stored, before any decision fills it.
func TestKeyTemplatesCannotNameReservedKeys(t *testing.T) {
	for _, tc := range []struct {
		tmpl    string
		refused bool
	}{
		{"session:{org}", true},
		{"ip:x", true},
		{"session:", true},
		{"{org}", false}, // checked when filled
		{"org:{org}", false},
		{"sess{x}ion:", false},
	} {
		fe := parentProblems([]Parent{{Name: "p", Key: tc.tmpl}})
		refused := len(fe) == 1 && fe[0].Field == "parents[0].key" && fe[0].Message == ReservedKeyRule
		if refused != tc.refused || (!tc.refused && len(fe) > 0) {
			t.Errorf("template %q: problems %v; want refused as reserved: %v", tc.tmpl, fe, tc.refused)
		}
	}
}
