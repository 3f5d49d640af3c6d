package captcha

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Session ID bounds. The tenant's page makes a random 128-bit ID (22 base64url or 32 hex
// characters); the lower bound refuses IDs too short to be unguessable, the upper bound keeps
// keys and logs small.
const (
	MinSessionIDLen = 16
	MaxSessionIDLen = 128
)

// ValidateSessionID reports ErrInvalidSessionID unless id is 16..128 characters of
// [A-Za-z0-9_-], the alphabet of hex and base64url, which is all a random ID needs and keeps
// session IDs safe to put in URLs, headers and logs.
func ValidateSessionID(id string) error {
	if len(id) < MinSessionIDLen || len(id) > MaxSessionIDLen {
		return fmt.Errorf("captcha: session ID must be %d to %d characters: %w", MinSessionIDLen, MaxSessionIDLen, ErrInvalidSessionID)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return fmt.Errorf("captcha: session ID may only contain A-Z a-z 0-9 _ -: %w", ErrInvalidSessionID)
		}
	}
	return nil
}

// HashSessionID is the lowercase hex SHA-256 of a session ID: the only form in which Sluice
// stores it, puts it in challenges and in token subjects. It is unsalted on purpose, so that a
// tenant can match a token's subject to its own session ID; session IDs carry 128 random bits,
// so the hash cannot be reversed by guessing.
func HashSessionID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}
