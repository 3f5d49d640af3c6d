package captcha

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

const (
	sid      = "Zm9vYmFyYmF6cXV4cXV1eA" // 22 base64url characters, as a page would make
	otherSID = "0123456789abcdef0123456789abcdef"
	tenant   = int64(42)
)

// issueSolved returns a challenge for sid of tenant and the payload the widget would submit.
func issueSolved(t testing.TB, is *Issuer, maxNumber int) (Challenge, string) {
	t.Helper()
	ch, err := is.Create(tenant, sid, maxNumber, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Solve(ch)
	if err != nil {
		t.Fatal(err)
	}
	return ch, p
}

// tamper decodes a payload, lets edit change it, and encodes it again as the widget would.
func tamper(t *testing.T, p string, edit func(pl *payload)) string {
	t.Helper()
	pl, err := decodePayload(p)
	if err != nil {
		t.Fatal(err)
	}
	edit(&pl)
	out, err := encodePayload(pl)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// flipHex changes the last hex digit of s, keeping it valid lowercase hex.
func flipHex(s string) string {
	last := s[len(s)-1]
	repl := byte('0')
	if last == '0' {
		repl = '1'
	}
	return s[:len(s)-1] + string(repl)
}

func TestRoundTripWithGoSolver(t *testing.T) {
	c := newClock()
	is := newIssuer(t, c.Now)
	ch, p := issueSolved(t, is, DefaultMaxNumber)
	got, err := is.Verify(p, tenant, sid, DefaultMaxNumber)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	want := Solved{
		ID:          ch.Parameters.Nonce,
		TenantID:    tenant,
		SessionHash: HashSessionID(sid),
		MaxNumber:   DefaultMaxNumber,
		ExpiresAt:   c.Now().Add(5 * time.Minute),
	}
	if !got.ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("ExpiresAt = %s, want %s", got.ExpiresAt, want.ExpiresAt)
	}
	got.ExpiresAt = want.ExpiresAt
	if got != want {
		t.Fatalf("Solved = %+v, want %+v", got, want)
	}
}

func TestChallengeCarriesNoRawSessionID(t *testing.T) {
	is := newIssuer(t, nil)
	ch, err := is.Create(tenant, sid, 1000, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(ch)
	if bytes.Contains(js, []byte(sid)) {
		t.Fatalf("challenge JSON contains the raw session ID: %s", js)
	}
	if ch.Parameters.Data.Session != HashSessionID(sid) || ch.Parameters.Data.Tenant != "42" {
		t.Fatalf("data = %+v", ch.Parameters.Data)
	}
}

// TestChallengeJSONIsWidgetFormat pins the wire format the vendored widget (altcha 3.2.2)
// recognises as v2, and checks that the signature covers ALTCHA's canonical JSON (sorted keys).
func TestChallengeJSONIsWidgetFormat(t *testing.T) {
	is := newIssuer(t, newClock().Now)
	ch, err := is.Create(tenant, sid, 1000, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(ch)
	if err != nil {
		t.Fatal(err)
	}
	var generic struct {
		Parameters map[string]any `json:"parameters"`
		Signature  string         `json:"signature"`
	}
	if err := json.Unmarshal(js, &generic); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"algorithm", "nonce", "salt", "keyPrefix", "cost", "keyLength", "expiresAt", "data"} {
		if _, ok := generic.Parameters[k]; !ok {
			t.Errorf("parameters lack %q: %s", k, js)
		}
	}
	if bytes.Contains(js, []byte(`"challenge"`)) {
		t.Errorf("a top-level \"challenge\" key would make the widget treat it as a v1 challenge: %s", js)
	}
	// Go encodes maps with sorted keys, so re-encoding the generic form is the canonical form.
	sorted, _ := json.Marshal(generic.Parameters)
	canon, err := CanonicalJSON(ch.Parameters)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sorted, canon) {
		t.Fatalf("parameters are not in canonical order:\n got %s\nwant %s", canon, sorted)
	}
	mac := hmac.New(sha256.New, testKey)
	mac.Write(sorted)
	if want := hex.EncodeToString(mac.Sum(nil)); ch.Signature != want {
		t.Fatalf("signature = %s, want HMAC of canonical JSON %s", ch.Signature, want)
	}
	if want := time.Date(2026, 3, 1, 12, 1, 0, 0, time.UTC).Unix(); ch.Parameters.ExpiresAt != want {
		t.Fatalf("expiresAt = %d, want %d", ch.Parameters.ExpiresAt, want)
	}
}

// TestSolvePayloadIsWidgetFormat checks that Solve produces the payload exactly as the
// widget's verify() does: btoa(JSON.stringify({challenge:{parameters,signature},solution})).
func TestSolvePayloadIsWidgetFormat(t *testing.T) {
	is := newIssuer(t, nil)
	ch, p := issueSolved(t, is, 100)
	raw, err := base64.StdEncoding.DecodeString(p)
	if err != nil {
		t.Fatal(err)
	}
	params, _ := CanonicalJSON(ch.Parameters)
	prefix := `{"challenge":{"parameters":` + string(params) + `,"signature":"` + ch.Signature + `"},"solution":{"counter":`
	if !strings.HasPrefix(string(raw), prefix) {
		t.Fatalf("payload JSON\n %s\ndoes not start with\n %s", raw, prefix)
	}
	var pl payload
	if err := json.Unmarshal(raw, &pl); err != nil {
		t.Fatal(err)
	}
	key := deriveKey(mustHex(ch.Parameters.Salt), mustHex(ch.Parameters.Nonce), uint32(pl.Solution.Counter))
	if pl.Solution.DerivedKey != hex.EncodeToString(key[:]) || !strings.HasPrefix(pl.Solution.DerivedKey, ch.Parameters.KeyPrefix) {
		t.Fatalf("solution %+v does not match the challenge", pl.Solution)
	}
}

// TestAcceptsPayloadBuiltByWidgetCode is a golden vector: the challenge was made by this
// package at a fixed time and the payload by altcha@3.2.2's own solveChallenge (dist/lib,
// run in Node with the widget's uint32 counter mode) and the widget's payload expression.
func TestAcceptsPayloadBuiltByWidgetCode(t *testing.T) {
	at := time.Unix(goldenIssuedAt, 0)
	is := newIssuer(t, func() time.Time { return at })
	got, err := is.Verify(goldenWidgetPayload, tenant, sid, 1000)
	if err != nil {
		t.Fatalf("Verify(widget payload): %v", err)
	}
	if got.ID != goldenNonce {
		t.Fatalf("ID = %s, want %s", got.ID, goldenNonce)
	}
}

func TestVerifyRefuses(t *testing.T) {
	c := newClock()
	is := newIssuer(t, c.Now)
	_, good := issueSolved(t, is, 2000)

	other, err := NewIssuer(bytes.Repeat([]byte{7}, 32), c.Now)
	if err != nil {
		t.Fatal(err)
	}
	_, foreign := issueSolved(t, other, 2000)
	lowCh, err := is.Create(tenant, sid, 500, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	low, err := Solve(lowCh)
	if err != nil {
		t.Fatal(err)
	}
	otherTenantCh, err := is.Create(tenant+1, sid, 2000, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	otherTenant, _ := Solve(otherTenantCh)
	otherSessionCh, err := is.Create(tenant, otherSID, 2000, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	otherSession, _ := Solve(otherSessionCh)
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

	cases := []struct {
		name    string
		payload string
		sid     string
		want    error
	}{
		{"oversized", strings.Repeat("A", MaxPayloadSize+4), sid, ErrPayloadTooLarge},
		{"empty", "", sid, ErrMalformedPayload},
		{"not base64", "%%%not-base64%%%", sid, ErrMalformedPayload},
		{"url-safe base64", strings.NewReplacer("+", "-", "/", "_").Replace(b64(`{"challenge":{"parameters":{}},"solution":{}}??>>`)), sid, ErrMalformedPayload},
		{"not json", b64("hello"), sid, ErrMalformedPayload},
		{"json null", b64("null"), sid, ErrMalformedPayload},
		{"trailing data", b64(mustDecode(t, good) + " {}"), sid, ErrMalformedPayload},
		{"unknown field", tamperRaw(t, good, `"solution":{`, `"extra":1,"solution":{`), sid, ErrMalformedPayload},
		// One spelling only: encoding/json keeps a repeated member's last copy and folds case.
		{"member given twice", tamperRaw(t, good, `{"challenge":`, `{"challenge":{"parameters":{},"signature":"00"},"challenge":`), sid, ErrMalformedPayload},
		{"member in another case", tamperRaw(t, good, `"solution":{`, `"Solution":{`), sid, ErrMalformedPayload},
		{"member in a look-alike", tamperRaw(t, good, `"salt":`, "\"\u017falt\":"), sid, ErrMalformedPayload},
		{"classic v1 payload", b64(`{"algorithm":"SHA-256","challenge":"ab","number":1,"salt":"x?expires=1","signature":"cd","took":3}`), sid, ErrMalformedPayload},
		{"uppercase hex", tamper(t, good, func(pl *payload) { pl.Solution.DerivedKey = strings.ToUpper(pl.Solution.DerivedKey) }), sid, ErrMalformedPayload},
		{"negative counter", tamper(t, good, func(pl *payload) { pl.Solution.Counter = -1 }), sid, ErrMalformedPayload},
		{"test mode (widget 3.x)", b64(`{"challenge":null,"solution":null,"test":true}`), sid, ErrTestMode},
		{"test mode (widget 1.x/2.x)", b64(`{"algorithm":"SHA-256","challenge":"00","number":0,"salt":"00","signature":null,"test":true,"took":1}`), sid, ErrTestMode},
		{"algorithm", tamper(t, good, func(pl *payload) { pl.Challenge.Parameters.Algorithm = "SHA-512" }), sid, ErrAlgorithm},
		{"cost", tamper(t, good, func(pl *payload) { pl.Challenge.Parameters.Cost = 0 }), sid, ErrAlgorithm},
		{"tampered salt", tamper(t, good, func(pl *payload) { pl.Challenge.Parameters.Salt = flipHex(pl.Challenge.Parameters.Salt) }), sid, ErrSignature},
		{"tampered nonce", tamper(t, good, func(pl *payload) { pl.Challenge.Parameters.Nonce = flipHex(pl.Challenge.Parameters.Nonce) }), sid, ErrSignature},
		{"tampered keyPrefix", tamper(t, good, func(pl *payload) { pl.Challenge.Parameters.KeyPrefix = flipHex(pl.Challenge.Parameters.KeyPrefix) }), sid, ErrSignature},
		{"tampered signature", tamper(t, good, func(pl *payload) { pl.Challenge.Signature = flipHex(pl.Challenge.Signature) }), sid, ErrSignature},
		{"tampered expiry", tamper(t, good, func(pl *payload) { pl.Challenge.Parameters.ExpiresAt += 3600 }), sid, ErrSignature},
		{"tampered difficulty", tamper(t, low, func(pl *payload) { pl.Challenge.Parameters.Data.MaxNumber = "2000" }), sid, ErrSignature},
		{"tampered tenant", tamper(t, otherTenant, func(pl *payload) { pl.Challenge.Parameters.Data.Tenant = "42" }), sid, ErrSignature},
		{"other server's key", foreign, sid, ErrSignature},
		{"wrong counter", tamper(t, good, func(pl *payload) { pl.Solution.Counter++ }), sid, ErrWrongSolution},
		{"wrong derived key", tamper(t, good, func(pl *payload) { pl.Solution.DerivedKey = flipHex(pl.Solution.DerivedKey) }), sid, ErrWrongSolution},
		{"consistent but wrong counter", tamper(t, good, func(pl *payload) {
			pl.Solution.Counter = (pl.Solution.Counter + 1) % 2000
			k := deriveKey(mustHex(pl.Challenge.Parameters.Salt), mustHex(pl.Challenge.Parameters.Nonce), uint32(pl.Solution.Counter))
			pl.Solution.DerivedKey = hex.EncodeToString(k[:])
		}), sid, ErrWrongSolution},
		{"another tenant's challenge", otherTenant, sid, ErrWrongTenant},
		{"another session's challenge", otherSession, sid, ErrWrongSession},
		{"difficulty below minimum", low, sid, ErrDifficulty},
		{"invalid session ID", good, "short", ErrInvalidSessionID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := is.Verify(tc.payload, tenant, tc.sid, 1000)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "captcha: ") {
				t.Fatalf("error %q is not prefixed with the package", err)
			}
		})
	}
	if _, err := is.Verify(good, tenant, sid, 1000); err != nil {
		t.Fatalf("the untampered payload must still verify: %v", err)
	}
}

func TestVerifyRefusesExpiredChallenge(t *testing.T) {
	c := newClock()
	is := newIssuer(t, c.Now)
	ch, err := is.Create(tenant, sid, 1000, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Solve(ch)
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(2*time.Minute - time.Second)
	if _, err := is.Verify(p, tenant, sid, 1000); err != nil {
		t.Fatalf("one second before expiry: %v", err)
	}
	c.Advance(time.Second)
	if _, err := is.Verify(p, tenant, sid, 1000); !errors.Is(err, ErrExpired) {
		t.Fatalf("at expiry: err = %v, want ErrExpired", err)
	}
}

func TestCreateValidatesArguments(t *testing.T) {
	is := newIssuer(t, nil)
	for _, tc := range []struct {
		name string
		sid  string
		max  int
		ttl  time.Duration
	}{
		{"short session ID", "abc", 1000, time.Minute},
		{"session ID with a dot", strings.Repeat("a", 20) + ".", 1000, time.Minute},
		{"zero difficulty", sid, 0, time.Minute},
		{"huge difficulty", sid, MaxMaxNumber + 1, time.Minute},
		{"no ttl", sid, 1000, 0},
		{"ttl too long", sid, 1000, MaxTTL + time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := is.Create(tenant, tc.sid, tc.max, tc.ttl); err == nil {
				t.Fatal("Create accepted invalid arguments")
			}
		})
	}
	if _, err := NewIssuer([]byte("short"), nil); err == nil {
		t.Fatal("NewIssuer accepted a 5-byte key")
	}
}

func TestCounterIsSpreadOverRange(t *testing.T) {
	// Deterministic mode is only as hard as the counter is random: over many challenges with
	// maxNumber 3, every value 0..3 must turn up, and nothing above.
	is := newIssuer(t, nil)
	seen := map[int64]int{}
	for range 200 {
		ch, err := is.Create(tenant, sid, 3, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Solve(ch)
		if err != nil {
			t.Fatal(err)
		}
		pl, _ := decodePayload(p)
		seen[pl.Solution.Counter]++
	}
	if len(seen) != 4 {
		t.Fatalf("counters seen: %v, want each of 0..3", seen)
	}
}

func TestValidateSessionID(t *testing.T) {
	for id, ok := range map[string]bool{
		strings.Repeat("a", 15):  false,
		strings.Repeat("a", 16):  true,
		strings.Repeat("Z", 128): true,
		strings.Repeat("9", 129): false,
		"abcdefghijklmnop_-":     true,
		"abcdefghijklmnop+/":     false,
		"abcdefghijklmnop\x00":   false,
		"abcdefghijklmnopé":      false,
		" abcdefghijklmnopq":     false,
	} {
		err := ValidateSessionID(id)
		if (err == nil) != ok {
			t.Errorf("ValidateSessionID(%q) = %v, want ok=%v", id, err, ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidSessionID) {
			t.Errorf("ValidateSessionID(%q) = %v, not ErrInvalidSessionID", id, err)
		}
	}
}

func FuzzDecodePayload(f *testing.F) {
	at := time.Unix(goldenIssuedAt, 0)
	is := newIssuer(f, func() time.Time { return at })
	_, good := issueSolved(f, is, 100)
	f.Add(good)
	f.Add(goldenWidgetPayload)
	f.Add(base64.StdEncoding.EncodeToString([]byte(`{"challenge":null,"solution":null,"test":true}`)))
	f.Add(base64.StdEncoding.EncodeToString([]byte(`{"challenge":{"parameters":{}},"solution":{}}`)))
	f.Add("")
	f.Add("e30=")
	// Verifying with another key must refuse everything: nothing the fuzzer finds can carry a
	// valid signature.
	stranger, err := NewIssuer(bytes.Repeat([]byte{9}, 32), func() time.Time { return at })
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pl, err := decodePayload(s)
		if _, verr := stranger.Verify(s, tenant, sid, 1); verr == nil {
			t.Fatalf("a payload signed with another key verified: %q", s)
		}
		if err != nil {
			if !errors.Is(err, ErrPayloadTooLarge) && !errors.Is(err, ErrMalformedPayload) && !errors.Is(err, ErrTestMode) {
				t.Fatalf("decode error without a sentinel: %v", err)
			}
			return
		}
		// Whatever decodes has the exact shape Sluice issues, and one spelling: re-encoding it
		// decodes to the same value.
		if err := checkShape(pl); err != nil {
			t.Fatalf("decoded a malformed payload: %v", err)
		}
		again, err := encodePayload(pl)
		if err != nil {
			t.Fatal(err)
		}
		pl2, err := decodePayload(again)
		if err != nil {
			t.Fatalf("re-encoded payload does not decode: %v", err)
		}
		a, _ := json.Marshal(pl)
		b, _ := json.Marshal(pl2)
		if !bytes.Equal(a, b) {
			t.Fatalf("round trip changed the payload:\n%s\n%s", a, b)
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	is := newIssuer(b, nil)
	_, p := issueSolved(b, is, DefaultMaxNumber)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := is.Verify(p, tenant, sid, DefaultMaxNumber); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCreate(b *testing.B) {
	is := newIssuer(b, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := is.Create(tenant, sid, DefaultMaxNumber, 5*time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSolveDefault measures the Go solver at the default difficulty; the counter is
// random, so the mean over many iterations approximates DefaultMaxNumber/2 hashes.
func BenchmarkSolveDefault(b *testing.B) {
	is := newIssuer(b, nil)
	for b.Loop() {
		b.StopTimer()
		ch, err := is.Create(tenant, sid, DefaultMaxNumber, 5*time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := Solve(ch); err != nil {
			b.Fatal(err)
		}
	}
}

func mustDecode(t *testing.T, p string) string {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// tamperRaw edits the payload's JSON text, for changes the typed form cannot express.
func tamperRaw(t *testing.T, p, old, new string) string {
	t.Helper()
	raw := mustDecode(t, p)
	if !strings.Contains(raw, old) {
		t.Fatalf("payload has no %q", old)
	}
	return base64.StdEncoding.EncodeToString([]byte(strings.Replace(raw, old, new, 1)))
}
