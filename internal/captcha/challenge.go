package captcha

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/internal/strictjson"
)

// Protocol constants of the challenges Sluice issues (see the package documentation).
const (
	// Algorithm is the only ALTCHA algorithm Sluice issues and accepts.
	Algorithm = "SHA-256"
	// DefaultMaxNumber is the default difficulty, equal to the schema's default
	// tenants.captcha_difficulty: the secret counter lies in [0, DefaultMaxNumber].
	DefaultMaxNumber = 50_000
	// MaxMaxNumber caps the difficulty. The widget counts with a uint32, and far below that a
	// phone would give up (its default timeout is 90 s) before finding the counter.
	MaxMaxNumber = 10_000_000
	// MaxPayloadSize bounds a submitted payload. A real one is about 800 bytes; the bound keeps
	// decoding cheap for whoever sends garbage.
	MaxPayloadSize = 4 << 10
	// MinTTL and MaxTTL bound a challenge's lifetime: expiry has one-second resolution, and a
	// challenge that lives for days would make the replay store large.
	MinTTL = time.Second
	MaxTTL = 24 * time.Hour

	cost         = 1  // iterations of SHA-256: one, the cost lies in the number of counters
	keyLength    = 32 // bytes of derived key: a whole SHA-256 digest
	prefixLength = 16 // bytes of the derived key published: unique to the secret counter
	randomBytes  = 16 // bytes of nonce and of salt
	minKeyLength = 32 // bytes of HMAC key, so that signatures cannot be forged by brute force
)

// Challenge is an ALTCHA v2 challenge as the widget fetches it; encode it with encoding/json
// and serve it as application/json.
type Challenge struct {
	Parameters Parameters `json:"parameters"`
	Signature  string     `json:"signature"` // hex HMAC-SHA256 of CanonicalJSON(Parameters)
}

// Parameters are a challenge's signed parameters. The fields are declared in alphabetical
// order of their JSON names because their JSON encoding must be ALTCHA's canonical form, which
// is what the HMAC signs.
type Parameters struct {
	Algorithm string        `json:"algorithm"` // always "SHA-256"
	Cost      int           `json:"cost"`      // always 1
	Data      ChallengeData `json:"data"`
	ExpiresAt int64         `json:"expiresAt"` // Unix seconds
	KeyLength int           `json:"keyLength"` // always 32
	KeyPrefix string        `json:"keyPrefix"` // hex of the first 16 bytes of the derived key
	Nonce     string        `json:"nonce"`     // 16 random bytes, hex; also the challenge's ID
	Salt      string        `json:"salt"`      // 16 random bytes, hex
}

// ChallengeData binds a challenge to its tenant and session. The values are strings because
// the widget parses and re-serialises the parameters with JavaScript numbers, which would
// corrupt a 64-bit tenant ID; strings come back byte for byte.
type ChallengeData struct {
	MaxNumber string `json:"maxNumber"` // decimal difficulty the challenge was issued at
	Session   string `json:"session"`   // HashSessionID of the session ID
	Tenant    string `json:"tenant"`    // decimal tenant ID
}

// Solved is a verified payload: what the replay store and the session authorization need.
type Solved struct {
	ID          string    // the challenge's nonce: unique per issued challenge, used once
	TenantID    int64     // tenant the challenge was issued for
	SessionHash string    // HashSessionID of the session it was issued for
	MaxNumber   int       // difficulty it was issued at
	ExpiresAt   time.Time // when the challenge expires (whole seconds)
}

// Issuer creates and verifies challenges with one HMAC key and one clock. It is safe for
// concurrent use.
type Issuer struct {
	key []byte
	now func() time.Time
}

// NewIssuer returns an Issuer signing with hmacKey (at least 32 bytes, derived from the server
// secret) and reading time from now (time.Now when nil; tests inject a fake clock).
func NewIssuer(hmacKey []byte, now func() time.Time) (*Issuer, error) {
	if len(hmacKey) < minKeyLength {
		return nil, fmt.Errorf("captcha: HMAC key must be at least %d bytes, got %d", minKeyLength, len(hmacKey))
	}
	if now == nil {
		now = time.Now
	}
	return &Issuer{key: bytes.Clone(hmacKey), now: now}, nil
}

