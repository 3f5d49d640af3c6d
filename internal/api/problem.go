package api

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/limiter"
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

// The problem codes of the contract: apperr's, as strings for the JSON body.
const (
	CodeInvalidRequest       = string(apperr.InvalidRequest)
	CodeInvalidConfig        = string(apperr.InvalidConfig)
	CodeCountExceedsCapacity = string(apperr.CountExceedsCapacity)
	CodeUnauthorized         = string(apperr.Unauthorized)
	CodeForbidden            = string(apperr.Forbidden)
	CodeSessionNotAuthorized = string(apperr.SessionNotAuthorized)
	CodeTenantSuspended      = string(apperr.TenantSuspended)
	CodeLimitNotFound        = string(apperr.LimitNotFound)
	CodeNotFound             = string(apperr.NotFound)
	CodeDefinitionExists     = string(apperr.DefinitionExists)
	CodeConflict             = string(apperr.Conflict)
	CodeHoldClosed           = string(apperr.HoldClosed)
	CodeLeaseClosed          = string(apperr.LeaseClosed)
	CodeIdempotencyKeyReused = string(apperr.IdempotencyKeyReused)
	CodePayloadTooLarge      = string(apperr.PayloadTooLarge)
	CodeMethodNotAllowed     = string(apperr.MethodNotAllowed)
	CodeRateLimited          = string(apperr.RateLimited)
	CodeTenantQuotaExceeded  = string(apperr.TenantQuotaExceeded)
	CodePlanQuotaReached     = string(apperr.PlanQuotaReached)
	CodeUnavailable          = string(apperr.Unavailable)
	CodeInternal             = string(apperr.Internal)
)

// NewProblem builds a problem for code with a human detail.
func NewProblem(status int, code, detail string) Problem {
	return Problem{Type: "urn:sluice:problem:" + code, Title: apperr.Code(code).Title(), Status: status, Detail: detail, Code: code}
}

// badRequest is an invalid_request about one field of the request ("" for the whole body).
func badRequest(field, detail string) error { return apperr.Invalid(field, detail) }

func fieldf(field, format string, args ...any) error {
	return badRequest(field, fmt.Sprintf(format, args...))
}

// errSessionNotAuthorized refuses decisions by an anonymous session that has not solved the captcha.
var errSessionNotAuthorized = apperr.New(apperr.SessionNotAuthorized,
	"the session has not been authorized; solve the captcha and call POST /v1/sessions/authorize first")

// ProblemFor is the problem of any error: what apperr.From reads from it. Errors are mapped to
// statuses in one place, apperr; this is the API's one renderer of them.
func ProblemFor(err error) Problem {
	e := apperr.From(err)
	p := NewProblem(e.Status(), string(e.Code), e.Message)
	p.Field = e.Field
	for _, f := range e.Fields {
		p.Errors = append(p.Errors, FieldProblem{Field: f.Field, Detail: f.Message})
	}
	p.Name, p.RetryAfter = e.Name, e.RetryAfterMs
	return p
}

// writeProblem renders err as problem+json with the headers its status calls for; 500s and 503s
// are logged with the request ID and their cause, which the client never sees.
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
	case http.StatusTooManyRequests:
		if p.RetryAfter != nil {
			c.Header("Retry-After", strconv.FormatInt(limiter.HeaderSeconds(float64(*p.RetryAfter)), 10))
		}
	}
	c.Header("Content-Type", "application/problem+json")
	c.Header("Cache-Control", "no-store")
	c.AbortWithStatusJSON(p.Status, p)
}
