package strictjson

import (
	"encoding/json"
	"reflect"
	"strings"
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
		{`{"key":"alice","KEY":"bob"}`, "KEY"},                 // a promoted field of an embedded struct
		{`{"Count":1}`, "Count"},                               // alone, too
		{"{\"config\":{\"\u0280ate\":1}}", "config.\u0280ate"}, // no fold of ʀ to r: an unknown member, named by its path
		{"{\"config\":{\"RATE\":1}}", "config.RATE"},           // nested
		{"{\"\u212aey\":\"k\"}", "\u212aey"},                   // the Kelvin sign folds to k
		{`{"counts":[1,null]}`, "counts[1]"},                   // a null item where a float64 cannot be null
		{`{"maybe":[1,null]}`, ""},                             // a pointer item can
		{`{"attributes":{"Org":"a","org":"b"}}`, ""},           // map keys are the client's, in any case
		{`{"raw":{"A":1,"a":2}}`, ""},                          // a RawMessage's content is not typed
		{`{"raw":{"a":1,"a":2}}`, "raw.a"},                     // but a member named twice is still one
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
	// A member name that only looks like a known one is shown escaped: "Key" with a Kelvin sign
	// would read as the "Key" the client may believe it sent.
	for _, body := range []string{"{\"\u212aey\":\"k\"}", "{\"config\":{\"\u0280ate\":1}}",
		"{\"attributes\":{\"\u212aey\":\"a\",\"\u212aey\":\"b\"}}", // a map key given twice
		"{\"counts\":[1],\"attributes\":{\"\u212aey\":1}}"} {       // a map value of the wrong type
		if p := Check([]byte(body), bodyType); p == nil || !strings.Contains(p.Message, `\u`) {
			t.Errorf("%s: %+v, want the member's name escaped in the message", body, p)
		}
	}
}

type withNullable struct {
	Key     *string           `json:"key"`
	Expires *string           `json:"expiresAt"`
	Items   []body            `json:"items"`
	Raw     json.RawMessage   `json:"raw"`
	Any     any               `json:"any"`
	Attrs   map[string]string `json:"attributes"`
	Flag    bool              `json:"flag"`
}

func TestCheckNullsRefusesANullMemberUnlessItIsNullable(t *testing.T) {
	nullable := Nullable{reflect.TypeFor[withNullable](): {"expiresAt"}}
	dst := reflect.TypeFor[*withNullable]()
	for _, tc := range []struct{ body, path, message string }{
		{`{"key":null}`, "key", "key must be a string, not null"}, // a pointer: encoding/json would leave it nil, as if absent
		{`{"flag":null}`, "flag", "flag must be true or false, not null"},
		{`{"items":null}`, "items", "items must be an array, not null"},
		{`{"items":[{"count":null}]}`, "items[0].count", "items[0].count must be a number, not null"},
		{`{"items":[{"key":"a"},{"config":{"rate":null}}]}`, "items[1].config.rate", "items[1].config.rate must be a number, not null"},
		{`{"items":[null]}`, "items[0]", "items[0] must be an object, not null"},
		{`{"attributes":null}`, "attributes", "attributes must be an object, not null"},
		{`{"attributes":{"org":null}}`, "attributes.org", "attributes.org must be a string, not null"},
		{`{"expiresAt":null}`, "", ""},                                                                 // nullable
		{`{"items":[{"maybe":[null]}]}`, "", ""},                                                       // an array item of a pointer type may be null, as for Check
		{`{"raw":null,"any":null}`, "", ""},                                                            // they read the null themselves
		{`{"nope":null}`, "nope", `unknown field "nope"`},                                              // an unknown member, named as such
		{`{"items":[{"expiresAt":null}]}`, "items[0].expiresAt", `unknown field "items[0].expiresAt"`}, // of body, not withNullable's expiresAt
		{`{"key":"a","items":[{"count":1}]}`, "", ""},
	} {
		p := CheckNulls([]byte(tc.body), dst, nullable)
		switch {
		case tc.path == "" && p != nil:
			t.Errorf("%s: %v, want nothing", tc.body, p)
		case tc.path != "" && (p == nil || p.Path != tc.path || p.Message != tc.message):
			t.Errorf("%s: %+v, want %q at %s", tc.body, p, tc.message, tc.path)
		}
		if p := Check([]byte(tc.body), dst); p != nil && tc.body != `{"items":[null]}` && !strings.HasPrefix(p.Message, "unknown field") {
			t.Errorf("Check %s: %v; only CheckNulls refuses a null member", tc.body, p)
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
		_ = CheckNulls(b, reflect.TypeFor[*withNullable](), Nullable{reflect.TypeFor[withNullable](): {"expiresAt"}})
	})
}

type oddTags struct {
	Dash  int         `json:"-,"` //nolint:staticcheck // on purpose: a member named "-", as encoding/json reads "-,"
	inner `json:"in"` // an unexported embedded struct, named by its tag
	Gone  int         `json:"-"`
}

// TestMembersAreReadAsEncodingJSONReadsThem: the members Check knows are encoding/json's, odd
// tags included: "-," names a member "-", a tagged embedded struct is a member even unexported,
// and "-" alone is no member (so it is unknown).
func TestMembersAreReadAsEncodingJSONReadsThem(t *testing.T) {
	dst := reflect.TypeFor[*oddTags]()
	for body, known := range map[string]bool{`{"-":1}`: true, `{"in":{"rate":1}}`: true, `{"Gone":1}`: false} {
		dec := json.NewDecoder(strings.NewReader(body))
		dec.DisallowUnknownFields()
		var v oddTags
		if takes := dec.Decode(&v) == nil; takes != known {
			t.Fatalf("%s: encoding/json takes it: %v; the case is wrong", body, takes)
		}
		if p := Check([]byte(body), dst); (p == nil) != known {
			t.Errorf("%s: Check says %v; encoding/json takes it: %v", body, p, known)
		}
	}
}