// Create issues a challenge for sessionID of tenantID that the widget must solve within ttl.
// The secret counter is drawn uniformly from [0, maxNumber], so solving costs maxNumber/2
// SHA-256 hashes on average and maxNumber+1 at worst.
func (is *Issuer) Create(tenantID int64, sessionID string, maxNumber int, ttl time.Duration) (Challenge, error) {
	if err := ValidateSessionID(sessionID); err != nil {
		return Challenge{}, err
	}
	if maxNumber < 1 || maxNumber > MaxMaxNumber {
		return Challenge{}, fmt.Errorf("captcha: create: maxNumber %d outside [1, %d]", maxNumber, MaxMaxNumber)
	}
	if ttl < MinTTL || ttl > MaxTTL {
		return Challenge{}, fmt.Errorf("captcha: create: ttl %s outside [%s, %s]", ttl, MinTTL, MaxTTL)
	}
	n, err := rand.Int(rand.Reader, big.NewInt(int64(maxNumber)+1))
	if err != nil {
		return Challenge{}, fmt.Errorf("captcha: create: draw counter: %w", err)
	}
	nonce, salt := make([]byte, randomBytes), make([]byte, randomBytes)
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails (it crashes the program instead)
	_, _ = rand.Read(salt)
	key := deriveKey(salt, nonce, uint32(n.Int64()))
	p := Parameters{
		Algorithm: Algorithm,
		Cost:      cost,
		Data: ChallengeData{
			MaxNumber: strconv.Itoa(maxNumber),
			Session:   HashSessionID(sessionID),
			Tenant:    strconv.FormatInt(tenantID, 10),
		},
		ExpiresAt: is.now().Add(ttl).Unix(),
		KeyLength: keyLength,
		KeyPrefix: hex.EncodeToString(key[:prefixLength]),
		Nonce:     hex.EncodeToString(nonce),
		Salt:      hex.EncodeToString(salt),
	}
	sig, err := is.sign(p)
	if err != nil {
		return Challenge{}, err
	}
	return Challenge{Parameters: p, Signature: sig}, nil
}

// Verify checks a payload submitted by the widget for sessionID of tenantID and requires the
// challenge to have been issued at difficulty minMaxNumber or more (the tenant's current
// setting, so that raising it retires easier challenges at once). It does not consume the
// challenge: Store.Authorize does that, atomically with the authorization.
func (is *Issuer) Verify(payload string, tenantID int64, sessionID string, minMaxNumber int) (Solved, error) {
	if err := ValidateSessionID(sessionID); err != nil {
		return Solved{}, err
	}
	pl, err := decodePayload(payload)
	if err != nil {
		return Solved{}, err
	}
	p := pl.Challenge.Parameters
	if p.Algorithm != Algorithm || p.Cost != cost || p.KeyLength != keyLength {
		return Solved{}, fmt.Errorf("captcha: verify: %q cost %d keyLength %d: %w", p.Algorithm, p.Cost, p.KeyLength, ErrAlgorithm)
	}
	want, err := is.sign(p)
	if err != nil {
		return Solved{}, err
	}
	// Both are hex strings of fixed length here; compare in constant time so that the check
	// leaks nothing about the expected signature.
	if !hmac.Equal([]byte(want), []byte(pl.Challenge.Signature)) {
		return Solved{}, fmt.Errorf("captcha: verify: %w", ErrSignature)
	}
	// From here on the parameters are ours, so the decimal fields parse (decodePayload checked
	// their syntax) and are trustworthy.
	tenant, _ := strconv.ParseInt(p.Data.Tenant, 10, 64)
	maxNumber, _ := strconv.Atoi(p.Data.MaxNumber)
	if tenant != tenantID {
		return Solved{}, fmt.Errorf("captcha: verify: %w", ErrWrongTenant)
	}
	if p.Data.Session != HashSessionID(sessionID) {
		return Solved{}, fmt.Errorf("captcha: verify: %w", ErrWrongSession)
	}
	if maxNumber < minMaxNumber {
		return Solved{}, fmt.Errorf("captcha: verify: issued at %d, need %d: %w", maxNumber, minMaxNumber, ErrDifficulty)
	}
	expiresAt := time.Unix(p.ExpiresAt, 0)
	if !is.now().Before(expiresAt) {
		return Solved{}, fmt.Errorf("captcha: verify: expired at %s: %w", expiresAt.UTC().Format(time.RFC3339), ErrExpired)
	}
	key := deriveKey(mustHex(p.Salt), mustHex(p.Nonce), uint32(pl.Solution.Counter))
	// The prefix pins the one counter the server drew (16 bytes cannot match by chance); the
	// derived key the client reports must be the real one too, as altcha-lib requires.
	prefixOK := subtle.ConstantTimeCompare(key[:prefixLength], mustHex(p.KeyPrefix)) == 1
	keyOK := subtle.ConstantTimeCompare(key[:], mustHex(pl.Solution.DerivedKey)) == 1
	if !prefixOK || !keyOK {
		return Solved{}, fmt.Errorf("captcha: verify: %w", ErrWrongSolution)
	}
	return Solved{
		ID:          p.Nonce,
		TenantID:    tenant,
		SessionHash: p.Data.Session,
		MaxNumber:   maxNumber,
		ExpiresAt:   expiresAt,
	}, nil
}

