package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/apperr"
)

// The contract check: every response an API test receives is validated against openapi.json, so
// the document cannot promise what the server does not do; and so is every request body the
// tests send to a documented operation, so that the document cannot ask for what the server
// refuses or refuse what the server takes. A response passes when the document
// has an operation for its path and method, a response for its status (or "default"), a content
// type for its Content-Type (or no content and an empty body), and a schema its body is valid
// against (JSON Schema 2020-12, as OpenAPI 3.1 uses). A problem's status and code must agree with
// the HTTP status, and its code is in the document's enum through the Problem schema.
//
// A request body is checked against the operation's requestBody: its content type must be
// documented and the body valid against the schema, and an operation whose requestBody is
// required must get one. The tests send invalid requests on purpose (the robustness and fuzz
// tests, the field errors); such a request is exempt, and only then: when the server refused it
// with a 4xx problem. An invalid request that the server accepted, or answered otherwise, fails.
//
// A response's headers are checked against the headers the document declares for its status: a
// declared header that is present must match its schema (an integer schema wants a whole number),
// and one declared "required" must be present. A decision's answer (2xx) whose operation declares
// RateLimit and RateLimit-Policy must carry both unless every decision in it is a shadow one
// (RateLimitHeaders leaves those out); the two come together or not at all. And whatever the
// operation, some statuses always carry a header (statusHeaders: Retry-After on 429 and 503,
// WWW-Authenticate on 401), which the document does not declare.
//
// Some answers belong to no operation, as info.description says: a path the document does not
// have is 404 not_found, a known path asked with another method is 405 method_not_allowed with an
// Allow header naming the documented methods, a body over the cap is 413 payload_too_large before
// routing, and any request may meet 500 internal (a bug). A bug all the same: checkContract fails
// a 500 unless the test expects one (serverErrorTests), so that a 500 on bad input fails every
// test that meets it, not only one that asserts the status.

// contractDocURL is where the compiler files the document; nothing is ever fetched from it.
const contractDocURL = "https://sluice.invalid/v1/openapi.json"

// contract is openapi.json compiled for checking responses.
type contract struct {
	routes  []contractRoute
	problem *jsonschema.Schema // #/components/schemas/Problem, for the answers of no operation
}

// contractRoute is one path of the document.
type contractRoute struct {
	template string
	segments []string                          // "{name}" segments match any one non-empty segment
	ops      map[string]map[string]docResponse // method → status ("200", "default") → response
	bodies   map[string]docRequestBody         // method → its requestBody, when it documents one
}

// docRequestBody is an operation's documented requestBody.
type docRequestBody struct {
	required bool
	content  map[string]*jsonschema.Schema // by media type
}

// request is what a test sent: the method, the target (a path with an optional query), and the
// body with its Content-Type (none: nil).
type request struct {
	method, target string
	contentType    string
	body           []byte
	// serverError says the test provokes a 500 on purpose (checkContract sets it from
	// serverErrorTests): any other 500 fails the check.
	serverError bool
}

// docResponse is one documented response: its schemas by media type (none for a bodiless one)
// and its headers by canonical name.
type docResponse struct {
	content map[string]*jsonschema.Schema // a nil schema accepts any body of that type
	headers map[string]docHeader
}

// docHeader is one documented response header.
type docHeader struct {
	required bool
	typ      string             // the schema's type ("integer", "string"), to read the value as
	schema   *jsonschema.Schema // nil: any value
}

var loadContract = sync.OnceValues(func() (*contract, error) { return compileContract(api.OpenAPIDocument) })

