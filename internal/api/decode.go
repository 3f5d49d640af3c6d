package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
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
func decodeJSON(c *gin.Context, dst any) error {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return errTooLarge
		}
		return badRequest("", "could not read the request body")
	}
	return DecodeStrict(body, dst)
}

// DecodeStrict is decodeJSON's parser, separated so that it can be fuzzed directly.
func DecodeStrict(body []byte, dst any) error {
	if len(body) > MaxBodyBytes {
		return errTooLarge
	}
	// Only an object is a body: "null" would otherwise decode as an empty request and be obeyed.
	if trimmed := bytes.TrimSpace(body); len(trimmed) == 0 || trimmed[0] != '{' {
		return badRequest("", "the request body must be a JSON object")
	}
	if !utf8.Valid(body) {
		return badRequest("", "the request body is not valid UTF-8")
	}
	return decodeReflect(body, dst)
}

// decodeReflect is the general strict decoder (encoding/json).
func decodeReflect(body []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeProblem(err)
	}
	if dec.More() {
		return badRequest("", "unexpected data after the JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("", "unexpected data after the JSON object")
	}
	return nil
}

func decodeProblem(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return badRequest("", "the request body must be a JSON object")
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
