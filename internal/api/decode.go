package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
)

// MaxBodyBytes bounds every request body (DESIGN §4: larger bodies are 413).
const MaxBodyBytes = 64 << 10

var errTooLarge = apperr.New(apperr.PayloadTooLarge, "request body exceeds 64 KiB")

// decodeJSON reads exactly one JSON object into dst: unknown fields, wrong types, trailing data,
// invalid UTF-8 and bodies over 64 KiB are all rejected with a problem naming the cause.
// Gin's Bind* is avoided on purpose: it writes its own plain-text 400.
func decodeJSON(c *gin.Context, dst any) error { return decodeJSONUpTo(c, dst, MaxBodyBytes) }

// decodeJSONUpTo is decodeJSON with another cap on the body (bulk requests carry more).
func decodeJSONUpTo(c *gin.Context, dst any, limit int64) error {
	_, err := decodeJSONRaw(c, dst, limit)
	return err
}

// decodeJSONRaw is decodeJSONUpTo that also returns the body as read (idempotent requests hash it).
func decodeJSONRaw(c *gin.Context, dst any, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, apperr.New(apperr.PayloadTooLarge, fmt.Sprintf("request body exceeds %d KiB", limit>>10))
		}
		return nil, badRequest("", "could not read the request body")
	}
	return body, decodeStrict(body, dst)
}

// DecodeStrict is decodeJSON's parser, separated so that it can be fuzzed directly.
func DecodeStrict(body []byte, dst any) error {
	if len(body) > MaxBodyBytes {
		return errTooLarge
	}
	return decodeStrict(body, dst)
}

func decodeStrict(body []byte, dst any) error {
	// Only an object is a body: "null" would otherwise decode as an empty request and be obeyed.
	if trimmed := bytes.TrimSpace(body); len(trimmed) == 0 || trimmed[0] != '{' {
		return badRequest("", "the request body must be a JSON object")
	}
	if !utf8.Valid(body) {
		return badRequest("", "the request body is not valid UTF-8")
	}
	if d, ok := dst.(*DecisionBody); ok && decodeDecisionFast(body, d) {
		return nil
	}
	if err := checkMembers(body, reflect.TypeOf(dst)); err != nil {
		return err
	}
	return decodeReflect(body, dst)
}

// maxNesting is encoding/json's own limit on nesting: decodeReflect refuses anything deeper, so
// checkMembers need not look further.
const maxNesting = 10000

// checkMembers refuses what encoding/json would silently accept in a body decoded into a value of
// type dst: an object member named twice in one object (encoding/json keeps the last), and a
// member named in another case than its field ({"KEY": …} taken as "key", so that
// {"key": "alice", "KEY": "bob"} decides bob, and a proxy or audit log reading the first sees
// another request than the one charged). The problem names the member's path ("count",
// "limits[1].key"). Malformed JSON, unknown members and JSON nested deeper than maxNesting are
// left for the decoder to describe.
//
// The path is kept as a stack of steps and spelled out only for a problem: building every
// member's full path as it went made a deeply nested body cost time and memory quadratic in its
// depth: 1.6 GB for 64 KiB of nested arrays, 1.4 GB for the 220 KB of 20000 nested objects that
// the 1 MiB bulk route reads (tens of seconds on a busy machine, past the server's WriteTimeout,
// which then dropped the connection unanswered).
func checkMembers(body []byte, dst reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type step struct {
		key   string
		index int // of an array item, when key is ""; -1 for a member
	}
	var steps []step
	path := func() string {
		var b strings.Builder
		for _, s := range steps {
			if s.index >= 0 {
				b.WriteString("[" + strconv.Itoa(s.index) + "]")
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.key)
		}
		return b.String()
	}
	var problem error
	// walk reads one value, whose Go type is t (nil: not known, such as a json.RawMessage's
	// content), an array's item when item is true; it returns false on a problem or a decoding
	// error.
	var walk func(t reflect.Type, item bool, depth int) bool
	walk = func(t reflect.Type, item bool, depth int) bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') && depth >= maxNesting {
			return false
		}
		if tok == nil && item && t != nil && !nullable(t) {
			// encoding/json decodes it as the zero value: {"counts": [null]} would settle a
			// hold as if nothing was used.
			problem = fieldf(path(), "%s must be %s, not null", path(), describeType(t.String()))
			return false
		}
		t = decodedAs(t)
		switch tok {
		case json.Delim('{'):
			fields := membersOf(t)
			seen := map[string]bool{}
			for dec.More() {
				keyTok, err := dec.Token()
				if err != nil {
					return false
				}
				key, _ := keyTok.(string)
				steps = append(steps, step{key: key, index: -1})
				if seen[key] {
					problem = fieldf(path(), "%s is given more than once; give each member once", path())
					return false
				}
				seen[key] = true
				var elem reflect.Type
				switch {
				case t != nil && t.Kind() == reflect.Map:
					elem = t.Elem()
				case fields != nil:
					var exact bool
					if elem, exact = fields[key]; !exact {
						for name := range fields {
							if strings.EqualFold(name, key) {
								problem = fieldf(path(), "unknown field %q: member names are case-sensitive (%q)", key, name)
								return false
							}
						}
					}
				}
				if !walk(elem, false, depth+1) {
					return false
				}
				steps = steps[:len(steps)-1]
			}
			_, err = dec.Token() // '}'
			return err == nil
		case json.Delim('['):
			var elem reflect.Type
			if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
				elem = t.Elem()
			}
			for i := 0; dec.More(); i++ {
				steps = append(steps, step{index: i})
				if !walk(elem, true, depth+1) {
					return false
				}
				steps = steps[:len(steps)-1]
			}
			_, err = dec.Token() // ']'
			return err == nil
		}
		return true
	}
	walk(dst, false, 0)
	return problem
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

