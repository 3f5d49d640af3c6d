package sluice

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"
	"unicode/utf8"
)

// ErrInvalidArgument means a call's arguments could never be accepted (a limit name Sluice cannot
// know, a count that is no number of tokens, a key, session, attribute or override match that
// is not valid UTF-8, a malformed Idempotency-Key, a body JSON cannot carry such as a Rate of
// NaN or ±Inf) or that the client cannot send any request (a base URL that is not http or https
// with a host, a secret key with a control character): the client refuses them before sending
// anything, whatever its FailPolicy (a FailOpen client must not admit what Sluice would refuse
// as invalid, nor what it never saw).
var ErrInvalidArgument = errors.New("sluice: invalid argument")

// checkName refuses a limit name Sluice cannot know before anything is sent: a name with a "/"
// would otherwise reach another route (url.PathEscape writes it %2F, which the server decodes).
func checkName(name string) error {
	if !validName(name) {
		return fmt.Errorf("%w: limit name %q: names match ^[A-Za-z0-9_.:-]{1,128}$ and are not \".\" or \"..\"", ErrInvalidArgument, name)
	}
	return nil
}

// limitPath is the path of the limit name plus rest ("" or "/value", "/overrides", …), or
// checkName's error.
func limitPath(name, rest string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	return "/v1/limits/" + url.PathEscape(name) + rest, nil
}

// checkDecision refuses what Sluice would answer 400 or 404 to before sending it, and what it
// would never see as written (text that is not UTF-8).
func checkDecision(name string, d Decision) error {
	if err := checkName(name); err != nil {
		return err
	}
	if d.Count != nil && !(*d.Count >= 0 && *d.Count <= 1e15) { // NaN fails both
		return fmt.Errorf("%w: count %v: a count is a number of tokens from 0 to 1e15", ErrInvalidArgument, *d.Count)
	}
	if err := checkText("session", d.Session); err != nil {
		return err
	}
	return checkKeys(d.Key, d.Attributes)
}

// checkKeys refuses a key, or attributes (which fill the keys of a limit's parents), that are
// not valid UTF-8.
func checkKeys(key string, attributes map[string]string) error {
	if err := checkText("key", key); err != nil {
		return err
	}
	for k, v := range attributes {
		if err := checkText("attribute name", k); err != nil {
			return err
		}
		if err := checkText("attribute "+k, v); err != nil {
			return err
		}
	}
	return nil
}

// checkText refuses text that is not valid UTF-8: encoding/json would send each invalid byte as
// U+FFFD, so that "u\xff" and "u\xfe" would silently become the same key.
func checkText(what, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidArgument, what, s)
	}
	return nil
}

// Codes of the problems Sluice answers with (Error.Code).
const (
	CodeInvalidRequest       = "invalid_request"
	CodeInvalidConfig        = "invalid_config"
	CodeCountExceedsCapacity = "count_exceeds_capacity"
	CodeUnauthorized         = "unauthorized"
	CodeForbidden            = "forbidden"
	CodeSessionNotAuthorized = "session_not_authorized"
	CodeTenantSuspended      = "tenant_suspended"
	CodeLimitNotFound        = "limit_not_found"
	CodeNotFound             = "not_found"
	CodeDefinitionExists     = "definition_exists"
	CodeConflict             = "conflict"
	CodeHoldClosed           = "hold_closed"
	CodeLeaseClosed          = "lease_closed"
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	CodePlanQuotaReached     = "plan_quota_reached" // 409: creating one more would pass the tenant's plan
	CodePayloadTooLarge      = "payload_too_large"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeRateLimited          = "rate_limited"
	CodeTenantQuotaExceeded  = "tenant_quota_exceeded" // 429: the tenant is over its plan's decision rate
	CodeUnavailable          = "unavailable"
	CodeInternal             = "internal"
)

// Error is a problem (RFC 9457) Sluice answered with. Find it with errors.As.
type Error struct {
	Status int    // the HTTP status
	Code   string // stable: one of the Code constants
	Title  string
	Detail string
	// Field names the request member at fault, when one is.
	Field string
	// Errors lists every invalid member when there is more than one.
	Errors []FieldError
	// Name is set on rate_limited problems.
	Name string
	// RetryAfter is the problem's retryAfter (rate_limited, tenant_quota_exceeded), else the
	// answer's Retry-After header (Sluice's 503 carries 1 s); 0 when neither says.
	RetryAfter time.Duration
	RequestID  string
}

// FieldError is one invalid member of a request.
type FieldError struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// Error says the status, code and detail (and the field, when there is one). The calls wrap it
// with the route ("sluice: POST /v1/limits/x/limit: 400 invalid_request: …").
func (e *Error) Error() string {
	s := fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Detail)
	if e.Field != "" {
		s += " (field " + e.Field + ")"
	}
	return s
}

// UnmarshalJSON reads a problem+json body.
func (e *Error) UnmarshalJSON(b []byte) error {
	var p struct {
		Status     int          `json:"status"`
		Code       string       `json:"code"`
		Title      string       `json:"title"`
		Detail     string       `json:"detail"`
		Field      string       `json:"field"`
		Errors     []FieldError `json:"errors"`
		Name       string       `json:"name"`
		RetryAfter *int64       `json:"retryAfter"`
		RequestID  string       `json:"requestId"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*e = Error{Status: p.Status, Code: p.Code, Title: p.Title, Detail: p.Detail, Field: p.Field, Errors: p.Errors,
		Name: p.Name, RetryAfter: ms(p.RetryAfter), RequestID: p.RequestID}
	return nil
}
