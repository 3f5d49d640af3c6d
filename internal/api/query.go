package api

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
)

// queryParams are the query parameters the OpenAPI document gives each operation, by "METHOD
// route" in gin's spelling ("GET /v1/limits/:name/value"): the document is their one list.
var queryParams = documentQueryParams(OpenAPIDocument)

// documentQueryParams reads the query parameters of every operation of an OpenAPI document, its
// path's and its own, through #/components/parameters references.
func documentQueryParams(doc []byte) map[string][]string {
	type param struct {
		Ref  string `json:"$ref"`
		Name string `json:"name"`
		In   string `json:"in"`
	}
	var d struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Parameters map[string]param `json:"parameters"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		panic(fmt.Sprintf("api: the OpenAPI document: %v", err)) // embedded, and tested
	}
	queries := func(raw json.RawMessage) []string {
		var ps []param
		_ = json.Unmarshal(raw, &ps)
		var out []string
		for _, p := range ps {
			if ref, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
				p = d.Components.Parameters[ref]
			}
			if p.In == "query" {
				out = append(out, p.Name)
			}
		}
		return out
	}
	out := map[string][]string{}
	for path, item := range d.Paths {
		route := path
		for strings.Contains(route, "{") { // {name} → :name
			i, j := strings.Index(route, "{"), strings.Index(route, "}")
			route = route[:i] + ":" + route[i+1:j] + route[j+1:]
		}
		shared := queries(item["parameters"])
		for method, op := range item {
			if method == "parameters" {
				continue
			}
			var o struct {
				Parameters json.RawMessage `json:"parameters"`
			}
			_ = json.Unmarshal(op, &o)
			out[strings.ToUpper(method)+" "+route] = append(slices.Clone(shared), queries(o.Parameters)...)
		}
	}
	return out
}

// checkQuery refuses a query parameter the operation does not take, one given more than once
// (?key=a&key=b would decide one of them silently), as a body's unknown or repeated member is,
// and a query that is not well-formed (parseQuery): 400 naming the parameter.
func (s *Server) checkQuery(c *gin.Context) {
	known, ok := queryParams[c.Request.Method+" "+c.FullPath()]
	if !ok { // no route (404, 405): the router answers
		c.Next()
		return
	}
	query, field, detail, ok := parseQuery(c.Request.URL.RawQuery)
	if !ok {
		writeProblem(c, s.log, badRequest(field, detail))
		return
	}
	for name, values := range query {
		switch {
		case !slices.Contains(known, name):
			takes := "no query parameters"
			if len(known) > 0 {
				takes = "only " + strings.Join(known, ", ")
			}
			writeProblem(c, s.log, fieldf(name, "unknown query parameter %q: this operation takes %s", name, takes))
			return
		case len(values) > 1:
			writeProblem(c, s.log, fieldf(name, "query parameter %q is given more than once; give it once", name))
			return
		}
	}
	c.Next()
}

// pageSize reads a list's ?limit=: def when it is absent; when given (empty included), a whole
// number from 1 to most, or a 400 naming it (and false).
func (s *Server) pageSize(c *gin.Context, def, most int) (int, bool) {
	v, given := c.GetQuery("limit")
	if !given {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most || v[0] == '+' {
		writeProblem(c, s.log, fieldf("limit", "limit must be a whole number from 1 to %d", most))
		return 0, false
	}
	return n, true
}

// parseQuery is url.ParseQuery, refusing (ok false) a raw query it (and so every handler's
// c.Query) would read in part without a word, with the parameter to blame (decoded where it can
// be, as sent where it cannot; "" when none is) and what to do: ?key=50%off would otherwise be
// read as no key at all, the limit's global key, and ?key=a;b likewise.
func parseQuery(raw string) (query url.Values, field, detail string, ok bool) {
	query, err := url.ParseQuery(raw)
	if err == nil {
		return query, "", "", true
	}
	for pair := range strings.SplitSeq(raw, "&") {
		key, value, _ := strings.Cut(pair, "=")
		name := key
		if k, err := url.QueryUnescape(key); err == nil {
			name = k
		}
		switch {
		case strings.Contains(pair, ";"):
			return nil, name, fmt.Sprintf(`query parameter %q is not well-formed: it contains ";"; separate parameters with "&", and percent-encode a ";" in a value as %%3B`, name), false
		case !validEscapes(key) || !validEscapes(value):
			return nil, name, fmt.Sprintf(`query parameter %q is not well-formed: a "%%" must begin an escape of two hex digits; percent-encode a "%%" itself as %%25`, name), false
		}
	}
	return nil, "", "the query is not well-formed: " + err.Error(), false // too many parameters
}

// validEscapes reports whether every "%" in s begins a %XX escape.
func validEscapes(s string) bool {
	_, err := url.QueryUnescape(s)
	return err == nil
}
