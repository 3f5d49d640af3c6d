package api

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/internal/apperr"
)

// Bodies the fast decoder takes.
var fastDecisionBodies = []string{
	`{}`, ` { } `, `{"key":"alice"}`, `{"key":"alice","count":3,"throws":true}`, `{"reserve":true,"count":20}`,
	`{"session":"0123456789abcdef0123"}`, `{"count":-0}`, `{"count":1.5e3}`, `{"count": 2}`,
	`{"count":0.000001}`, `{"count":1E-2}`, `{"count":1e+2}`, `{"count":123456789012345678901234567890}`,
	"{\n\t\"key\" : \"x\" ,\r\n\"reserve\":false}", `{"ip":"203.0.113.9","key":"k","session":"0123456789abcdef0123"}`,
	"{\"key\":\"ü 🙂 \u2028\"}", `{"key":""}`,
}

// Bodies left to encoding/json, which accepts or explains them.
var fallbackDecisionBodies = []string{
	`{"key":"\u2028"}`, `{"Key":"alice"}`, `{"key":"a\"b"}`, `{"key":"\u0041"}`, `{"config":{"kind":"token bucket","rate":1,"period":1}}`,
	`{"reserve":null}`, `{"count":01}`, `{"count":1.}`, `{"count":.5}`, `{"count":-}`, `{"count":1e}`, `{"count":+1}`,
	`{"count":1e999}`, `{"count":"1"}`, `{"key":1}`, `{"throws":"true"}`, `{"key":"a",}`, `{,}`, `{"key":"a"} x`,
	`{"key":"a"}{}`, `{"nope":1}`, `{"key" "a"}`, `{"key":"a"`, `{"key":"a\u0000"}`, "{\"key\":\"a\tb\"}", `{"throws":tru}`,
	"\u00a0{}", "{}\u00a0", `[]`, `null`, `{"key":"a","key":"b"}`, `{"key":"a","key":null}`, `{"count":1,"count":2}`,
	`{"ip":"a","ip":"a"}`, `{"throws":true,"throws":true}`, `{"attributes":{"team":"a"}}`,
	// An explicit null is refused for every member (the document makes none of them nullable):
	// encoding/json would read it as an absent member, {"key":null} as the global key.
	`{"key":null}`, `{"count":null}`, `{"session":null}`, `{"ip":null}`, `{"throws":null}`, `{"config":null}`,
	`{"attributes":null}`, `{"ip":"203.0.113.9","key":"k","session":null}`, `{"key":"a","count": null}`,
}

// nullDecisionBodies are the fallback bodies with a null member, and the member the strict
// decoder names in refusing them.
var nullDecisionBodies = map[string]string{
	`{"key":null}`: "key", `{"count":null}`: "count", `{"session":null}`: "session", `{"ip":null}`: "ip",
	`{"throws":null}`: "throws", `{"reserve":null}`: "reserve", `{"config":null}`: "config", `{"attributes":null}`: "attributes",
	`{"ip":"203.0.113.9","key":"k","session":null}`: "session", `{"key":"a","count": null}`: "count",
}

// TestDecodersRefuseANullMember: neither decoder reads a null member as an absent one; the
// strict decoder refuses it naming the member, as it words a value of the wrong type.
func TestDecodersRefuseANullMember(t *testing.T) {
	for body, field := range nullDecisionBodies {
		var d DecisionBody
		if decodeDecisionFast([]byte(body), &d) {
			t.Errorf("%s took the fast path: %#v", body, d)
		}
		err := DecodeStrict([]byte(body), &DecisionBody{})
		e := apperr.From(err)
		if err == nil || e.Code != apperr.InvalidRequest || e.Field != field || !strings.HasSuffix(e.Message, ", not null") {
			t.Errorf("%s: %v (%s, field %q), want invalid_request naming %s", body, err, e.Code, e.Field, field)
		}
	}
}

// Whatever the fast decoder accepts, the strict decoder (duplicate members refused, then
// encoding/json) accepts too, with the same value; what it leaves, the strict decoder decides.
func TestDecisionFastMatchesTheStrictDecoder(t *testing.T) {
	for _, body := range fastDecisionBodies {
		if !checkDecisionFast(t, []byte(body)) {
			t.Errorf("%q did not take the fast path", body)
		}
	}
	for _, body := range fallbackDecisionBodies {
		if checkDecisionFast(t, []byte(body)) {
			t.Errorf("%q took the fast path", body)
		}
	}
}

func FuzzDecisionFast(f *testing.F) {
	for _, b := range append(fastDecisionBodies, fallbackDecisionBodies...) {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkDecisionFast(t, body) })
}

func checkDecisionFast(t *testing.T, body []byte) bool {
	t.Helper()
	// decodeStrict refuses these before the fast path.
	if trimmed := bytes.TrimSpace(body); !utf8.Valid(body) || len(trimmed) == 0 || trimmed[0] != '{' {
		return false
	}
	var fast DecisionBody
	if !decodeDecisionFast(body, &fast) {
		if !reflect.DeepEqual(fast, DecisionBody{}) {
			t.Fatalf("%q: a refused body changed the destination: %#v", body, fast)
		}
		return false
	}
	var slow DecisionBody
	if err := checkMembers(body, reflect.TypeFor[*DecisionBody]()); err != nil {
		t.Fatalf("%q: fast path accepted what checkMembers refuses: %v", body, err)
	}
	if err := decodeReflect(body, &slow); err != nil {
		t.Fatalf("%q: fast path accepted what encoding/json refuses: %v", body, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%q: fast %#v, encoding/json %#v", body, fast, slow)
	}
	return true
}