// compileContract compiles every response schema of doc, resolving $ref within the document.
func compileContract(doc []byte) (*contract, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("contract: parse the document: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat() // date-time fields must be RFC 3339
	if err := c.AddResource(contractDocURL, v); err != nil {
		return nil, fmt.Errorf("contract: add the document: %w", err)
	}
	compile := func(ptr ...string) (*jsonschema.Schema, error) {
		loc := contractDocURL + "#"
		for _, p := range ptr {
			loc += "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(p)
		}
		s, err := c.Compile(loc)
		if err != nil {
			return nil, fmt.Errorf("contract: compile %s: %w", loc, err)
		}
		return s, nil
	}
	out := &contract{}
	if out.problem, err = compile("components", "schemas", "Problem"); err != nil {
		return nil, err
	}

	paths, _ := v.(map[string]any)["paths"].(map[string]any)
	if len(paths) == 0 {
		return nil, errors.New("contract: the document has no paths")
	}
	for template, item := range paths {
		r := contractRoute{template: template, segments: strings.Split(template, "/"), ops: map[string]map[string]docResponse{}, bodies: map[string]docRequestBody{}}
		for method, op := range item.(map[string]any) {
			if method == "parameters" || method == "summary" || method == "description" {
				continue
			}
			responses, _ := op.(map[string]any)["responses"].(map[string]any)
			if len(responses) == 0 {
				return nil, fmt.Errorf("contract: %s %s documents no response", method, template)
			}
			byStatus := map[string]docResponse{}
			for status, resp := range responses {
				rs := docResponse{content: map[string]*jsonschema.Schema{}, headers: map[string]docHeader{}}
				headers, _ := resp.(map[string]any)["headers"].(map[string]any)
				for name, h := range headers {
					hm, _ := h.(map[string]any)
					dh := docHeader{}
					dh.required, _ = hm["required"].(bool)
					if sch, ok := hm["schema"].(map[string]any); ok {
						dh.typ, _ = sch["type"].(string)
						if dh.schema, err = compile("paths", template, method, "responses", status, "headers", name, "schema"); err != nil {
							return nil, err
						}
					}
					rs.headers[http.CanonicalHeaderKey(name)] = dh
				}
				content, _ := resp.(map[string]any)["content"].(map[string]any)
				for mt, media := range content {
					if _, ok := media.(map[string]any)["schema"]; !ok {
						rs.content[mt] = nil
						continue
					}
					s, err := compile("paths", template, method, "responses", status, "content", mt, "schema")
					if err != nil {
						return nil, err
					}
					rs.content[mt] = s
				}
				byStatus[status] = rs
			}
			r.ops[strings.ToUpper(method)] = byStatus
			if rb, ok := op.(map[string]any)["requestBody"].(map[string]any); ok {
				body := docRequestBody{content: map[string]*jsonschema.Schema{}}
				body.required, _ = rb["required"].(bool)
				content, _ := rb["content"].(map[string]any)
				for mt := range content {
					s, err := compile("paths", template, method, "requestBody", "content", mt, "schema")
					if err != nil {
						return nil, err
					}
					body.content[mt] = s
				}
				r.bodies[strings.ToUpper(method)] = body
			}
		}
		out.routes = append(out.routes, r)
	}
	// Literal segments before templated ones, as OpenAPI (and gin) match them.
	slices.SortFunc(out.routes, func(a, b contractRoute) int {
		return strings.Count(a.template, "{") - strings.Count(b.template, "{")
	})
	return out, nil
}

// matches reports whether the request path's segments fit the route's template.
func (r contractRoute) matches(segments []string) bool {
	if len(segments) != len(r.segments) {
		return false
	}
	for i, s := range r.segments {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			if segments[i] == "" {
				return false
			}
			continue
		}
		if s != segments[i] {
			return false
		}
	}
	return true
}

// covers reports whether the document speaks for path: the API under /v1 and whatever else it
// documents (the JWK set). The dashboard and the operations routes are not its business.
func (c *contract) covers(path string) bool {
	if api.IsAPIPath(path) {
		return true
	}
	segments := strings.Split(path, "/")
	return slices.ContainsFunc(c.routes, func(r contractRoute) bool { return r.matches(segments) })
}

// check validates one request and its response against the document; nil when the document
// allows both. A 500 passes only when req.serverError says the test expects one.
func (c *contract) check(req request, r response) error {
	method, target := req.method, req.target
	u, err := url.Parse(target)
	if err != nil {
		return fmt.Errorf("unparsable request target: %w", err)
	}
	if !c.covers(u.Path) {
		return nil
	}
	if r.status == http.StatusInternalServerError {
		if !req.serverError {
			return fmt.Errorf("500 internal is a bug (%s); a test that provokes one on purpose says so in serverErrorTests", truncate(string(r.body), 200))
		}
		return c.checkProblem(r, apperr.Internal)
	}
	if method == http.MethodHead { // the document's rule: GET's answer without its body
		if len(r.body) > 0 {
			return fmt.Errorf("HEAD answered a body of %d bytes", len(r.body))
		}
		return nil // TestHeadIsTheGetWithoutItsBody holds it to its GET
	}
	if err := checkStatusHeaders(r); err != nil {
		return err
	}
	segments := strings.Split(u.Path, "/")
	var known []contractRoute
	for _, route := range c.routes {
		if !route.matches(segments) {
			continue
		}
		known = append(known, route)
		if responses, ok := route.ops[method]; ok {
			if err := checkResponse(route.template, responses, r); err != nil {
				return err
			}
			return checkRequest(route.template, route.bodies[method], req, r)
		}
	}
	if r.status == http.StatusRequestEntityTooLarge { // the body cap comes before routing
		return c.checkProblem(r, apperr.PayloadTooLarge)
	}
	if len(known) == 0 {
		if r.status != http.StatusNotFound {
			return fmt.Errorf("no documented path matches; only 404 not_found may answer it")
		}
		return c.checkProblem(r, apperr.NotFound)
	}
	if r.status != http.StatusMethodNotAllowed {
		return fmt.Errorf("%s is not documented for %s; only 405 method_not_allowed may answer it", method, known[0].template)
	}
	var want []string
	for _, route := range known {
		for m := range route.ops {
			want = append(want, m)
			if m == http.MethodGet { // the document's rule: HEAD is answered wherever GET is
				want = append(want, http.MethodHead)
			}
		}
	}
	slices.Sort(want)
	want = slices.Compact(want)
	var allow []string
	for _, m := range strings.Split(r.header.Get("Allow"), ",") {
		if m = strings.TrimSpace(m); m != "" {
			allow = append(allow, m)
		}
	}
	slices.Sort(allow)
	if !slices.Equal(allow, want) {
		return fmt.Errorf("Allow %q, want the documented methods %v", r.header.Get("Allow"), want)
	}
	return c.checkProblem(r, apperr.MethodNotAllowed)
}