// Solve finds the counter of ch by brute force, exactly as the widget does (counters from 0
// upwards), and returns the payload the widget would submit, byte for byte. It serves tests,
// benchmarks and non-browser clients.
func Solve(ch Challenge) (string, error) {
	p := ch.Parameters
	if p.Algorithm != Algorithm || p.Cost != cost || p.KeyLength != keyLength {
		return "", fmt.Errorf("captcha: solve: %q cost %d keyLength %d: %w", p.Algorithm, p.Cost, p.KeyLength, ErrAlgorithm)
	}
	salt, err1 := hex.DecodeString(p.Salt)
	nonce, err2 := hex.DecodeString(p.Nonce)
	prefix, err3 := hex.DecodeString(p.KeyPrefix)
	if err := errors.Join(err1, err2, err3); err != nil {
		return "", fmt.Errorf("captcha: solve: %w: %v", ErrMalformedPayload, err)
	}
	limit := uint64(math.MaxUint32)
	if m, err := strconv.ParseUint(p.Data.MaxNumber, 10, 32); err == nil {
		limit = m // our own challenges say where the counter can be; stop there
	}
	start := time.Now()
	buf := make([]byte, 0, len(salt)+len(nonce)+4)
	buf = append(append(buf, salt...), nonce...)
	buf = append(buf, 0, 0, 0, 0)
	for c := uint64(0); c <= limit; c++ {
		binary.BigEndian.PutUint32(buf[len(buf)-4:], uint32(c))
		key := sha256.Sum256(buf)
		if !bytes.HasPrefix(key[:], prefix) {
			continue
		}
		took := math.Floor(float64(time.Since(start).Microseconds())/100) / 10 // ms, one decimal, as the widget
		return encodePayload(payload{
			Challenge: &Challenge{Parameters: p, Signature: ch.Signature},
			Solution:  &solution{Counter: int64(c), DerivedKey: hex.EncodeToString(key[:]), Time: took},
		})
	}
	return "", fmt.Errorf("captcha: solve: no counter up to %d matches: %w", limit, ErrWrongSolution)
}

// CanonicalJSON is ALTCHA's canonical encoding of p, the bytes the signature covers: keys
// sorted (Parameters and ChallengeData declare their fields in that order) and no HTML
// escaping, as JavaScript's JSON.stringify.
func CanonicalJSON(p Parameters) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		return nil, fmt.Errorf("captcha: encode parameters: %w", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func (is *Issuer) sign(p Parameters) (string, error) {
	msg, err := CanonicalJSON(p)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, is.key)
	mac.Write(msg)
	return hex.EncodeToString(mac.Sum(nil)), nil
}

// deriveKey is the SHA algorithm of ALTCHA v2 at cost 1 with a uint32 counter:
// SHA-256(salt || nonce || big-endian counter).
func deriveKey(salt, nonce []byte, counter uint32) [sha256.Size]byte {
	buf := make([]byte, 0, len(salt)+len(nonce)+4)
	buf = append(append(buf, salt...), nonce...)
	buf = binary.BigEndian.AppendUint32(buf, counter)
	return sha256.Sum256(buf)
}

// payload is the JSON inside the widget's base64 form field.
type payload struct {
	Challenge *Challenge `json:"challenge"`
	Solution  *solution  `json:"solution"`
}

type solution struct {
	Counter    int64   `json:"counter"`
	DerivedKey string  `json:"derivedKey"`
	Time       float64 `json:"time"` // milliseconds the client says it took; informational
}

