package strictjson

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

type kinds struct {
	Items   []inner     `json:"items"`
	Small   int32       `json:"small"`
	Whole   *int64      `json:"whole"`
	N       json.Number `json:"n"`
	Quoted  int64       `json:"quoted,string"`
	Inner   embedded    `json:"inner,string"` //nolint:staticcheck // on purpose: encoding/json ignores the option on a struct, and Check must too
	When    *time.Time  `json:"when"`
	Stamp   time.Time   `json:"stamp"`
	Name    string      `json:"name"`
	Flag    bool        `json:"flag"`
	Anytime any         `json:"anytime"`
}

// TestCheckRefusesWhatEncodingJSONRefusesAndNamesTheItem: a value of the wrong kind or out of its
// field's range is named by its full path (encoding/json drops the array indices), and exactly
// what encoding/json itself takes is taken.
func TestCheckRefusesWhatEncodingJSONRefusesAndNamesTheItem(t *testing.T) {
	kindsType := reflect.TypeFor[*kinds]()
	for _, tc := range []struct{ body, path, says string }{
		{`{"items":[{"rate":1},{"rate":"2"}]}`, "items[1].rate", "must be a number"},
		{`{"items":[{"rate":1},{"rate":1e400}]}`, "items[1].rate", "is out of range"},
		{`{"small":2147483648}`, "small", "is out of range: it must be a whole number"},
		{`{"whole":60000.0}`, "whole", "without a decimal point or exponent"},
		{`{"whole":6e4}`, "whole", "without a decimal point or exponent"},
		{`{"whole":99999999999999999999}`, "whole", "is out of range"},
		{`{"name":5}`, "name", "must be a string"},
		{`{"flag":"true"}`, "flag", "must be true or false"},
		{`{"items":{"rate":1}}`, "items", "must be an array"},
		{`{"quoted":5}`, "quoted", "the member is quoted"}, // ",string" takes a string only
		{`{"inner":{"key":5}}`, "inner.key", "must be a string"},
		// What encoding/json takes.
		{`{"n":5}`, "", ""},                          // json.Number holds a number
		{`{"n":"5"}`, "", ""},                        // and a string
		{`{"quoted":"5"}`, "", ""},                   // ",string": quoted
		{`{"stamp":"2026-11-28T00:00:00Z"}`, "", ""}, // a TextUnmarshaler takes a string
		{`{"anytime":[1,"a",{"b":null}]}`, "", ""},   // an interface takes anything
		{`{"small":-2147483648,"whole":9223372036854775807,"items":[{"rate":1e308}]}`, "", ""},
	} {
		if tc.path != "" {
			var v kinds
			if err := json.Unmarshal([]byte(tc.body), &v); err == nil {
				t.Fatalf("%s: encoding/json takes it: the case is wrong", tc.body)
			}
		} else {
			var v kinds
			if err := json.Unmarshal([]byte(tc.body), &v); err != nil {
				t.Fatalf("%s: encoding/json refuses it (%v): the case is wrong", tc.body, err)
			}
		}
		p := Check([]byte(tc.body), kindsType)
		switch {
		case tc.path == "" && p != nil:
			t.Errorf("%s: %v, want nothing (encoding/json takes it)", tc.body, p)
		case tc.path != "" && (p == nil || p.Path != tc.path || !strings.Contains(p.Message, tc.says)):
			t.Errorf("%s: %+v, want a problem at %s saying %q", tc.body, p, tc.path, tc.says)
		}
	}
}

// TestAStringOptionOnAStructIsIgnoredAsEncodingJSONIgnoresIt: encoding/json reads a struct
// member tagged ",string" as any struct, so its members are checked as any (a member named in
// another case, which encoding/json would fold, is refused).
func TestAStringOptionOnAStructIsIgnoredAsEncodingJSONIgnoresIt(t *testing.T) {
	if p := Check([]byte(`{"inner":{"KEY":"bob"}}`), reflect.TypeFor[*kinds]()); p == nil || p.Path != "inner.KEY" {
		t.Fatalf("a member in another case inside a ',string' struct: %+v, want a problem at inner.KEY", p)
	}
}

// TestCheckNullsRefusesANullPointerToATypeThatDecodesItself: encoding/json sets a pointer to nil
// on null without asking the type it points to, so {"when": null} is read as absent, like any
// other null member; a non-pointer json.Unmarshaler (json.RawMessage) reads the null itself.
func TestCheckNullsRefusesANullPointerToATypeThatDecodesItself(t *testing.T) {
	if p := CheckNulls([]byte(`{"when":null}`), reflect.TypeFor[*kinds](), nil); p == nil || p.Path != "when" {
		t.Fatalf("a null *time.Time: %+v, want a problem at when", p)
	}
	if p := CheckNulls([]byte(`{"quoted":null}`), reflect.TypeFor[*kinds](), nil); p == nil || p.Path != "quoted" {
		t.Fatalf("a null ',string' int64: %+v, want a problem at quoted (encoding/json reads it as absent)", p)
	}
	if p := CheckNulls([]byte(`{"raw":null}`), reflect.TypeFor[*body](), nil); p != nil {
		t.Fatalf("a null json.RawMessage: %+v, want nothing (it reads the null itself)", p)
	}
}
