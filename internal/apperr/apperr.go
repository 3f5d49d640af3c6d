// Package apperr is Sluice's one error vocabulary. An error a client may see carries, as data,
// its code (the contract's problem codes), the HTTP status the code stands for, a message that
// is safe to show, and the field it is about. Domain packages return these; each surface has one
// renderer (problem+json for the API, an inline message for the dashboard) that reads them with
// From, so no caller ever matches on err.Error() text.
//
// Everything else (a driver error, a bug) is internal: From turns it into Internal, whose message
// says nothing, and the renderer logs the cause.
package apperr

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Code is a problem code of the contract (DESIGN §4, the OpenAPI document).
type Code string

// The codes. Each has one status and one title (Status, Title).
const (
	InvalidRequest       Code = "invalid_request"
	InvalidConfig        Code = "invalid_config"
	CountExceedsCapacity Code = "count_exceeds_capacity"
	Unauthorized         Code = "unauthorized"
	Forbidden            Code = "forbidden"
	SessionNotAuthorized Code = "session_not_authorized"
	TenantSuspended      Code = "tenant_suspended"
	LimitNotFound        Code = "limit_not_found"
	NotFound             Code = "not_found"
	DefinitionExists     Code = "definition_exists"
	Conflict             Code = "conflict"
	HoldClosed           Code = "hold_closed"
	LeaseClosed          Code = "lease_closed"
	IdempotencyKeyReused Code = "idempotency_key_reused"
	PlanQuotaReached     Code = "plan_quota_reached"
	PayloadTooLarge      Code = "payload_too_large"
	MethodNotAllowed     Code = "method_not_allowed"
	RateLimited          Code = "rate_limited"
	TenantQuotaExceeded  Code = "tenant_quota_exceeded"
	Unavailable          Code = "unavailable"
	Internal             Code = "internal"
)

var codes = map[Code]struct {
	status int
	title  string
}{
	InvalidRequest:       {http.StatusBadRequest, "Invalid request"},
	InvalidConfig:        {http.StatusBadRequest, "Invalid limit configuration"},
	CountExceedsCapacity: {http.StatusBadRequest, "Count exceeds capacity"},
	Unauthorized:         {http.StatusUnauthorized, "Unauthorized"},
	Forbidden:            {http.StatusForbidden, "Forbidden"},
	SessionNotAuthorized: {http.StatusForbidden, "Session not authorized"},
	TenantSuspended:      {http.StatusForbidden, "Tenant suspended"},
	LimitNotFound:        {http.StatusNotFound, "Limit not found"},
	NotFound:             {http.StatusNotFound, "Not found"},
	DefinitionExists:     {http.StatusConflict, "Definition exists"},
	Conflict:             {http.StatusConflict, "Conflict"},
	HoldClosed:           {http.StatusConflict, "Hold closed"},
	LeaseClosed:          {http.StatusConflict, "Lease closed"},
	IdempotencyKeyReused: {http.StatusUnprocessableEntity, "Idempotency key reused"},
	PlanQuotaReached:     {http.StatusConflict, "Plan quota reached"},
	PayloadTooLarge:      {http.StatusRequestEntityTooLarge, "Payload too large"},
	MethodNotAllowed:     {http.StatusMethodNotAllowed, "Method not allowed"},
	RateLimited:          {http.StatusTooManyRequests, "Rate limited"},
	TenantQuotaExceeded:  {http.StatusTooManyRequests, "Tenant quota exceeded"},
	Unavailable:          {http.StatusServiceUnavailable, "Service unavailable"},
	Internal:             {http.StatusInternalServerError, "Internal error"},
}

// Status is the HTTP status the code is answered with; 500 for an unknown code.
func (c Code) Status() int {
	if e, ok := codes[c]; ok {
		return e.status
	}
	return http.StatusInternalServerError
}

// Title is the code's short human title.
func (c Code) Title() string { return codes[c].title }

// FieldError is one invalid field of a request.
type FieldError struct {
	Field   string
	Message string
}

