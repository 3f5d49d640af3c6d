package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/api"
)

// hostileBodies are bodies no route should accept, each a 4xx problem wherever a body is read.
func hostileBodies() map[string]string {
	deep := strings.Repeat(`{"config":`, 20000) + "1" + strings.Repeat("}", 20000)
	deepArray := `{"limits":` + strings.Repeat("[", 11000) + strings.Repeat("]", 11000) + `}`
	return map[string]string{
		"malformed":                `{"key": "a",`,
		"not json":                 `key=alice&count=1`,
		"empty":                    ``,
		"whitespace":               " \n\t ",
		"null":                     `null`,
		"array":                    `[{"key":"a"}]`,
		"string":                   `"hello"`,
		"number":                   `42`,
		"two objects":              `{} {}`,
		"unknown field":            `{"nope":1}`,
		"wrong types":              `{"key":1,"count":"1","reserve":"yes","throws":0,"config":[],"limits":{},"allKeys":"true","kind":7,"rate":"10"}`,
		"count 1e400":              `{"count":1e400,"limits":[{"name":"x","count":1e400}]}`,
		"rate 1e400":               `{"kind":"token bucket","rate":1e400,"period":1000,"config":{"kind":"token bucket","rate":1e400,"period":1000}}`,
		"rate 1e308":               `{"kind":"token bucket","rate":1e308,"period":1e308,"config":{"kind":"token bucket","rate":1e308,"period":1000}}`,
		"period overflow":          `{"kind":"fixed window","rate":1,"period":99999999999999999999,"start":-99999999999999999999}`,
		"count 1e308":              `{"count":1e308,"reserve":true,"limits":[{"name":"x","count":1e308,"reserve":true}]}`,
		"negative count":           `{"count":-5,"limits":[{"name":"x","count":-5}]}`,
		"negative everything":      `{"kind":"token bucket","rate":-1,"period":-1,"capacity":-1,"maxReserved":-1,"shards":-1,"jitter":-1,"resolution":-1}`,
		"huge shards":              `{"kind":"token bucket","rate":1,"period":1000,"shards":99999999999,"config":{"kind":"token bucket","rate":1,"period":1000,"shards":2147483648}}`,
		"NaN strings":              `{"count":"NaN","rate":"NaN","period":"Infinity","key":"NaN","limits":[{"name":"x","count":"-Infinity"}]}`,
		"NaN literal":              `{"count":NaN}`,
		"overlong key":             `{"key":"` + strings.Repeat("k", 257) + `","limits":[{"name":"x","key":"` + strings.Repeat("k", 257) + `"}]}`,
		"overlong multibyte key":   `{"key":"` + strings.Repeat("é", 129) + `"}`,
		"overlong name":            `{"limits":[{"name":"` + strings.Repeat("n", 129) + `"}]}`,
		"empty name":               `{"limits":[{"name":""}]}`,
		"NUL in key":               `{"key":"a\u0000b","limits":[{"name":"x","key":"a\u0000b"}]}`,
		"NUL in name":              `{"limits":[{"name":"x\u0000"}]}`,
		"lone surrogate":           `{"key":"\ud800","limits":[{"name":"x","key":"\udfff"}]}`,
		"invalid UTF-8":            "{\"key\":\"\xff\xfe\",\"limits\":[{\"name\":\"x\",\"key\":\"\xc3\x28\"}]}",
		"session and key":          `{"key":"a","session":"0123456789abcdef0123","limits":[{"name":"x","key":"a","session":"0123456789abcdef0123"}]}`,
		"bad session":              `{"session":"../../etc/passwd","limits":[{"name":"x","session":"\u0000"}]}`,
		"too many batch items":     `{"limits":[` + strings.TrimSuffix(strings.Repeat(`{"name":"x"},`, api.MaxBatch+1), ",") + `]}`,
		"deeply nested":            deep,
		"deeply nested array":      deepArray,
		"oversized":                `{"key":"` + strings.Repeat("a", api.MaxBodyBytes+10) + `"}`,
		"oversized whitespace":     strings.Repeat(" ", 2*api.MaxBodyBytes),
		"reset nothing":            `{"allKeys":false}`,
		"sliding reserve":          `{"reserve":true,"config":{"kind":"sliding window","rate":1,"period":1000}}`,
		"capacity zero":            `{"kind":"token bucket","rate":1,"period":1000,"capacity":0,"config":{"kind":"token bucket","rate":1,"period":1000,"capacity":0}}`,
		"start on bucket":          `{"kind":"token bucket","rate":1,"period":1000,"start":5}`,
		"duplicate fields":         `{"key":"a","key":1}`,
		"BOM":                      "\xef\xbb\xbf{}",
		"truncated unicode escape": `{"key":"\u12"}`,
	}
}