// checkRequest validates the body of a request to an operation (its requestBody: nil content
// when it documents none). An invalid request passes only when r refused it with a 4xx problem,
// or, for the bulk route, when each item the document refuses got a problem of its own.
func checkRequest(template string, doc docRequestBody, req request, r response) error {
	if len(doc.content) == 0 && req.method != http.MethodPost && req.method != http.MethodPut && req.method != http.MethodPatch {
		// A body on a GET or DELETE has no meaning (RFC 9110) and the server does not read it;
		// TestNoInputProducesAServerError sends them to prove so.
		return nil
	}
	invalid := requestError(doc, req)
	if invalid == nil {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(r.header.Get("Content-Type"))
	if r.status >= 400 && r.status < 500 && mt == "application/problem+json" {
		return nil // sent to be refused, and refused
	}
	if template == "/v1/decisions" && r.status == http.StatusOK && bulkItemsRefused(invalid, r.body) {
		return nil
	}
	return fmt.Errorf("the request body %q does not match the document's requestBody of %s %s (%w), yet the server answered %d",
		truncate(string(req.body), 200), req.method, template, invalid, r.status)
}

// bulkItemsRefused reports whether every place where the document refuses a bulk request is
// inside an item (/decisions/i/…) whose result in the 200 answer is an error: a bad item is
// answered on its own, as the route promises, and is no reason to refuse the others.
func bulkItemsRefused(invalid error, answer []byte) bool {
	var ve *jsonschema.ValidationError
	if !errors.As(invalid, &ve) {
		return false
	}
	var body struct {
		Results []map[string]json.RawMessage `json:"results"`
	}
	if json.Unmarshal(answer, &body) != nil {
		return false
	}
	var leaves func(e *jsonschema.ValidationError) bool
	leaves = func(e *jsonschema.ValidationError) bool {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				if !leaves(c) {
					return false
				}
			}
			return true
		}
		if len(e.InstanceLocation) < 2 || e.InstanceLocation[0] != "decisions" {
			return false
		}
		i, err := strconv.Atoi(e.InstanceLocation[1])
		if err != nil || i < 0 || i >= len(body.Results) {
			return false
		}
		_, refused := body.Results[i]["error"]
		return refused
	}
	return leaves(ve)
}

// requestError says why the document does not allow the request's body; nil when it does.
func requestError(doc docRequestBody, req request) error {
	if len(req.body) == 0 {
		if doc.required {
			return errors.New("the requestBody is required")
		}
		return nil
	}
	if len(doc.content) == 0 {
		return errors.New("the operation documents no request body")
	}
	// The server reads every body as JSON whatever its Content-Type says (the document's
	// description says so: curl -d sends application/x-www-form-urlencoded), so a body of
	// another type is held to the application/json schema.
	mt, _, err := mime.ParseMediaType(req.contentType)
	if err != nil {
		mt = "application/json"
	}
	schema, ok := doc.content[mt]
	if !ok {
		if schema, ok = doc.content["application/json"]; !ok {
			return fmt.Errorf("request Content-Type %q is not documented (documented: %v)", req.contentType, slices.Sorted(maps.Keys(doc.content)))
		}
	}
	body, err := jsonschema.UnmarshalJSON(bytes.NewReader(req.body))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if err := schema.Validate(body); err != nil {
		return fmt.Errorf("does not match the schema: %w", err)
	}
	return nil
}

// checkProblem validates a problem answered outside any operation: its schema, and its code.
func (c *contract) checkProblem(r response, code apperr.Code) error {
	if err := checkBody(r, "application/problem+json", c.problem); err != nil {
		return err
	}
	body, _ := jsonschema.UnmarshalJSON(bytes.NewReader(r.body))
	if got := body.(map[string]any)["code"]; got != string(code) {
		return fmt.Errorf("problem code %v, want %s", got, code)
	}
	return nil
}

// statusHeaders are the headers every answer with a status carries, whatever the route
// (writeProblem sets them): the document declares none of them, so they are checked here.
var statusHeaders = map[int][]struct{ name, typ string }{
	http.StatusUnauthorized:       {{"WWW-Authenticate", "string"}},
	http.StatusTooManyRequests:    {{"Retry-After", "integer"}},
	http.StatusServiceUnavailable: {{"Retry-After", "integer"}},
}

// checkStatusHeaders checks statusHeaders.
func checkStatusHeaders(r response) error {
	for _, h := range statusHeaders[r.status] {
		v := r.header.Values(h.name)
		if len(v) == 0 {
			return fmt.Errorf("a %d answer without its %s header", r.status, h.name)
		}
		if err := checkHeaderValue(h.name, v, docHeader{typ: h.typ}); err != nil {
			return err
		}
	}
	return nil
}