// Error is an error with a client-safe meaning.
type Error struct {
	Code    Code
	Message string // safe to show to the client: no internals, no secrets
	Field   string // the request field it is about, if one
	// Fields lists every invalid field when a request has several problems.
	Fields []FieldError
	// Name and RetryAfterMs describe a refusal (RateLimited): which limit, and when to retry.
	Name         string
	RetryAfterMs *int64
	// Err is the cause, for logs; it never reaches a client.
	Err error

	sentinel *Error // the error a copy was made from (Wrap, WithField), for errors.Is
}

// Error is the log form: code, message and cause.
func (e *Error) Error() string {
	s := string(e.Code) + ": " + e.Message
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap exposes the cause to errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Err }

// Status is the HTTP status of the error's code.
func (e *Error) Status() int { return e.Code.Status() }

// New returns an error of code with a client-safe message.
func New(code Code, message string) *Error { return &Error{Code: code, Message: message} }

// Invalid returns an invalid_request error about one field.
func Invalid(field, message string) *Error {
	return &Error{Code: InvalidRequest, Message: message, Field: field}
}

// WithField returns a copy of e about field (so that a sentinel stays unchanged).
func (e *Error) WithField(field string) *Error {
	c := *e
	c.Field = field
	c.sentinel = e.root()
	return &c
}

// At returns, for a problem with one item of a request's body, a copy of the *Error in err's
// chain whose fields are put after prefix ("limits[1]."), so that the client can tell which item
// it is about; err itself when prefix is "", the problem names no field, or err has no *Error.
func At(prefix string, err error) error {
	var e *Error
	if prefix == "" || !errors.As(err, &e) || (e.Field == "" && len(e.Fields) == 0) {
		return err
	}
	c := *e
	c.sentinel = e.root()
	if c.Field != "" {
		c.Field = prefix + c.Field
	}
	if len(e.Fields) > 0 {
		c.Fields = make([]FieldError, len(e.Fields))
		for i, f := range e.Fields {
			f.Field = prefix + f.Field
			c.Fields[i] = f
		}
	}
	return &c
}

// Wrap returns a copy of e whose cause is err; errors.Is(result, e) still holds.
func (e *Error) Wrap(err error) *Error {
	c := *e
	c.Err = err
	c.sentinel = e.root()
	return &c
}

// Is matches a copy made by Wrap or WithField against the sentinel it came from.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t == e.root()
}

func (e *Error) root() *Error {
	if e.sentinel != nil {
		return e.sentinel
	}
	return e
}

// UnavailableMessage is what a client is told when Sluice fails closed.
const UnavailableMessage = "the request could not be completed safely; retry shortly"

// From reads the client-safe meaning of any error: an *Error found in its chain as it is, the
// end of the request's context as Unavailable (the work was cut short, so it fails closed), and
// anything else as Internal with err kept as the cause for the log.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return &Error{Code: Unavailable, Message: UnavailableMessage, Err: err}
	}
	return &Error{Code: Internal, Message: "internal error", Err: err}
}

// Sentence is the message as a sentence for the dashboard: capitalised, with a full stop.
func (e *Error) Sentence() string {
	s := strings.TrimSpace(e.Message)
	if s == "" {
		return ""
	}
	s = strings.ToUpper(s[:1]) + s[1:]
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}

// QuotaReached is plan_quota_reached (409) for a creation past the tenant's plan: the plan allows
// at most max of what ("limits", "API keys", "overrides").
func QuotaReached(what string, max int64) *Error {
	if max == 1 {
		what = strings.TrimSuffix(what, "s") // "1 override", "1 API key"
	}
	free := "delete one"
	if strings.Contains(what, "API key") {
		free = "revoke one" // revoked keys do not count, and keys are revoked, never deleted
	}
	return &Error{Code: PlanQuotaReached, Message: fmt.Sprintf("the tenant's plan allows at most %d %s; %s, or ask an operator for a larger plan", max, what, free)}
}