// semanticCase is a body that decodes but must be refused by the route's validation; name is
// the limit in the path (or batch item): "x" is stored, "fresh" is not.
type semanticCase struct {
	routes []string // "METHOD path" of the routes it is sent to
	name   string
	body   string
}

var (
	decisionRoutes = []string{"POST /v1/limits/:name/limit", "POST /v1/limits/:name/check"}
	batchRoutes    = []string{"POST /v1/limit", "POST /v1/check"}
)

func semanticCases() map[string]semanticCase {
	k257 := strings.Repeat("k", 257)
	cases := map[string]semanticCase{
		"reset NUL key":         {[]string{"POST /v1/limits/:name/reset"}, "x", `{"key":"a\u0000b"}`},
		"reset overlong key":    {[]string{"POST /v1/limits/:name/reset"}, "x", `{"key":"` + k257 + `"}`},
		"reset empty key":       {[]string{"POST /v1/limits/:name/reset"}, "x", `{"key":""}`},
		"reset nothing":         {[]string{"POST /v1/limits/:name/reset"}, "x", `{"allKeys":false}`},
		"reset null key":        {[]string{"POST /v1/limits/:name/reset"}, "x", `{"key":null}`},
		"put rate 1e308":        {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"token bucket","rate":1e308,"period":1000}`},
		"put period overflow":   {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"fixed window","rate":1,"period":9223372036854775807,"start":-9223372036854775808}`},
		"put negative":          {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"token bucket","rate":-1,"period":-1,"capacity":-1,"maxReserved":-1,"shards":-1,"jitter":-1}`},
		"put huge shards":       {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"token bucket","rate":1,"period":1000,"shards":2147483648}`},
		"put capacity zero":     {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"token bucket","rate":1,"period":1000,"capacity":0}`},
		"put resolution":        {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"sliding window","rate":1,"period":10,"resolution":61}`},
		"put period < res":      {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"sliding window","rate":1,"period":10,"resolution":60}`},
		"put start on bucket":   {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"token bucket","rate":1,"period":1000,"start":5}`},
		"put kind NaN":          {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"NaN","rate":1,"period":1000}`},
		"put empty object":      {[]string{"PUT /v1/limits/:name"}, "fresh", `{}`},
		"put jitter overflow":   {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"token bucket","rate":1,"period":1000,"jitter":9223372036854775807}`},
		"put max everything":    {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"token bucket","rate":1e15,"period":316224000001,"capacity":1e16,"maxReserved":1e300}`},
		"NUL key":               {decisionRoutes, "x", `{"key":"a\u0000b"}`},
		"overlong key":          {decisionRoutes, "x", `{"key":"` + k257 + `"}`},
		"overlong multibyte":    {decisionRoutes, "x", `{"key":"` + strings.Repeat("é", 129) + `"}`},
		"count 1e308":           {decisionRoutes, "x", `{"count":1e308}`},
		"count 1e308 reserve":   {decisionRoutes, "x", `{"count":1e308,"reserve":true}`},
		"count max float":       {decisionRoutes, "x", `{"count":1.7976931348623157e308,"reserve":true}`},
		"negative count":        {decisionRoutes, "x", `{"count":-5}`},
		"negative zero reserve": {decisionRoutes, "fresh", `{"count":-0.0001,"config":{"kind":"token bucket","rate":1,"period":1}}`},
		"bad session":           {decisionRoutes, "x", `{"session":"../../etc/passwd"}`},
		"NUL session":           {decisionRoutes, "x", `{"session":"0123456789abcdef\u0000"}`},
		"unauthorized session":  {decisionRoutes, "fresh", `{"session":"0123456789abcdef0123","config":{"kind":"token bucket","rate":1,"period":1}}`},
		"config rate 1e308":     {decisionRoutes, "fresh", `{"config":{"kind":"token bucket","rate":1e308,"period":1000}}`},
		"config huge count":     {decisionRoutes, "fresh", `{"count":1e15,"config":{"kind":"token bucket","rate":1e-300,"period":316224000000}}`},
		"sliding reserve":       {decisionRoutes, "fresh", `{"reserve":true,"config":{"kind":"sliding window","rate":1,"period":1000}}`},
		"config with stored":    {decisionRoutes, "x", `{"config":{"kind":"token bucket","rate":1,"period":1000}}`},
		"no such limit":         {decisionRoutes, "fresh", `{"key":"a"}`},
		"batch NUL key":         {batchRoutes, "x", `{"limits":[{"name":"x","key":"a\u0000b"}]}`},
		"batch NUL name":        {batchRoutes, "x", `{"limits":[{"name":"x\u0000"}]}`},
		"batch overlong name":   {batchRoutes, "x", `{"limits":[{"name":"` + strings.Repeat("n", 129) + `"}]}`},
		"batch empty name":      {batchRoutes, "x", `{"limits":[{"name":""}]}`},
		"batch no name":         {batchRoutes, "x", `{"limits":[{}]}`},
		"batch null limits":     {batchRoutes, "x", `{"limits":null}`},
		"batch null item":       {batchRoutes, "x", `{"limits":[null]}`},
		"batch count 1e308":     {batchRoutes, "x", `{"limits":[{"name":"x","count":1e308}]}`},
		"batch negative count":  {batchRoutes, "x", `{"limits":[{"name":"x","count":-1}]}`},
		"batch too many":        {batchRoutes, "x", `{"limits":[` + strings.TrimSuffix(strings.Repeat(`{"name":"x"},`, api.MaxBatch+1), ",") + `]}`},
		"batch config stored":   {batchRoutes, "x", `{"limits":[{"name":"x","config":{"kind":"token bucket","rate":1,"period":1000}}]}`},
		"batch session":         {batchRoutes, "x", `{"limits":[{"name":"x","session":"0123456789abcdef0123"}]}`},
		"batch key+session":     {batchRoutes, "x", `{"limits":[{"name":"x","key":"a","session":"0123456789abcdef0123"}]}`},
		"batch reserved key":    {batchRoutes, "x", `{"limits":[{"name":"x","key":"ip:1.2.3.4"}]}`},
		"put quota zone path":   {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"quota","rate":1,"calendar":"day","timeZone":"../../../etc/passwd"}`},
		"put quota zone NUL":    {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"quota","rate":1,"calendar":"day","timeZone":"UTC\u0000"}`},
		"put quota zone Local":  {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"quota","rate":1,"calendar":"week","timeZone":"Local"}`},
		"put quota anchor max":  {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"quota","rate":1,"calendar":"month","timeZone":"UTC","anchorDay":2147483648}`},
		"put parents NUL":       {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"token bucket","rate":1,"period":1000,"parents":[{"name":"x","key":"{a}\u0000"}]}`},
		"put parents null item": {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"token bucket","rate":1,"period":1000,"parents":[null]}`},
		"put parent braces":     {[]string{"PUT /v1/limits/:name"}, "fresh", `{"kind":"token bucket","rate":1,"period":1000,"parents":[{"name":"x","key":"{{}}"}]}`},
		"attributes NUL":        {decisionRoutes, "x", `{"attributes":{"a":"\u0000"}}`},
		"attributes null":       {decisionRoutes, "x", `{"attributes":{"a":null}}`},
		"batch attributes":      {batchRoutes, "x", `{"limits":[{"name":"x","attributes":{"":"x"}}]}`},
	}
	return cases
}

// hostilePaths are concrete paths for routes with a {name}: overlong, invalid UTF-8, NUL, dots.
var hostileNames = []string{
	strings.Repeat("n", 129),
	"%FF%FE",
	"%C3%28",
	"a%00b",
	"..",
	"%2e%2e%2fsecrets",
	"na%20me",
	"%E2%80%AE",
	"x",
}

var hostileQueries = []string{
	"?key=%FF",
	"?key=" + strings.Repeat("k", 257),
	"?key=",
	"?key=a%00b",
	"?key=%ED%A0%80",
	"?key=a&key=b",
	"?%zz",
}

// TestNoInputProducesAServerError sends hostile bodies, names and queries to every registered
// /v1 route and requires a client error with a problem body (or, for routes that do not read a
// body, any non-5xx answer) every time.
func TestNoInputProducesAServerError(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		h.define(t, a.key, "x", bucket10PerMinute)
		bodies := hostileBodies()
		for _, ri := range apiRoutes(t, h.router) {
			route := ri.Method + " " + ri.Path
			readsBody := ri.Method == http.MethodPost || ri.Method == http.MethodPut
			for what, body := range bodies {
				name := "x"
				if ri.Method == http.MethodDelete {
					name = "absent" // deleting x would leave the other routes nothing to parse for
				}
				path, _ := validRequest(ri, name, nil)
				r := h.send(t, ri.Method, path, a.key, body)
				if r.status >= 500 {
					t.Errorf("%s with %s: %s", route, what, r)
					continue
				}
				if readsBody && (r.status < 400 || r.status >= 500) {
					t.Errorf("%s accepted a hostile body (%s): %s", route, what, r)
					continue
				}
				if r.status >= 400 {
					problemOf(t, r)
				}
			}
			if !strings.Contains(ri.Path, ":") {
				continue
			}
			for _, name := range hostileNames {
				if name == "x" && ri.Method == http.MethodDelete {
					continue // the one valid name: deleting it would only test 204
				}
				for _, q := range append([]string{""}, hostileQueries...) {
					path := concrete(ri.Path, "NAME", nil)
					path = strings.Replace(path, "NAME", name, 1) + q
					_, body := validRequest(ri, "x", nil)
					r := h.send(t, ri.Method, path, a.key, body)
					if r.status >= 500 {
						t.Errorf("%s %s: %s", ri.Method, path, r)
					} else if r.status >= 400 {
						problemOf(t, r)
					}
				}
			}
		}
		registered := map[string]bool{}
		for _, ri := range apiRoutes(t, h.router) {
			registered[ri.Method+" "+ri.Path] = true
		}
		for what, sc := range semanticCases() {
			for _, route := range sc.routes {
				if !registered[route] {
					t.Fatalf("case %q names unregistered route %s", what, route)
				}
				method, path, _ := strings.Cut(route, " ")
				r := h.send(t, method, concrete(path, sc.name, nil), a.key, sc.body)
				if r.status < 400 || r.status >= 500 {
					t.Errorf("%s %s with %s (%s): %s", method, concrete(path, sc.name, nil), what, truncate(sc.body, 120), r)
					continue
				}
				problemOf(t, r)
			}
		}
		// none of it consumed anything
		v := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/x/value", a.key, nil), http.StatusOK)
		if number(t, v, "value") != 10 {
			t.Errorf("x after hostile requests = %v, want untouched 10", v)
		}
		// an unknown /v1 path with hostile bytes is a not_found problem too
		r := h.send(t, http.MethodGet, "/v1/%FF/%00/"+strings.Repeat("z", 5000), a.key, nil)
		requireProblem(t, r, http.StatusNotFound, api.CodeNotFound)
	})
}

func TestPanicBecomesAGenericProblemThatLeaksNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteURL(t))
	const secret = "password=hunter2 at /srv/sluice/internal/limiter/engine.go:123"
	// Added before any request reaches this route; gin's trees are not read concurrently yet.
	h.router.GET("/v1/test-panic", func(*gin.Context) { panic(errors.New(secret)) })

	r := sendAuth(t, h.url, http.MethodGet, "/v1/test-panic", "", nil)
	p := requireProblem(t, r, http.StatusInternalServerError, api.CodeInternal)
	for _, leak := range []string{"hunter2", "engine.go", "goroutine", "panic", "password"} {
		if bytes.Contains(r.body, []byte(leak)) {
			t.Fatalf("500 body leaks %q: %s", leak, r.body)
		}
	}
	if p["detail"] != "internal error" || p["requestId"] == "" || p["requestId"] != r.header.Get("X-Request-ID") {
		t.Fatalf("problem = %v, X-Request-ID %q", p, r.header.Get("X-Request-ID"))
	}
	// the server survived
	requireJSON(t, sendAuth(t, h.url, http.MethodGet, "/v1/openapi.json", "", nil), http.StatusOK)
}

// fuzzRouter is the real router over a SQLite file with one tenant and a limit "x".
func fuzzRouter(f *testing.F) (http.Handler, string) {
	f.Helper()
	h := newHarness(f, sqliteURL(f))
	a := h.newTenant(f, "fuzz")
	h.define(f, a.key, "x", bucket10PerMinute)
	return h.router, a.key
}

// FuzzDecisionBody feeds arbitrary bytes as the body of the decision routes of the real router
// on SQLite and fails on any 5xx.
func FuzzDecisionBody(f *testing.F) {
	for _, b := range hostileBodies() {
		if len(b) < 4096 {
			f.Add([]byte(b))
		}
	}
	for _, b := range []string{
		`{"key":"alice"}`, `{"key":"alice","count":3,"throws":true}`, `{"reserve":true,"count":20}`,
		`{"config":{"kind":"sliding window","rate":5,"period":1000,"resolution":10}}`,
		`{"limits":[{"name":"x","key":"a"},{"name":"y","config":{"kind":"fixed window","rate":1,"period":1,"start":0}}],"throws":true}`,
		`{"session":"0123456789abcdef0123"}`,
	} {
		f.Add([]byte(b))
	}
	router, key := fuzzRouter(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, path := range []string{"/v1/limits/x/limit", "/v1/limit"} {
			req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			router.ServeHTTP(rec, req)
			checkContract(t, request{method: http.MethodPost, target: path, contentType: "application/json", body: body}, response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()})
			if rec.Code >= 500 {
				t.Fatalf("POST %s with %q: %d %s", path, body, rec.Code, rec.Body.String())
			}
			if rec.Code >= 400 && rec.Header().Get("Content-Type") != "application/problem+json" {
				t.Fatalf("POST %s with %q: %d without a problem body: %s", path, body, rec.Code, rec.Body.String())
			}
		}
	})
}

// TestDeepNestingCostsLinearMemory: the strict decoder's walk for duplicate members costs
// memory linear in a body's depth. It used to build every member's full path, quadratic: 129 MB
// and 1.6 GB for these 64 KiB bodies, 1.4 GB for the 220 KB "deeply nested" body that the 1 MiB
// bulk route reads, slow enough on a busy machine for the server's WriteTimeout to drop the
// connection without an answer (TestNoInputProducesAServerError: POST /v1/decisions: EOF).
func TestDeepNestingCostsLinearMemory(t *testing.T) {
	depth := (api.MaxBodyBytes - 1) / len(`{"config":}`)
	for what, body := range map[string]string{
		"objects": strings.Repeat(`{"config":`, depth) + "1" + strings.Repeat("}", depth),
		"arrays":  `{"limits":` + strings.Repeat("[", (api.MaxBodyBytes-12)/2) + strings.Repeat("]", (api.MaxBodyBytes-12)/2) + `}`,
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := api.DecodeStrict([]byte(body), new(api.BulkBody))
		runtime.ReadMemStats(&after)
		if p := api.ProblemFor(err); err == nil || p.Status != http.StatusBadRequest {
			t.Errorf("%s (%d bytes): %v, want a 400", what, len(body), err)
		}
		if mb := (after.TotalAlloc - before.TotalAlloc) >> 20; mb > 32 {
			t.Errorf("%s (%d bytes): decoding allocated %d MB", what, len(body), mb)
		}
	}
}

// TestLoneSurrogatesAreRefused: a \u escape of a UTF-16 surrogate without its pair, which
// encoding/json decodes as U+FFFD (so that every such key would be one key), is a 400; a pair, an
// escaped backslash before "u", and U+FFFD itself are not.
func TestLoneSurrogatesAreRefused(t *testing.T) {
	for body, refused := range map[string]bool{
		`{"key":"\ud800"}`:          true,
		`{"key":"\uDC00"}`:          true,
		`{"key":"a\ud83dz"}`:        true,
		`{"key":"\ud83d\u0041"}`:    true,
		`{"key":"\ude00\ud83d"}`:    true,
		`{"key":"\ud83d"}`:          true,
		`{"k\udbff":"x"}`:           true,
		`{"key":"\ud83d\ude00"}`:    false,
		`{"key":"\\ud800"}`:         false,
		`{"key":"\ufffd"}`:          false,
		`{"key":"\u0041\\\\ud800"}`: false,
	} {
		err := api.DecodeStrict([]byte(body), new(api.DecisionBody))
		if got := err != nil && api.ProblemFor(err).Status == http.StatusBadRequest && strings.Contains(err.Error(), "surrogate"); got != refused {
			t.Errorf("%s: %v; want refused for a lone surrogate: %v", body, err, refused)
		}
	}
}

// FuzzDecodeStrict checks the strict decoder directly: it never panics, and whatever it accepts
// is a single JSON object that re-encodes and decodes to the same value, with no U+FFFD the body
// did not spell (a lone surrogate decoded as one).
func FuzzDecodeStrict(f *testing.F) {
	for _, b := range hostileBodies() {
		if len(b) < 4096 {
			f.Add([]byte(b))
		}
	}
	f.Add([]byte(`{"kind":"token bucket","rate":10,"period":60000,"capacity":5}`))
	f.Add([]byte(`{"limits":[{"name":"a","key":"b","count":1.5}],"throws":true}`))
	f.Add([]byte(`{"key":"k","allKeys":false}`))
	f.Add([]byte(`{"key":"\ud800"}`))
	f.Add([]byte(`{"key":"\ud83d\ude00"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		targets := []func() any{
			func() any { return new(api.DecisionBody) },
			func() any { return new(api.BatchBody) },
			func() any { return new(api.ResetBody) },
			func() any { return new(api.DefinitionBody) },
		}
		for _, newDst := range targets {
			dst := newDst()
			err := api.DecodeStrict(body, dst)
			if err != nil {
				p := api.ProblemFor(err)
				if p.Status != http.StatusBadRequest && p.Status != http.StatusRequestEntityTooLarge {
					t.Fatalf("DecodeStrict(%q) into %T: problem %d %s (%v)", body, dst, p.Status, p.Code, err)
				}
				continue
			}
			if len(body) > api.MaxBodyBytes {
				t.Fatalf("DecodeStrict accepted %d bytes", len(body))
			}
			if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) == 0 || (trimmed[0] != '{' && !bytes.HasPrefix(trimmed, []byte("null"))) {
				t.Fatalf("DecodeStrict(%q) into %T accepted a non-object", body, dst)
			}
			again, err := json.Marshal(dst)
			if err != nil {
				t.Fatalf("re-encode %T: %v", dst, err)
			}
			if spelled := bytes.Contains(body, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`)); !spelled && bytes.Contains(again, []byte("\uFFFD")) {
				t.Fatalf("DecodeStrict(%q) into %T decoded a U+FFFD the body does not spell: %s", body, dst, again)
			}
			dst2 := newDst()
			if err := api.DecodeStrict(again, dst2); err != nil {
				t.Fatalf("DecodeStrict rejects its own output %s: %v", again, err)
			}
		}
	})
}

// TestBoundaryDefinitionsDecideWithoutOverflow drives valid definitions at the edges of their
// bounds (tiny and huge rates, the longest periods, most shards, most jitter) through decisions,
// throws, values and headers: every answer is a sane 200 or 429, never a 5xx or a negative wait.
func TestBoundaryDefinitionsDecideWithoutOverflow(t *testing.T) {
	defs := map[string]string{
		"tiny":      `{"kind":"token bucket","rate":5e-324,"period":316224000000,"capacity":1}`,
		"tinyFixed": `{"kind":"fixed window","rate":5e-324,"period":316224000000,"capacity":1,"start":-1125899906842624}`,
		"tinySlide": `{"kind":"sliding window","rate":1e-300,"period":316224000000,"resolution":60}`,
		"huge":      `{"kind":"token bucket","rate":1e15,"period":1,"maxReserved":1e15}`,
		"hugeSlide": `{"kind":"sliding window","rate":1e15,"period":60,"resolution":60}`,
		"sharded":   `{"kind":"token bucket","rate":1,"period":316224000000,"shards":1024}`,
		"slow":      `{"kind":"token bucket","rate":1,"period":316224000000}`,
		"jittery":   `{"kind":"fixed window","rate":1,"period":316224000000,"jitter":86400000,"start":1125899906842624}`,
	}
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		for name, def := range defs {
			requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/"+name, a.key, def), http.StatusOK)
			for _, body := range []string{`{"count":1}`, `{"count":1}`, `{"count":1e15,"reserve":true}`, `{"count":0.001,"throws":true}`, `{"count":1,"throws":true}`} {
				for _, route := range []string{"/limit", "/check"} {
					r := h.send(t, http.MethodPost, "/v1/limits/"+name+route, a.key, body)
					switch {
					case r.status == http.StatusOK:
						d := requireJSON(t, r, http.StatusOK)
						if ra, ok := d["retryAfter"].(float64); ok && ra < 0 {
							t.Errorf("%s%s %s: negative retryAfter: %s", name, route, body, r)
						}
					case r.status == http.StatusTooManyRequests:
						requireProblem(t, r, http.StatusTooManyRequests, api.CodeRateLimited)
						if ra := r.header.Get("Retry-After"); ra == "" || strings.HasPrefix(ra, "-") {
							t.Errorf("%s%s %s: Retry-After %q", name, route, body, ra)
						}
					case r.status >= 500:
						t.Errorf("%s%s %s: %s", name, route, body, r)
					default:
						problemOf(t, r)
					}
					if strings.Contains(r.header.Get("RateLimit"), "=-") || strings.Contains(r.header.Get("RateLimit-Policy"), "=-") {
						t.Errorf("%s%s %s: negative header values: RateLimit %q, RateLimit-Policy %q", name, route, body,
							r.header.Get("RateLimit"), r.header.Get("RateLimit-Policy"))
					}
				}
			}
			batch := `{"limits":[{"name":"` + name + `","count":1},{"name":"huge","count":1}],"throws":true}`
			if r := h.send(t, http.MethodPost, "/v1/limit", a.key, batch); r.status >= 500 {
				t.Errorf("batch with %s: %s", name, r)
			}
			if r := h.send(t, http.MethodGet, "/v1/limits/"+name+"/value", a.key, nil); r.status != http.StatusOK {
				t.Errorf("value of %s: %s", name, r)
			}
		}
	})
}