// nullable reports whether encoding/json gives a null decoded into t a value of its own (nil),
// rather than t's zero value.
func nullable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice:
		return true
	}
	return reflect.PointerTo(t).Implements(jsonUnmarshaler)
}

// decodedAs is the type whose members a JSON value decoded into t is matched against: t without
// its pointers; nil when t is not known or decodes itself (json.Unmarshaler).
func decodedAs(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return nil
	}
	return t
}

// members caches membersOf: a body's types are few and fixed.
var members sync.Map // reflect.Type → map[string]reflect.Type

// membersOf is the JSON member names of struct type t, as encoding/json decodes them (the
// members of embedded structs promoted), each with its field's type; nil when t is no struct.
func membersOf(t reflect.Type) map[string]reflect.Type {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	if m, ok := members.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case f.Anonymous && name == "":
			if inner := membersOf(decodedAs(f.Type)); inner != nil {
				for k, v := range inner {
					if _, own := m[k]; !own {
						m[k] = v
					}
				}
				continue
			}
		case !f.IsExported():
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	members.Store(t, m)
	return m
}

// decodeReflect is the general strict decoder (encoding/json).
func decodeReflect(body []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		_, definition := dst.(*DefinitionBody)
		return decodeProblem(err, definition)
	}
	if dec.More() {
		return badRequest("", "unexpected data after the JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("", "unexpected data after the JSON object")
	}
	return nil
}

// decodeProblem describes what the decoder refused. definition says the body is a limit
// definition (PUT /v1/limits/{name}), whose every field is configuration.
func decodeProblem(err error, definition bool) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := jsonPath(typeErr.Field)
		if field == "" {
			return badRequest("", "the request body must be a JSON object")
		}
		if strings.HasPrefix(typeErr.Value, "number") && isNumber(typeErr.Type.String()) {
			// A number too large (or too precise an integer) for the field's type. In a limit's
			// configuration that is a configuration the server cannot represent.
			e := apperr.Invalid(field, fmt.Sprintf("%s is out of range: it must be %s that a float64 or int64 can hold", field, describeType(typeErr.Type.String())))
			if definition || strings.HasPrefix(field, "config.") || strings.Contains(field, ".config.") {
				e.Code = apperr.InvalidConfig
			}
			return e
		}
		return fieldf(field, "%s must be %s", field, describeType(typeErr.Type.String()))
	case errors.As(err, &syntaxErr):
		return badRequest("", "malformed JSON: "+syntaxErr.Error())
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return badRequest("", "truncated JSON")
	}
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		field := strings.Trim(rest, `"`)
		return fieldf(field, "unknown field %q", field)
	}
	// Anything else the decoder says (numbers out of range among them) is the client's input.
	return badRequest("", "invalid JSON: "+strings.TrimPrefix(msg, "json: "))
}

// jsonPath is encoding/json's path of a member as the client wrote it: encoding/json names the
// embedded structs it went through (Go type names, capitalised), which are not in the JSON; every
// member of Sluice's bodies starts with a lower-case letter.
func jsonPath(field string) string {
	parts := strings.Split(field, ".")
	out := parts[:0]
	for _, p := range parts {
		if p != "" && (p[0] < 'A' || p[0] > 'Z') {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}

// isNumber reports whether a Go type of a body's field holds a JSON number (a number given for
// any other type is simply of the wrong type, not out of range).
func isNumber(goType string) bool {
	switch strings.TrimPrefix(goType, "*") {
	case "int", "int64", "float64":
		return true
	}
	return false
}

func describeType(goType string) string {
	switch strings.TrimPrefix(goType, "*") {
	case "int", "int64":
		return "a whole number"
	case "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	default:
		if strings.HasPrefix(goType, "[]") {
			return "an array"
		}
		return "an object"
	}
}