// checkHeaders validates r's headers against those documented for its status: present when
// required, valid against the schema when present; RateLimit and RateLimit-Policy together, and
// on a decision's answer unless all its decisions are shadow ones.
func checkHeaders(doc docResponse, r response) error {
	for _, name := range slices.Sorted(maps.Keys(doc.headers)) {
		h := doc.headers[name]
		v := r.header.Values(name)
		if len(v) == 0 {
			if h.required {
				return fmt.Errorf("the documented required header %s is missing", name)
			}
			continue
		}
		if err := checkHeaderValue(name, v, h); err != nil {
			return err
		}
	}
	_, policyDoc := doc.headers["Ratelimit-Policy"]
	_, limitDoc := doc.headers["Ratelimit"]
	if !policyDoc || !limitDoc {
		return nil
	}
	policy, limit := r.header.Get("RateLimit-Policy") != "", r.header.Get("RateLimit") != ""
	if policy != limit {
		return fmt.Errorf("RateLimit-Policy %q and RateLimit %q: one without the other", r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit"))
	}
	if !policy && r.status < 300 && enforcedDecisions(r.body) {
		return errors.New("a decision's answer without its RateLimit and RateLimit-Policy headers (only an all-shadow answer goes without)")
	}
	return nil
}

// enforcedDecisions reports whether a decision's answer (one decision, or a batch's or a hold's
// results) holds a decision of a limit not in shadow mode.
func enforcedDecisions(body []byte) bool {
	var one struct {
		Name    *string           `json:"name"`
		Shadow  json.RawMessage   `json:"shadow"`
		Results []json.RawMessage `json:"results"`
	}
	if json.Unmarshal(body, &one) != nil {
		return false
	}
	if one.Name != nil {
		return one.Shadow == nil
	}
	return slices.ContainsFunc(one.Results, func(d json.RawMessage) bool { return enforcedDecisions(d) })
}

// checkHeaderValue validates one header's values against its documented schema: once, with the
// value read as a whole number when the schema is an integer's.
func checkHeaderValue(name string, values []string, h docHeader) error {
	if len(values) > 1 {
		return fmt.Errorf("header %s is sent %d times: %q", name, len(values), values)
	}
	v := values[0]
	var instance any = v
	switch h.typ {
	case "integer", "number":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || strings.TrimSpace(v) != v || strings.HasPrefix(v, "+") {
			return fmt.Errorf("header %s: %q is not a whole number", name, v)
		}
		instance = json.Number(strconv.FormatInt(n, 10))
	}
	if h.schema == nil {
		return nil
	}
	if err := h.schema.Validate(instance); err != nil {
		return fmt.Errorf("header %s: %q does not match its schema: %w", name, v, err)
	}
	return nil
}

// checkResponse validates r against the responses documented for one operation.
func checkResponse(template string, responses map[string]docResponse, r response) error {
	doc, ok := responses[fmt.Sprint(r.status)]
	if !ok {
		if doc, ok = responses["default"]; !ok {
			return fmt.Errorf("status %d is not documented for %s (documented: %v)", r.status, template, slices.Sorted(maps.Keys(responses)))
		}
	}
	if err := checkResponseBody(doc, r); err != nil {
		return err
	}
	return checkHeaders(doc, r)
}

// checkResponseBody validates r's content type and body against one documented response.
func checkResponseBody(doc docResponse, r response) error {
	if len(doc.content) == 0 {
		if len(r.body) != 0 {
			return fmt.Errorf("the documented response has no content, but the body is %q", truncate(string(r.body), 200))
		}
		return nil
	}
	ct := r.header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return fmt.Errorf("Content-Type %q: %w", ct, err)
	}
	schema, ok := doc.content[mt]
	if !ok {
		return fmt.Errorf("Content-Type %q is not documented (documented: %v)", ct, slices.Sorted(maps.Keys(doc.content)))
	}
	return checkBody(r, mt, schema)
}

// checkBody validates the body of a response whose media type is mt; a problem's status must
// also be the HTTP status, and its code one that stands for that status.
func checkBody(r response, mt string, schema *jsonschema.Schema) error {
	if got, _, _ := mime.ParseMediaType(r.header.Get("Content-Type")); got != mt {
		return fmt.Errorf("Content-Type %q, want %s", r.header.Get("Content-Type"), mt)
	}
	body, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.body))
	if err != nil {
		return fmt.Errorf("body is not JSON: %w: %q", err, truncate(string(r.body), 200))
	}
	if schema != nil {
		if err := schema.Validate(body); err != nil {
			return fmt.Errorf("body %s\ndoes not match the schema: %w", truncate(string(r.body), 400), err)
		}
	}
	if mt != "application/problem+json" {
		return nil
	}
	p, _ := body.(map[string]any)
	code, _ := p["code"].(string)
	if status := fmt.Sprint(p["status"]); status != fmt.Sprint(r.status) {
		return fmt.Errorf("problem status %s differs from the HTTP status %d", status, r.status)
	}
	if want := apperr.Code(code).Status(); want != r.status {
		return fmt.Errorf("problem code %q stands for %d, not %d", code, want, r.status)
	}
	return nil
}

