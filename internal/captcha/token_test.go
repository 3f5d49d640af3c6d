package captcha

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const testIssuer = "https://sluice.example"

func newSigner(t *testing.T, c *clock) *Signer {
	t.Helper()
	s, err := NewSigner(bytes.Repeat([]byte{1}, 32), testIssuer)
	if err != nil {
		t.Fatal(err)
	}
	return s.WithClock(c.Now)
}

// jwksKeys parses a JWK set the way a tenant would, independently of the Signer.
func jwksKeys(t *testing.T, set []byte) map[string]ed25519.PublicKey {
	t.Helper()
	var doc struct {
		Keys []map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(set, &doc); err != nil {
		t.Fatal(err)
	}
	keys := map[string]ed25519.PublicKey{}
	for _, k := range doc.Keys {
		if k["kty"] != "OKP" || k["crv"] != "Ed25519" || k["alg"] != "EdDSA" || k["use"] != "sig" || k["kid"] == "" {
			t.Fatalf("JWK is not an RFC 8037 Ed25519 signing key: %v", k)
		}
		x, err := base64.RawURLEncoding.DecodeString(k["x"])
		if err != nil || len(x) != ed25519.PublicKeySize {
			t.Fatalf("bad x %q: %v", k["x"], err)
		}
		keys[k["kid"]] = ed25519.PublicKey(x)
	}
	return keys
}

func TestTokenVerifiesAgainstJWKS(t *testing.T) {
	c := newClock()
	s := newSigner(t, c)
	exp := c.Now().Add(time.Hour)
	tok, err := s.Token(tenant, HashSessionID(sid), exp)
	if err != nil {
		t.Fatal(err)
	}
	keys := jwksKeys(t, s.JWKS())
	var claims TokenClaims
	parsed, err := jwt.ParseWithClaims(tok, &claims, func(tk *jwt.Token) (any, error) {
		k, ok := keys[tk.Header["kid"].(string)]
		if !ok {
			return nil, errors.New("kid not in JWKS")
		}
		return k, nil
	}, jwt.WithValidMethods([]string{"EdDSA"}), jwt.WithTimeFunc(c.Now), jwt.WithAudience(Audience(tenant)))
	if err != nil {
		t.Fatalf("token does not verify with the JWKS key: %v", err)
	}
	if parsed.Header["alg"] != "EdDSA" || parsed.Header["kid"] != s.KeyID() {
		t.Fatalf("header = %v", parsed.Header)
	}
	if claims.Issuer != testIssuer || claims.Subject != HashSessionID(sid) || claims.Tenant != tenant ||
		!claims.ExpiresAt.Equal(exp) || !claims.IssuedAt.Equal(c.Now()) {
		t.Fatalf("claims = %+v", claims)
	}
	got, err := s.VerifyToken(tok, Audience(tenant))
	if err != nil {
		t.Fatalf("VerifyToken: %v", err)
	}
	if got.Subject != HashSessionID(sid) {
		t.Fatalf("VerifyToken subject = %s", got.Subject)
	}
}

func TestVerifyTokenRefuses(t *testing.T) {
	c := newClock()
	s := newSigner(t, c)
	good, err := s.Token(tenant, HashSessionID(sid), c.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// The classic key-confusion attack: HS256 keyed with the public key the JWKS publishes.
	pub := jwksKeys(t, s.JWKS())[s.KeyID()]
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, TokenClaims{Tenant: tenant, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: testIssuer, Subject: HashSessionID(sid), Audience: jwt.ClaimStrings{Audience(tenant)},
		IssuedAt: jwt.NewNumericDate(c.Now()), ExpiresAt: jwt.NewNumericDate(c.Now().Add(time.Hour)),
	}})
	hs.Header["kid"] = s.KeyID()
	hsTok, err := hs.SignedString([]byte(pub))
	if err != nil {
		t.Fatal(err)
	}
	none := jwt.NewWithClaims(jwt.SigningMethodNone, hs.Claims)
	none.Header["kid"] = s.KeyID()
	noneTok, err := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	otherSigner, err := NewSigner(bytes.Repeat([]byte{2}, 32), testIssuer)
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := otherSigner.WithClock(c.Now).Token(tenant, HashSessionID(sid), c.Now().Add(time.Hour))
	otherIssuer, _ := NewSigner(bytes.Repeat([]byte{1}, 32), "https://evil.example")
	wrongIss, _ := otherIssuer.WithClock(c.Now).Token(tenant, HashSessionID(sid), c.Now().Add(time.Hour))
	parts := strings.Split(good, ".")
	tamperedSig := parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2]))

	for _, tc := range []struct {
		name, token, aud string
	}{
		{"wrong audience", good, Audience(tenant + 1)},
		{"empty audience", good, ""},
		{"HS256 signed with the public key", hsTok, Audience(tenant)},
		{"alg none", noneTok, Audience(tenant)},
		{"other key", forged, Audience(tenant)},
		{"wrong issuer", wrongIss, Audience(tenant)},
		{"tampered signature", tamperedSig, Audience(tenant)},
		{"garbage", "not.a.jwt", Audience(tenant)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.VerifyToken(tc.token, tc.aud); !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("err = %v, want ErrInvalidToken", err)
			}
		})
	}

	t.Run("after expiry", func(t *testing.T) {
		c.Advance(time.Hour)
		if _, err := s.VerifyToken(good, Audience(tenant)); !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("err = %v, want an expired ErrInvalidToken", err)
		}
	})
}

func TestSignerKeyIsStableAndSeeded(t *testing.T) {
	a, _ := NewSigner(bytes.Repeat([]byte{1}, 32), testIssuer)
	b, _ := NewSigner(bytes.Repeat([]byte{1}, 32), testIssuer)
	c, _ := NewSigner(bytes.Repeat([]byte{3}, 32), testIssuer)
	if !bytes.Equal(a.JWKS(), b.JWKS()) || a.KeyID() != b.KeyID() {
		t.Fatal("one seed gave two keys: instances would not verify each other's tokens")
	}
	if a.KeyID() == c.KeyID() {
		t.Fatal("two seeds gave one kid")
	}
	if _, err := NewSigner(make([]byte, 31), testIssuer); err == nil {
		t.Fatal("NewSigner accepted a 31-byte seed")
	}
}
