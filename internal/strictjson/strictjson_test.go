package strictjson

import (
	"encoding/json"
	"reflect"
	"testing"
)

type inner struct {
	Rate float64 `json:"rate"`
}

type embedded struct {
	Key string `json:"key"`
}

type body struct {
	embedded
	Count  *float64          `json:"count"`
	Counts []float64         `json:"counts"`
	Maybe  []*float64        `json:"maybe"`
	Config *inner            `json:"config"`
	Attrs  map[string]string `json:"attributes"`
	Raw    json.RawMessage   `json:"raw"`
	Skip   string            `json:"-"`
}

func TestCheckFindsWhatEncodingJSONWouldTakeSilently(t *testing.T) {
	bodyType := reflect.TypeFor[*body]()
	for _, tc := range []struct{ body, path string }{
		{`{"count":1,"count":5}`, "count"},
		{`{"key":"alice","KEY":"bob"}`, "KEY"},       // a promoted field of an embedded struct
		{`{"Count":1}`, "Count"},                     // alone, too
		{"{\"config\":{\"\u0280ate\":1}}", ""},       // no fold of ʀ to r: an unknown member, the decoder's to refuse
		{"{\"config\":{\"RATE\":1}}", "config.RATE"}, // nested
		{"{\"\u212aey\":\"k\"}", "\u212aey"},         // the Kelvin sign folds to k
		{`{"counts":[1,null]}`, "counts[1]"},         // a null item where a float64 cannot be null
		{`{"maybe":[1,null]}`, ""},                   // a pointer item can
		{`{"attributes":{"Org":"a","org":"b"}}`, ""}, // map keys are the client's, in any case
		{`{"raw":{"A":1,"a":2}}`, ""},                // a RawMessage's content is not typed
		{`{"raw":{"a":1,"a":2}}`, "raw.a"},           // but a member named twice is still one
		{`{"count":1,"counts":[1,2],"config":{"rate":3},"key":"k"}`, ""},
		{`{"count":`, ""}, // malformed: the decoder's to describe
	} {
		p := Check([]byte(tc.body), bodyType)
		switch {
		case tc.path == "" && p != nil:
			t.Errorf("%s: %v, want nothing", tc.body, p)
		case tc.path != "" && (p == nil || p.Path != tc.path):
			t.Errorf("%s: %+v, want a problem at %s", tc.body, p, tc.path)
		}
	}
}

// FuzzCheck: no input makes Check panic (the API's decoders run it on every body they do not
// decode on the fast path; FuzzDecodeStrict in internal/api covers it end to end).
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"count":1}`, `{"key":"a","KEY":"b"}`, `{"counts":[null]}`, `{"config":{"rate":1}}`, `[[[[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = Check(b, reflect.TypeFor[*body]())
	})
}
