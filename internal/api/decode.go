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
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/strictjson"
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
	if loneSurrogate(body) {
		// encoding/json decodes it as U+FFFD, so "\ud800" and "\udc00" would be one key.
		return badRequest("", `the request body escapes a lone UTF-16 surrogate ("\ud800" without its pair), which is no character`)
	}
	if d, ok := dst.(*DecisionBody); ok && decodeDecisionFast(body, d) {
		return nil
	}
	if err := checkMembers(body, reflect.TypeOf(dst)); err != nil {
		return err
	}
	return decodeReflect(body, dst)
}

// loneSurrogate reports whether a JSON text holds a \u escape of a UTF-16 surrogate that is not
// one of a high-low pair. Backslashes occur only inside strings, so the whole text can be scanned
// without parsing it; a body without "\u" (nearly every one) costs one search.
func loneSurrogate(body []byte) bool {
	if !bytes.Contains(body, []byte(`\u`)) {
		return false
	}
	escaped := func(i int) (rune, bool) { // the \uXXXX at body[i:], if there is one
		if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		r, ok := escaped(i)
		switch {
		case !ok:
			i++ // an escape of another kind ("\\" too): skip the character escaped
		case utf16.IsSurrogate(r):
			low, pair := escaped(i + 6)
			if r >= 0xDC00 || !pair || low < 0xDC00 || low > 0xDFFF {
				return true
			}
			i += 11
		default:
			i += 5
		}
	}
	return false
}

// nullableMembers are the members of request bodies that the document types with "null"
// (OverrideRequest's expiresAt: null means what absence does, never expires); an explicit null for
// any other member is refused (TestNullableMembersAreTheDocuments keeps this list the document's).
var nullableMembers = strictjson.Nullable{
	reflect.TypeFor[OverrideBody](): {"expiresAt"},
}

// checkMembers refuses what encoding/json would silently accept in a body decoded into a value
// of type dst (strictjson.CheckNulls), naming the member: an explicit null for a member the
// document does not make nullable among them, which encoding/json reads as an absent member.
func checkMembers(body []byte, dst reflect.Type) error {
	if p := strictjson.CheckNulls(body, dst, nullableMembers); p != nil {
		if p.Number && isConfig(p.Path, isConfigBody(dst)) {
			// A number a limit's configuration cannot hold: a configuration the server cannot
			// represent (as decodeProblem says of one out of range).
			e := apperr.Invalid(p.Path, p.Message)
			e.Code = apperr.InvalidConfig
			return e
		}
		return badRequest(p.Path, p.Message)
	}
	return nil
}

// isConfigBody reports whether a body of type dst is a limit's configuration as a whole: a
// definition (PUT /v1/limits/{name}) or an override's numbers and action.
func isConfigBody(dst reflect.Type) bool {
	return dst == reflect.TypeFor[*DefinitionBody]() || dst == reflect.TypeFor[*OverrideBody]()
}

// isConfig reports whether the member at path is part of a limit's configuration: any member of
// a configuration body (isConfigBody), or of an inline config.
func isConfig(path string, definition bool) bool {
	return definition || strings.HasPrefix(path, "config.") || strings.Contains(path, ".config.")
}

// decodeReflect is the general strict decoder (encoding/json).
func decodeReflect(body []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		definition := isConfigBody(reflect.TypeOf(dst))
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
			if isConfig(field, definition) {
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
