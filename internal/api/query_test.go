package api

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestEveryQueryParameterAHandlerReadsIsTheDocuments: the query check takes its list from the
// document, so a parameter a handler reads and the document leaves out would be refused; these
// are every c.Query and c.GetQuery of the handlers, by route.
func TestEveryQueryParameterAHandlerReadsIsTheDocuments(t *testing.T) {
	for route, params := range map[string][]string{
		"GET /v1/limits/:name/value":        {"key"},
		"GET /v1/limits/:name/overrides":    {"limit", "after"},
		"DELETE /v1/limits/:name/overrides": {"match"},
		"GET /v1/captcha/challenge":         {"pk", "sid"},
		"OPTIONS /v1/captcha/challenge":     {"pk", "sid"},
		"GET /v1/webhooks/:id/deliveries":   {"limit"},
	} {
		got, ok := queryParams[route]
		if !ok {
			t.Errorf("%s: no such operation in the document", route)
			continue
		}
		for _, p := range params {
			if !slices.Contains(got, p) {
				t.Errorf("%s: the document gives %v, without %q, which its handler reads", route, got, p)
			}
		}
	}
	if got := queryParams["POST /v1/limits/:name/limit"]; len(got) != 0 {
		t.Errorf("POST /v1/limits/:name/limit takes query parameters %v, want none (Idempotency-Key is a header)", got)
	}
}

// TestMalformedQueriesNameTheirParameter: a query url.ParseQuery would read in part is refused,
// naming the parameter to blame; a well-formed one is not.
func TestMalformedQueriesNameTheirParameter(t *testing.T) {
	for _, tc := range []struct {
		raw, field string
		bad        bool
	}{
		{"", "", false},
		{"key=50%25off", "", false},
		{"key=a&limit=5", "", false},
		{"key=a+b&&", "", false},
		{"key=50%off", "key", true},
		{"key=a;b", "key", true},
		{"limit=1&key=a;b", "key", true},
		{"key=a&key=%zz", "key", true},
		{"%zz=1", "%zz", true},
		{"k%65y=%", "key", true},
		{strings.Repeat("a&", 20_000), "", true}, // more parameters than net/url reads
	} {
		_, field, detail, ok := parseQuery(tc.raw)
		bad := !ok
		if bad != tc.bad || field != tc.field {
			t.Errorf("%.40q: bad %v, field %q (%s); want bad %v, field %q", tc.raw, bad, field, detail, tc.bad, tc.field)
		}
	}
}

// FuzzMalformedQuery: parseQuery refuses exactly the queries url.ParseQuery reports, says
// why, and blames a parameter the query has (decoded, or as sent when it cannot be; "" is a
// name too), one that ParseQuery itself drops; only a query of more parameters than net/url
// reads blames none.
func FuzzMalformedQuery(f *testing.F) {
	for _, seed := range []string{"", "key=a", "key=50%off", "key=a;b", "%zz", "a=%2", "a=%%", "&&=", "k%65y=v", "a=1&b=%", "=%"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		parsed, err := url.ParseQuery(raw)
		_, field, detail, ok := parseQuery(raw)
		bad := !ok
		if bad != (err != nil) || bad && detail == "" {
			t.Fatalf("%q: bad %v (%q); url.ParseQuery: %v", raw, bad, detail, err)
		}
		if !bad {
			return
		}
		if strings.HasPrefix(detail, "the query is not well-formed") { // no parameter blamed
			if field != "" || strings.Count(raw, "&") < 1000 {
				t.Fatalf("%q: no parameter blamed (%s)", raw, detail)
			}
			return
		}
		for pair := range strings.SplitSeq(raw, "&") {
			key, value, _ := strings.Cut(pair, "=")
			decoded, kerr := url.QueryUnescape(key)
			if decoded != field && key != field {
				continue
			}
			// The blamed pair is one ParseQuery drops: a ";", or a key or value it cannot decode.
			_, verr := url.QueryUnescape(value)
			if strings.Contains(pair, ";") || kerr != nil || verr != nil {
				return
			}
		}
		t.Fatalf("%q: blames %q (%s), which names no pair url.ParseQuery drops (it read %v)", raw, field, detail, parsed)
	})
}