// serverErrorTests are the tests that provoke a 500 on purpose, by name (their subtests too),
// each with why: for any other test a 500 is a bug that checkContract fails.
var serverErrorTests = map[string]string{
	"TestPanicBecomesAGenericProblemThatLeaksNothing":        "a handler panics on purpose: the recovered panic is a 500",
	"TestDefinitionChangesCommitWithTheirAuditEntryAndEvent": "the outbox's table is renamed away, so a definition change fails whole with a 500",
	"TestResetsAndOverrideChangesCommitWithTheirAuditEntry":  "the audit log's table is renamed away, so resets and override changes fail whole with a 500",
}

// expectsServerError reports whether t (or the test it is a subtest of) is in serverErrorTests.
func expectsServerError(t testing.TB) bool {
	name := t.Name()
	for {
		if _, ok := serverErrorTests[name]; ok {
			return true
		}
		i := strings.LastIndex(name, "/")
		if i < 0 {
			return false
		}
		name = name[:i]
	}
}

// checkContract fails t (without stopping it: callers may be goroutines) when the document does
// not allow req, or r as its answer; a 500 fails it unless t expects one (serverErrorTests).
func checkContract(t testing.TB, req request, r response) {
	t.Helper()
	c, err := loadContract()
	if err != nil {
		t.Errorf("openapi.json: %v", err)
		return
	}
	req.serverError = req.serverError || expectsServerError(t)
	if err := c.check(req, r); err != nil {
		t.Errorf("contract: %s %s answered %d: %v", req.method, req.target, r.status, err)
	}
}

