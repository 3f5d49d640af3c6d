package captcha

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Signer issues the Ed25519 JWTs that prove a session's authorization and publishes its
// public key as a JWK set, so that tenants can verify tokens offline. It is safe for concurrent
// use.
type Signer struct {
	priv   ed25519.PrivateKey
	pub    ed25519.PublicKey
	kid    string
	issuer string
	jwks   []byte
	now    func() time.Time
}

// TokenClaims are the claims of a session token: iss (the server), aud (Audience of the
// tenant), sub (HashSessionID of the session ID), tenant (the tenant ID), iat and exp (the end
// of the authorization).
type TokenClaims struct {
	Tenant int64 `json:"tenant"`
	jwt.RegisteredClaims
}

// jwk is an RFC 8037 OKP public key.
type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
}

// NewSigner returns a Signer whose Ed25519 key is derived from seed (exactly 32 bytes, derived
// from the server secret, so every app instance signs with the same key and restarts keep it)
// and whose tokens name issuer (the server's base URL) as iss.
func NewSigner(seed []byte, issuer string) (*Signer, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("captcha: signer: seed must be %d bytes, got %d", ed25519.SeedSize, len(seed))
	}
	if issuer == "" {
		return nil, errors.New("captcha: signer: empty issuer")
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	x := base64.RawURLEncoding.EncodeToString(pub)
	// The key ID is the RFC 7638 thumbprint: stable for one key, different after a rotation,
	// and computable by anyone holding the JWK.
	thumb := sha256.Sum256([]byte(`{"crv":"Ed25519","kty":"OKP","x":"` + x + `"}`))
	kid := base64.RawURLEncoding.EncodeToString(thumb[:])
	set, err := json.Marshal(struct {
		Keys []jwk `json:"keys"`
	}{Keys: []jwk{{Kty: "OKP", Crv: "Ed25519", X: x, Kid: kid, Alg: "EdDSA", Use: "sig"}}})
	if err != nil {
		return nil, fmt.Errorf("captcha: signer: encode JWKS: %w", err)
	}
	return &Signer{priv: priv, pub: pub, kid: kid, issuer: issuer, jwks: set, now: time.Now}, nil
}

// WithClock returns a copy of s that reads the time (iat, and "now" when verifying) from now;
// for tests.
func (s *Signer) WithClock(now func() time.Time) *Signer {
	c := *s
	c.now = now
	return &c
}

// KeyID is the kid of the signing key (its RFC 7638 thumbprint).
func (s *Signer) KeyID() string { return s.kid }

// Audience is the aud claim of tenantID's tokens. It names the tenant, so that a token
// minted for one tenant is refused by another tenant's verifier.
func Audience(tenantID int64) string { return "sluice:tenant:" + strconv.FormatInt(tenantID, 10) }

// Token signs a token stating that the session with hash sessionHash of tenantID is
// authorized until expiresAt.
func (s *Signer) Token(tenantID int64, sessionHash string, expiresAt time.Time) (string, error) {
	if sessionHash == "" {
		return "", errors.New("captcha: token: empty session hash")
	}
	claims := TokenClaims{
		Tenant: tenantID,
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    s.issuer,
			Subject:   sessionHash,
			Audience:  jwt.ClaimStrings{Audience(tenantID)},
			IssuedAt:  jwt.NewNumericDate(s.now()),
			ExpiresAt: jwt.NewNumericDate(expiresAt),
		},
	}
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	t.Header["kid"] = s.kid
	signed, err := t.SignedString(s.priv)
	if err != nil {
		return "", fmt.Errorf("captcha: token: sign: %w", err)
	}
	return signed, nil
}

// JWKS is the RFC 7517 key set (one RFC 8037 OKP key) with which tenants verify tokens:
// {"keys":[{"kty":"OKP","crv":"Ed25519","x":...,"kid":...,"alg":"EdDSA","use":"sig"}]}.
// The caller must not modify the returned slice.
func (s *Signer) JWKS() []byte { return s.jwks }

// VerifyToken checks a token the way a tenant should: algorithm pinned to EdDSA (so neither
// "none" nor an HMAC keyed with the public key gets through), kid, signature, issuer, audience
// and expiry. Errors wrap ErrInvalidToken.
func (s *Signer) VerifyToken(token, audience string) (TokenClaims, error) {
	if audience == "" {
		return TokenClaims{}, fmt.Errorf("captcha: verify token: empty audience: %w", ErrInvalidToken)
	}
	var claims TokenClaims
	_, err := jwt.ParseWithClaims(token, &claims, func(t *jwt.Token) (any, error) {
		if kid, _ := t.Header["kid"].(string); kid != s.kid {
			return nil, fmt.Errorf("unknown kid %q", kid)
		}
		return s.pub, nil
	},
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}),
		jwt.WithIssuer(s.issuer),
		jwt.WithAudience(audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(s.now),
	)
	if err != nil {
		return TokenClaims{}, fmt.Errorf("captcha: verify token: %w: %v", ErrInvalidToken, err)
	}
	return claims, nil
}
