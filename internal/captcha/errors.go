package captcha

import (
	"fmt"

	"github.com/sluice-dev/sluice/internal/apperr"
)

// Sentinel errors, checked with errors.Is. Every error the package returns wraps at most one of
// them. Each carries, as data (apperr), the problem code, field and client-safe message the API
// answers with, so a surface renders apperr.From(err) without knowing this package. A payload
// that fails verification is the client's mistake (400), with a message that says which check
// failed so that an integrator can fix it.
var (
	// ErrPayloadTooLarge: the payload is longer than MaxPayloadSize.
	ErrPayloadTooLarge = apperr.Invalid("payload", fmt.Sprintf("the payload is longer than %d bytes", MaxPayloadSize))
	// ErrMalformedPayload: the payload is not base64 of a well-formed ALTCHA v2 payload.
	ErrMalformedPayload = apperr.Invalid("payload", "the payload is not a solved challenge (base64 of the widget's JSON)")
	// ErrTestMode: the widget ran in test mode and solved nothing.
	ErrTestMode = apperr.Invalid("payload", "the widget ran in test mode and solved nothing")
	// ErrAlgorithm: the challenge names an algorithm or key parameters Sluice does not issue.
	ErrAlgorithm = apperr.Invalid("payload", "the challenge uses an algorithm this server does not issue")
	// ErrDifficulty: the challenge was issued at a difficulty below the required minimum.
	ErrDifficulty = apperr.Invalid("payload", "the challenge was issued at a lower difficulty than the tenant now requires; solve a new one")
	// ErrSignature: the challenge's HMAC does not match; it was not issued by this server, or
	// was altered.
	ErrSignature = apperr.Invalid("payload", "the challenge was not issued by this server, or was altered")
	// ErrWrongSolution: the counter or derived key does not solve the challenge.
	ErrWrongSolution = apperr.Invalid("payload", "the solution does not solve the challenge")
	// ErrExpired: the challenge's expiry has passed.
	ErrExpired = apperr.Invalid("payload", "the challenge has expired; solve a new one")
	// ErrWrongTenant: the challenge was issued for another tenant.
	ErrWrongTenant = apperr.Invalid("payload", "the challenge was issued for another tenant")
	// ErrWrongSession: the challenge was issued for another session ID.
	ErrWrongSession = apperr.Invalid("sessionId", "the challenge was issued for another session ID")
	// ErrInvalidSessionID: a session ID is not 16..128 characters of [A-Za-z0-9_-].
	ErrInvalidSessionID = apperr.Invalid("sessionId", "session IDs are 16 to 128 characters of [A-Za-z0-9_-]")
	// ErrReplay: the challenge has already been used to authorize a session.
	ErrReplay = apperr.New(apperr.Conflict, "this challenge has already been used to authorize a session; solve a new one")
	// ErrNotFound: the session is unknown, revoked or expired.
	ErrNotFound = apperr.New(apperr.NotFound, "no active authorization for this session")
	// ErrInvalidToken: a token failed verification (signature, algorithm, issuer, audience or
	// expiry).
	ErrInvalidToken = apperr.New(apperr.Unauthorized, "the session token is not valid")
)