// TestContractCheckRejectsWhatTheDocumentDoesNotAllow proves the check every API test relies on
// can fail: wrong bodies, codes, statuses, content types and Allow headers are each rejected,
// while the right answers pass.
func TestContractCheckRejectsWhatTheDocumentDoesNotAllow(t *testing.T) {
	t.Parallel()
	c, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	jsonCT := http.Header{"Content-Type": {"application/json; charset=utf-8"}}
	problemCT := http.Header{"Content-Type": {"application/problem+json"}}
	const stored = `"name":"x","rate":10,"period":60000,"shards":1,"jitter":0,"ipFallback":false,"createdAt":"2026-01-02T03:04:05Z","updatedAt":"2026-01-02T03:04:05Z"`
	problem := func(status int, code string) []byte {
		return fmt.Appendf(nil, `{"type":"urn:sluice:problem:%s","title":"T","status":%d,"detail":"d","code":%q,"requestId":"r"}`, code, status, code)
	}
	with405 := func(allow string) http.Header {
		return http.Header{"Content-Type": {"application/problem+json"}, "Allow": {allow}}
	}
	decision := []byte(`{"ok":true,"retryAfter":null,"remaining":1,"name":"x","key":"a"}`)
	shadowDecision := []byte(`{"ok":true,"retryAfter":null,"remaining":1,"name":"s","key":"a","shadow":{"ok":false,"retryAfter":5}}`)
	for _, tc := range []struct {
		name, method, target string
		r                    response
		want                 string // a part of the error; "" when the response is allowed
	}{
		{"a stored definition", "PUT", "/v1/limits/x", response{200, jsonCT, []byte(`{"kind":"token bucket",` + stored + `}`)}, ""},
		{"a list of definitions", "GET", "/v1/limits", response{200, jsonCT, []byte(`{"limits":[{"kind":"fixed window","start":0,` + stored + `}]}`)}, ""},
		{"a documented problem", "GET", "/v1/limits/x?key=a", response{404, problemCT, problem(404, "limit_not_found")}, ""},
		{"a bodiless 204", "DELETE", "/v1/limits/x", response{204, http.Header{}, nil}, ""},
		{"405 naming the documented methods", "POST", "/v1/limits/x", response{405, with405("GET, PUT, DELETE, HEAD"), problem(405, "method_not_allowed")}, ""},
		{"405 without HEAD beside GET", "POST", "/v1/limits/x", response{405, with405("GET, PUT, DELETE"), problem(405, "method_not_allowed")}, "want the documented methods"},
		{"a HEAD with a body", "HEAD", "/v1/limits", response{200, jsonCT, []byte(`{"limits":[]}`)}, "HEAD answered a body"},
		{"404 for an undocumented path", "GET", "/v1/nothing/here", response{404, problemCT, problem(404, "not_found")}, ""},
		{"413 before routing", "PUT", "/v1/nothing/here", response{413, problemCT, problem(413, "payload_too_large")}, ""},
		{"the dashboard, which the document does not describe", "GET", "/dashboard", response{200, http.Header{"Content-Type": {"text/html"}}, []byte("<html>")}, ""},

		{"a definition without kind", "GET", "/v1/limits/x", response{200, jsonCT, []byte(`{` + stored + `}`)}, "missing property 'kind'"},
		{"a definition with an unknown member", "GET", "/v1/limits/x", response{200, jsonCT, []byte(`{"kind":"token bucket","colour":"red",` + stored + `}`)}, "colour"},
		{"a date that is not RFC 3339", "GET", "/v1/limits/x", response{200, jsonCT, []byte(`{"kind":"token bucket",` + strings.Replace(stored, "2026-01-02T03:04:05Z", "yesterday", 1) + `}`)}, "date-time"},
		{"a retryAfter past the cap", "POST", "/v1/limits/x/limit", response{200, jsonCT, []byte(`{"ok":false,"retryAfter":1000000000000001,"remaining":0,"name":"x","key":"a"}`)}, "maximum"},
		{"a problem with an unknown code", "GET", "/v1/limits/x", response{404, problemCT, problem(404, "no_such_code")}, "code"},
		{"a problem whose code stands for another status", "GET", "/v1/limits/x", response{404, problemCT, problem(404, "conflict")}, "stands for 409"},
		{"a problem whose status is not the HTTP status", "GET", "/v1/limits/x", response{404, problemCT, problem(400, "limit_not_found")}, "differs from the HTTP status"},
		{"a problem without its members", "GET", "/v1/limits/x", response{404, problemCT, []byte(`{"code":"limit_not_found","status":404}`)}, "missing properties"},
		{"an undocumented status", "POST", "/v1/limits/x/limit", response{418, problemCT, problem(418, "internal")}, "status 418 is not documented"},
		{"an undocumented content type", "GET", "/v1/limits", response{200, http.Header{"Content-Type": {"text/plain"}}, []byte("ok")}, "is not documented"},
		{"a problem sent as application/json", "GET", "/v1/limits/x", response{404, jsonCT, problem(404, "limit_not_found")}, "is not documented"},
		{"a body on a bodiless response", "DELETE", "/v1/limits/x", response{204, jsonCT, []byte(`{}`)}, "has no content"},
		{"405 whose Allow leaves a method out", "POST", "/v1/limits/x", response{405, with405("GET, PUT"), problem(405, "method_not_allowed")}, "Allow"},
		{"405 for an undocumented path", "GET", "/v1/nothing/here", response{405, with405("POST"), problem(405, "method_not_allowed")}, "only 404"},
		{"200 for an undocumented path", "GET", "/v1/nothing/here", response{200, jsonCT, []byte(`{}`)}, "only 404"},
		{"404 for a documented path and an undocumented method", "PATCH", "/v1/limits/x", response{404, problemCT, problem(404, "not_found")}, "only 405"},

		// headers
		{"a decision with its RateLimit headers", "POST", "/v1/limits/x/limit", response{200, withRateLimit(jsonCT), decision}, ""},
		{"a decision without its RateLimit headers", "POST", "/v1/limits/x/limit", response{200, jsonCT, decision}, "without its RateLimit"},
		{"a shadow decision without RateLimit headers", "POST", "/v1/limits/x/limit", response{200, jsonCT, shadowDecision}, ""},
		{"a batch with an enforced decision, without RateLimit headers", "POST", "/v1/limit", response{200, jsonCT,
			[]byte(`{"ok":true,"retryAfter":null,"results":[` + string(shadowDecision) + `,` + string(decision) + `]}`)}, "without its RateLimit"},
		{"RateLimit without RateLimit-Policy", "POST", "/v1/limits/x/limit", response{200, without(withRateLimit(jsonCT), "RateLimit-Policy"), decision}, "one without the other"},
		{"a replayed decision", "POST", "/v1/limits/x/limit", response{200, with(withRateLimit(jsonCT), "Idempotent-Replayed", "true"), decision}, ""},
		{"Idempotent-Replayed outside its enum", "POST", "/v1/limits/x/limit", response{200, with(withRateLimit(jsonCT), "Idempotent-Replayed", "false"), decision}, "Idempotent-Replayed"},
		{"a 429 with Retry-After", "POST", "/v1/limits/x/limit", response{429, with(withRateLimit(problemCT), "Retry-After", "3"), problem(429, "rate_limited")}, ""},
		{"a 429 without Retry-After", "POST", "/v1/limits/x/limit", response{429, withRateLimit(problemCT), problem(429, "rate_limited")}, "Retry-After"},
		{"a Retry-After that is not a whole number", "POST", "/v1/limits/x/limit", response{429, with(withRateLimit(problemCT), "Retry-After", "1.5"), problem(429, "rate_limited")}, "not a whole number"},
		{"a 503 without Retry-After", "GET", "/v1/limits", response{503, problemCT, problem(503, "unavailable")}, "Retry-After"},
		{"a 503 with Retry-After", "GET", "/v1/limits", response{503, with(problemCT, "Retry-After", "1"), problem(503, "unavailable")}, ""},
		{"a 401 without WWW-Authenticate", "GET", "/v1/limits", response{401, problemCT, problem(401, "unauthorized")}, "WWW-Authenticate"},
		{"a 401 with WWW-Authenticate", "GET", "/v1/limits", response{401, with(problemCT, "WWW-Authenticate", `Bearer realm="sluice"`), problem(401, "unauthorized")}, ""},
	} {
		req := request{method: tc.method, target: tc.target}
		if body, ok := validBodies[tc.method+" "+tc.target]; ok {
			req.contentType, req.body = "application/json", []byte(body)
		}
		err := c.check(req, tc.r)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: rejected: %v", tc.name, err)
		case tc.want != "" && err == nil:
			t.Errorf("%s: accepted, want an error about %q", tc.name, tc.want)
		case tc.want != "" && !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: error %q does not mention %q", tc.name, err, tc.want)
		}
	}

	// A 500 is a bug unless the test provokes it on purpose, and then an internal problem.
	for _, tc := range []struct {
		name     string
		expected bool
		r        response
		want     string
	}{
		{"an expected 500", true, response{500, problemCT, problem(500, "internal")}, ""},
		{"an unexpected 500", false, response{500, problemCT, problem(500, "internal")}, "is a bug"},
		{"an expected 500 with another code", true, response{500, problemCT, problem(500, "unavailable")}, "problem code"},
	} {
		for _, target := range []string{"/v1/limits", "/v1/nothing/here"} {
			err := c.check(request{method: "GET", target: target, serverError: tc.expected}, tc.r)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%s on %s: rejected: %v", tc.name, target, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("%s on %s: %v, want an error about %q", tc.name, target, err, tc.want)
			}
		}
	}
}