func encodePayload(pl payload) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(pl); err != nil {
		return "", fmt.Errorf("captcha: encode payload: %w", err)
	}
	return base64.StdEncoding.EncodeToString(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// decodePayload parses a submitted payload and checks its shape: every field present and of
// the exact syntax Sluice issues, nothing else. It checks no signature, so its result is still
// untrusted.
func decodePayload(s string) (payload, error) {
	if len(s) > MaxPayloadSize {
		return payload{}, fmt.Errorf("captcha: payload of %d bytes, limit %d: %w", len(s), MaxPayloadSize, ErrPayloadTooLarge)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return payload{}, fmt.Errorf("captcha: payload: base64: %w: %v", ErrMalformedPayload, err)
	}
	// Test mode first: its payload ({"challenge":null,"solution":null,"test":true}) would
	// otherwise be refused as malformed, and the caller deserves the precise reason.
	var probe struct {
		Test json.RawMessage `json:"test"`
	}
	if json.Unmarshal(raw, &probe) == nil && bytes.Equal(probe.Test, []byte("true")) {
		return payload{}, fmt.Errorf("captcha: payload: %w", ErrTestMode)
	}
	// One spelling only: encoding/json would take a member named twice (the last) or in another
	// case ("CHALLENGE", "ſalt"), and a verifier beside Sluice reading the first or the exact
	// name would see another challenge than the one verified.
	if p := strictjson.Check(raw, reflect.TypeFor[*payload]()); p != nil {
		return payload{}, fmt.Errorf("captcha: payload: json: %w: %v", ErrMalformedPayload, p)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var pl payload
	if err := dec.Decode(&pl); err != nil {
		return payload{}, fmt.Errorf("captcha: payload: json: %w: %v", ErrMalformedPayload, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return payload{}, fmt.Errorf("captcha: payload: json: %w: trailing data", ErrMalformedPayload)
	}
	if err := checkShape(pl); err != nil {
		return payload{}, fmt.Errorf("captcha: payload: %w: %v", ErrMalformedPayload, err)
	}
	return pl, nil
}

func checkShape(pl payload) error {
	if pl.Challenge == nil || pl.Solution == nil {
		return errors.New("challenge or solution missing")
	}
	p := pl.Challenge.Parameters
	switch {
	case !isHex(p.Nonce, 2*randomBytes):
		return errors.New("nonce is not 32 hex digits")
	case !isHex(p.Salt, 2*randomBytes):
		return errors.New("salt is not 32 hex digits")
	case !isHex(p.KeyPrefix, 2*prefixLength):
		return errors.New("keyPrefix is not 32 hex digits")
	case !isHex(pl.Challenge.Signature, 2*sha256.Size):
		return errors.New("signature is not 64 hex digits")
	case !isHex(pl.Solution.DerivedKey, 2*keyLength):
		return errors.New("derivedKey is not 64 hex digits")
	case !isHex(p.Data.Session, 2*sha256.Size):
		return errors.New("data.session is not 64 hex digits")
	case pl.Solution.Counter < 0 || pl.Solution.Counter > math.MaxUint32:
		return errors.New("counter outside uint32")
	case p.ExpiresAt <= 0:
		return errors.New("expiresAt missing")
	}
	if !isDecimal(p.Data.Tenant, true) {
		return errors.New("data.tenant is not a decimal integer")
	}
	if !isDecimal(p.Data.MaxNumber, false) {
		return errors.New("data.maxNumber is not a decimal integer")
	}
	if _, err := strconv.ParseInt(p.Data.Tenant, 10, 64); err != nil {
		return errors.New("data.tenant out of range")
	}
	if m, err := strconv.Atoi(p.Data.MaxNumber); err != nil || m < 1 || m > MaxMaxNumber {
		return errors.New("data.maxNumber out of range")
	}
	return nil
}

// isHex reports whether s is exactly n lowercase hex digits, the only spelling the server and
// the widget produce; accepting others would give one challenge several encodings.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// isDecimal reports whether s is a canonical decimal integer (no sign unless negative is
// allowed, no leading zeros, no spaces), again so that each value has one spelling.
func isDecimal(s string, negative bool) bool {
	if negative && len(s) > 1 && s[0] == '-' {
		s = s[1:]
		if s == "0" {
			return false
		}
	}
	if s == "" || len(s) > 19 || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic("captcha: unchecked hex: " + err.Error()) // decodePayload checked every hex field
	}
	return b
}
