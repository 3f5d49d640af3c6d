package captcha

import "errors"

// Sentinel errors, checked with errors.Is. Every error the package returns wraps at most one of
// them, so a caller can map each to a distinct client message without string matching.
var (
	// ErrPayloadTooLarge: the payload is longer than MaxPayloadSize.
	ErrPayloadTooLarge = errors.New("payload too large")
	// ErrMalformedPayload: the payload is not base64 of a well-formed ALTCHA v2 payload.
	ErrMalformedPayload = errors.New("malformed payload")
	// ErrTestMode: the widget ran in test mode and solved nothing.
	ErrTestMode = errors.New("test-mode payload")
	// ErrAlgorithm: the challenge names an algorithm or key parameters Sluice does not issue.
	ErrAlgorithm = errors.New("unsupported algorithm")
	// ErrDifficulty: the challenge was issued at a difficulty below the required minimum.
	ErrDifficulty = errors.New("difficulty below minimum")
	// ErrSignature: the challenge's HMAC does not match; it was not issued by this server, or
	// was altered.
	ErrSignature = errors.New("bad signature")
	// ErrWrongSolution: the counter or derived key does not solve the challenge.
	ErrWrongSolution = errors.New("wrong solution")
	// ErrExpired: the challenge's expiry has passed.
	ErrExpired = errors.New("challenge expired")
	// ErrWrongTenant: the challenge was issued for another tenant.
	ErrWrongTenant = errors.New("challenge of another tenant")
	// ErrWrongSession: the challenge was issued for another session ID.
	ErrWrongSession = errors.New("challenge of another session")
	// ErrInvalidSessionID: a session ID is not 16..128 characters of [A-Za-z0-9_-].
	ErrInvalidSessionID = errors.New("invalid session ID")
	// ErrReplay: the challenge has already been used to authorize a session.
	ErrReplay = errors.New("challenge already used")
	// ErrNotFound: the session is unknown, revoked or expired.
	ErrNotFound = errors.New("session not found")
	// ErrInvalidToken: a token failed verification (signature, algorithm, issuer, audience or
	// expiry).
	ErrInvalidToken = errors.New("invalid token")
)