// TestAnUnexpectedServerErrorFailsTheContract: checkContract fails a test that meets a 500 it
// did not opt into (serverErrorTests), whatever the test asserts itself; an opted-in test and
// its subtests pass it.
func TestAnUnexpectedServerErrorFailsTheContract(t *testing.T) {
	t.Parallel()
	r := response{500, http.Header{"Content-Type": {"application/problem+json"}},
		[]byte(`{"type":"urn:sluice:problem:internal","title":"T","status":500,"detail":"internal error","code":"internal","requestId":"r"}`)}
	req := request{method: http.MethodGet, target: "/v1/limits"}
	rec := &errorRecorder{TB: t, name: "TestSomethingElse/sqlite"}
	checkContract(rec, req, r)
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], "is a bug") {
		t.Errorf("an unexpected 500: %q, want one error saying it is a bug", rec.errors)
	}
	rec = &errorRecorder{TB: t, name: "TestPanicBecomesAGenericProblemThatLeaksNothing"}
	if checkContract(rec, req, r); len(rec.errors) != 0 {
		t.Errorf("an opted-in 500: %q", rec.errors)
	}
	rec = &errorRecorder{TB: t, name: "TestDefinitionChangesCommitWithTheirAuditEntryAndEvent/postgres"}
	if checkContract(rec, req, r); len(rec.errors) != 0 {
		t.Errorf("an opted-in test's subtest's 500: %q", rec.errors)
	}
}

// errorRecorder is a testing.TB named name that records Errorf instead of failing.
type errorRecorder struct {
	testing.TB
	name   string
	errors []string
}

