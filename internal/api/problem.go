package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// Problem is an RFC 9457 problem details body.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	Field  string `json:"field,omitempty"`
	// Errors lists every invalid field when there is more than one.
	Errors []FieldProblem `json:"errors,omitempty"`
	// Name and RetryAfter are set on rate_limited problems (throws: true).
	Name       string `json:"name,omitempty"`
	RetryAfter *int64 `json:"retryAfter,omitempty"`
	RequestID  string `json:"requestId,omitempty"`
}

// FieldProblem is one invalid field.
type FieldProblem struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// The problem codes of DESIGN §4.
const (
	CodeInvalidRequest       = "invalid_request"
	CodeInvalidConfig        = "invalid_config"
	CodeCountExceedsCapacity = "count_exceeds_capacity"
	CodeUnauthorized         = "unauthorized"
	CodeForbidden            = "forbidden"
	CodeSessionNotAuthorized = "session_not_authorized"
	CodeLimitNotFound        = "limit_not_found"
	CodeNotFound             = "not_found"
	CodeDefinitionExists     = "definition_exists"
	CodeConflict             = "conflict"
	CodePayloadTooLarge      = "payload_too_large"
	CodeRateLimited          = "rate_limited"
	CodeUnavailable          = "unavailable"
	CodeInternal             = "internal"
)

var titles = map[string]string{
	CodeInvalidRequest:       "Invalid request",
	CodeInvalidConfig:        "Invalid limit configuration",
	CodeCountExceedsCapacity: "Count exceeds capacity",
	CodeUnauthorized:         "Unauthorized",
	CodeForbidden:            "Forbidden",
	CodeSessionNotAuthorized: "Session not authorized",
	CodeLimitNotFound:        "Limit not found",
	CodeNotFound:             "Not found",
	CodeDefinitionExists:     "Definition exists",
	CodeConflict:             "Conflict",
	CodePayloadTooLarge:      "Payload too large",
	CodeRateLimited:          "Rate limited",
	CodeUnavailable:          "Service unavailable",
	CodeInternal:             "Internal error",
}

// NewProblem builds a problem for code with a human detail.
func NewProblem(status int, code, detail string) Problem {
	return Problem{Type: "urn:sluice:problem:" + code, Title: titles[code], Status: status, Detail: detail, Code: code}
}

// problemError is an error that already knows its problem.
type problemError struct{ p Problem }

func (e *problemError) Error() string { return e.p.Code + ": " + e.p.Detail }

func badRequest(field, detail string) error {
	p := NewProblem(http.StatusBadRequest, CodeInvalidRequest, detail)
	p.Field = field
	return &problemError{p}
}

// errSessionNotAuthorized refuses decisions by an anonymous session that has not solved the captcha.
var errSessionNotAuthorized = &problemError{NewProblem(http.StatusForbidden, CodeSessionNotAuthorized,
	"the session has not been authorized; solve the captcha and call POST /v1/sessions/authorize first")}

// ProblemFor maps any error to its problem. It is the one place errors become HTTP statuses.
func ProblemFor(err error) Problem {
	var pe *problemError
	var ae *apperr.Error
	var ve *limiter.ValidationError
	switch {
	case errors.As(err, &pe):
		return pe.p
	case errors.As(err, &ae): // the limiter's errors
		p := NewProblem(ae.Status(), string(ae.Code), ae.Message)
		p.Field = ae.Field
		for _, f := range ae.Fields {
			p.Errors = append(p.Errors, FieldProblem{Field: f.Field, Detail: f.Message})
		}
		return p
	case errors.As(err, &ve): // DefinitionBody.ToDefinition's
		p := NewProblem(http.StatusBadRequest, ve.Code, ve.Detail())
		if len(ve.Fields) > 0 {
			p.Field = ve.Fields[0].Field
		}
		for _, f := range ve.Fields {
			p.Errors = append(p.Errors, FieldProblem{Field: f.Field, Detail: f.Message})
		}
		return p
	case errors.Is(err, tenants.ErrUnauthorized):
		return NewProblem(http.StatusUnauthorized, CodeUnauthorized, "missing, malformed or revoked API key")
	case errors.Is(err, tenants.ErrNotFound):
		return NewProblem(http.StatusNotFound, CodeNotFound, "not found")
	case errors.Is(err, tenants.ErrConflict):
		return NewProblem(http.StatusConflict, CodeConflict, "conflict")
	case errors.Is(err, db.ErrUnavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return NewProblem(http.StatusServiceUnavailable, CodeUnavailable, "the decision could not be made safely; retry shortly")
	case errors.As(err, new(*apperr.Error)):
		return appProblem(apperr.From(err))
	default:
		return NewProblem(http.StatusInternalServerError, CodeInternal, "internal error")
	}
}

// appProblem is the problem of an error that carries its meaning as data (apperr).
func appProblem(e *apperr.Error) Problem {
	p := NewProblem(e.Status(), string(e.Code), e.Message)
	p.Field = e.Field
	for _, f := range e.Fields {
		p.Errors = append(p.Errors, FieldProblem{Field: f.Field, Detail: f.Message})
	}
	return p
}

// writeProblem renders err as problem+json; 500s are logged with the request ID, never leaked.
func writeProblem(c *gin.Context, log *slog.Logger, err error) {
	p := ProblemFor(err)
	p.RequestID = c.GetString(RequestIDKey)
	switch p.Status {
	case http.StatusInternalServerError:
		log.ErrorContext(c.Request.Context(), "internal error", "request_id", p.RequestID, "path", c.FullPath(), "err", err)
	case http.StatusServiceUnavailable:
		log.WarnContext(c.Request.Context(), "failing closed", "request_id", p.RequestID, "path", c.FullPath(), "err", err)
		c.Header("Retry-After", "1")
	case http.StatusUnauthorized:
		c.Header("WWW-Authenticate", `Bearer realm="sluice"`)
	}
	WriteProblem(c, p)
}

// WriteProblem renders p as application/problem+json and aborts the chain.
func WriteProblem(c *gin.Context, p Problem) {
	c.Header("Content-Type", "application/problem+json")
	c.Header("Cache-Control", "no-store")
	c.AbortWithStatusJSON(p.Status, p)
}

// retryAfterSeconds is the Retry-After header value: whole seconds, rounded up.
func retryAfterSeconds(ms int64) string {
	return strconv.FormatInt(int64(math.Ceil(float64(ms)/1000)), 10)
}

func fieldf(field, format string, args ...any) error {
	return badRequest(field, fmt.Sprintf(format, args...))
}
