package api

import (
	"reflect"
	"testing"
	"unicode/utf8"
)

// Bodies the fast decoder takes.
var fastDecisionBodies = []string{
	`{}`, ` { } `, `{"key":"alice"}`, `{"key":"alice","count":3,"throws":true}`, `{"reserve":true,"count":20}`,
	`{"session":"0123456789abcdef0123"}`, `{"key":null}`, `{"count":null}`, `{"count":-0}`, `{"count":1.5e3}`,
	`{"count":0.000001}`, `{"count":1E-2}`, `{"count":1e+2}`, `{"count":123456789012345678901234567890}`,
	`{"key":"a","key":"b"}`, `{"key":"a","key":null}`, `{"count":1,"count":2}`, "{\n\t\"key\" : \"x\" ,\r\n\"reserve\":false}",
	"{\"key\":\"ü 🙂 \u2028\"}", `{"key":""}`,
}

// Bodies left to encoding/json, which accepts or explains them.
var fallbackDecisionBodies = []string{
	`{"key":"\u2028"}`, `{"Key":"alice"}`, `{"key":"a\"b"}`, `{"key":"\u0041"}`, `{"config":{"kind":"token bucket","rate":1,"period":1}}`,
	`{"reserve":null}`, `{"count":01}`, `{"count":1.}`, `{"count":.5}`, `{"count":-}`, `{"count":1e}`, `{"count":+1}`,
	`{"count":1e999}`, `{"count":"1"}`, `{"key":1}`, `{"throws":"true"}`, `{"key":"a",}`, `{,}`, `{"key":"a"} x`,
	`{"key":"a"}{}`, `{"nope":1}`, `{"key" "a"}`, `{"key":"a"`, `{"key":"a\u0000"}`, "{\"key\":\"a\tb\"}", `{"throws":tru}`,
	"\u00a0{}", "{}\u00a0", `[]`, `null`,
}

// Whatever the fast decoder accepts, encoding/json accepts too, with the same value.
func TestDecisionFastMatchesEncodingJSON(t *testing.T) {
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
	if !utf8.Valid(body) { // DecodeStrict refuses it before the fast path
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
	if err := decodeReflect(body, &slow); err != nil {
		t.Fatalf("%q: fast path accepted what encoding/json refuses: %v", body, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%q: fast %#v, encoding/json %#v", body, fast, slow)
	}
	return true
}