func (r *errorRecorder) Name() string { return r.name }
func (r *errorRecorder) Helper()      {}
func (r *errorRecorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// with is h and a header name: value; without is h without name; withRateLimit is h with the
// RateLimit headers of a decision.
func with(h http.Header, name, value string) http.Header {
	h = h.Clone()
	h.Set(name, value)
	return h
}

func without(h http.Header, name string) http.Header {
	h = h.Clone()
	h.Del(name)
	return h
}

func withRateLimit(h http.Header) http.Header {
	return with(with(h, "RateLimit-Policy", `"x";q=10;w=60`), "RateLimit", `"x";r=1;t=6`)
}

// validBodies are request bodies the document allows, for the contract check's own tests.
var validBodies = map[string]string{
	"PUT /v1/limits/x":        `{"kind":"token bucket","rate":10,"period":60000}`,
	"POST /v1/limits/x/limit": `{"key":"a"}`,
	"POST /v1/limit":          `{"limits":[{"name":"x"},{"name":"s"}]}`,
}

// TestContractCheckRejectsRequestsTheDocumentDoesNotAllow proves the request half of the check
// can fail: a body the document refuses passes only when the server refused it with a 4xx
// problem.
func TestContractCheckRejectsRequestsTheDocumentDoesNotAllow(t *testing.T) {
	t.Parallel()
	c, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	jsonCT := http.Header{"Content-Type": {"application/json"}}
	decided := response{200, withRateLimit(jsonCT), []byte(`{"ok":true,"retryAfter":null,"remaining":1,"name":"x","key":"a"}`)}
	refused := response{400, http.Header{"Content-Type": {"application/problem+json"}},
		[]byte(`{"type":"urn:sluice:problem:invalid_request","title":"T","status":400,"detail":"d","code":"invalid_request","requestId":"r"}`)}
	unavailable := response{503, http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"1"}},
		[]byte(`{"type":"urn:sluice:problem:unavailable","title":"T","status":503,"detail":"d","code":"unavailable","requestId":"r"}`)}
	bulkAnswer := response{200, jsonCT, []byte(`{"results":[{"ok":true,"retryAfter":null,"remaining":1,"name":"x","key":"a"},` +
		`{"error":{"type":"urn:sluice:problem:invalid_request","title":"T","status":400,"detail":"d","code":"invalid_request","field":"decisions[1].count"}}]}`)}
	const limit = "/v1/limits/x/limit"
	for _, tc := range []struct {
		name        string
		method      string
		target      string
		contentType string
		body        string
		r           response
		want        string
	}{
		{name: "a valid body, decided", method: "POST", target: limit, contentType: "application/json", body: `{"key":"a","count":2}`, r: decided},
		{name: "a valid body, refused all the same", method: "POST", target: limit, contentType: "application/json; charset=utf-8", body: `{"key":"a"}`, r: refused},
		{name: "an unknown member, refused", method: "POST", target: limit, contentType: "application/json", body: `{"key":"a","colour":1}`, r: refused},
		{name: "not JSON, refused", method: "POST", target: limit, contentType: "application/json", body: `{"key":`, r: refused},
		{name: "no body for an operation that needs none", method: "DELETE", target: "/v1/limits/x", r: response{204, http.Header{}, nil}},
		{name: "a body on a DELETE, which the server does not read", method: "DELETE", target: "/v1/limits/x", contentType: "application/json", body: `{"x":1}`, r: response{204, http.Header{}, nil}},

		{name: "an unknown member, decided", method: "POST", target: limit, contentType: "application/json", body: `{"key":"a","colour":1}`, r: decided, want: "colour"},
		{name: "a count of the wrong type, decided", method: "POST", target: limit, contentType: "application/json", body: `{"count":"2"}`, r: decided, want: "does not match the schema"},
		{name: "an invalid body answered 503", method: "POST", target: limit, contentType: "application/json", body: `{"colour":1}`, r: unavailable, want: "answered 503"},
		{name: "not JSON, decided", method: "POST", target: limit, contentType: "application/json", body: `key=a`, r: decided, want: "not JSON"},
		{name: "no body where one is required, decided", method: "POST", target: limit, r: decided, want: "is required"},
		{name: "another content type, read as JSON", method: "POST", target: limit, contentType: "text/plain", body: `{"key":"a"}`, r: decided},
		{name: "another content type, read as JSON, with an unknown member, decided", method: "POST", target: limit, contentType: "application/x-www-form-urlencoded", body: `{"key":"a","colour":1}`, r: decided, want: "colour"},
		{name: "a bulk item refused on its own", method: "POST", target: "/v1/decisions", contentType: "application/json",
			body: `{"decisions":[{"name":"x","key":"a"},{"name":"x","count":-1}]}`, r: bulkAnswer, want: ""},
		{name: "a bulk item refused, but not on its own", method: "POST", target: "/v1/decisions", contentType: "application/json",
			body: `{"decisions":[{"name":"x","count":-1},{"name":"x","key":"a"}]}`, r: bulkAnswer, want: "minimum"},
		{name: "a bulk request refused as a whole, answered 200", method: "POST", target: "/v1/decisions", contentType: "application/json",
			body: `{"decisions":[{"name":"x","key":"a"},{"name":"x"}],"colour":1}`, r: bulkAnswer, want: "colour"},
	} {
		err := c.check(request{method: tc.method, target: tc.target, contentType: tc.contentType, body: []byte(tc.body)}, tc.r)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: rejected: %v", tc.name, err)
		case tc.want != "" && err == nil:
			t.Errorf("%s: accepted, want an error about %q", tc.name, tc.want)
		case tc.want != "" && !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: error %q does not mention %q", tc.name, err, tc.want)
		}
	}
}

// TestProblemCodesAreTheDocumentedEnum keeps the Problem schema's code enum equal to the codes
// the server can answer, so that a new code cannot reach clients undocumented.
func TestProblemCodesAreTheDocumentedEnum(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas struct {
				Problem struct {
					Properties struct {
						Code struct {
							Enum []string `json:"enum"`
						} `json:"code"`
					} `json:"properties"`
				} `json:"Problem"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.OpenAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	codes := []string{
		api.CodeInvalidRequest, api.CodeInvalidConfig, api.CodeCountExceedsCapacity, api.CodeUnauthorized,
		api.CodeForbidden, api.CodeSessionNotAuthorized, api.CodeTenantSuspended, api.CodeLimitNotFound, api.CodeNotFound,
		api.CodeDefinitionExists, api.CodeConflict, api.CodeHoldClosed, api.CodeLeaseClosed, api.CodeIdempotencyKeyReused, api.CodePayloadTooLarge, api.CodeMethodNotAllowed,
		api.CodeRateLimited, api.CodeUnavailable, api.CodeInternal,
		api.CodeTenantQuotaExceeded, api.CodePlanQuotaReached,
	}
	for _, code := range codes {
		if apperr.Code(code).Title() == "" {
			t.Errorf("code %q has no title in apperr", code)
		}
	}
	got := slices.Sorted(slices.Values(doc.Components.Schemas.Problem.Properties.Code.Enum))
	if want := slices.Sorted(slices.Values(codes)); !slices.Equal(got, want) {
		t.Errorf("Problem code enum %v, want the server's codes %v", got, want)
	}
}
