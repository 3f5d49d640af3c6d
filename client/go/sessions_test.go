package sluice_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// solvedPayload fetches a captcha challenge for sessionID with the tenant's publishable key, as a
// browser would, and solves it (ALTCHA v2: the counter whose SHA-256(salt ‖ nonce ‖ uint32
// big-endian counter) starts with keyPrefix), returning the widget's payload.
func solvedPayload(t *testing.T, sessionID string) string {
	t.Helper()
	resp, err := http.Get(baseURL + "/v1/captcha/challenge?" + url.Values{"pk": {publishableKey}, "sid": {sessionID}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ch struct {
		Parameters struct {
			Salt, Nonce, KeyPrefix string
			Data                   struct {
				MaxNumber json.Number `json:"maxNumber"`
			} `json:"data"`
		} `json:"parameters"`
	}
	raw := json.RawMessage{}
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("challenge: %d %v", resp.StatusCode, err)
	}
	if err := json.Unmarshal(raw, &ch); err != nil {
		t.Fatal(err)
	}
	salt, _ := hex.DecodeString(ch.Parameters.Salt)
	nonce, _ := hex.DecodeString(ch.Parameters.Nonce)
	prefix, _ := hex.DecodeString(ch.Parameters.KeyPrefix)
	maxNumber, _ := strconv.ParseUint(ch.Parameters.Data.MaxNumber.String(), 10, 32)
	msg := append(append(append([]byte(nil), salt...), nonce...), 0, 0, 0, 0)
	for counter := uint64(0); counter <= maxNumber; counter++ {
		binary.BigEndian.PutUint32(msg[len(msg)-4:], uint32(counter))
		key := sha256.Sum256(msg)
		if bytes.HasPrefix(key[:], prefix) {
			var challenge map[string]any
			_ = json.Unmarshal(raw, &challenge)
			payload, _ := json.Marshal(map[string]any{
				"challenge": map[string]any{"parameters": challenge["parameters"], "signature": challenge["signature"]},
				"solution":  map[string]any{"counter": counter, "derivedKey": hex.EncodeToString(key[:]), "time": 1},
			})
			return base64.StdEncoding.EncodeToString(payload)
		}
	}
	t.Fatalf("no counter up to %d solves the challenge", maxNumber)
	return ""
}

// TestSessionsAreAuthorizedReadAndRevoked: a solved challenge authorizes its session once,
// decisions by session then pass, GetSession reads it, RevokeSession ends it.
func TestSessionsAreAuthorizedReadAndRevoked(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	sid := "go-client-session-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var apiErr *sluice.Error
	if _, err := c.GetSession(ctx, sid); !errors.As(err, &apiErr) || apiErr.Code != "not_found" {
		t.Fatalf("an unauthorized session: %v", err)
	}
	payload := solvedPayload(t, sid)
	auth, err := c.AuthorizeSession(ctx, sid, payload)
	if err != nil || !auth.Authorized || auth.Token == "" || !auth.ExpiresAt.After(time.Now()) {
		t.Fatalf("authorize = %+v, %v", auth, err)
	}
	if _, err := c.AuthorizeSession(ctx, sid, payload); !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict {
		t.Fatalf("the same solution twice: %v, want a 409", err)
	}
	s, err := c.GetSession(ctx, sid)
	if err != nil || s.SessionID != sid || !s.Authorized {
		t.Fatalf("session = %+v, %v", s, err)
	}
	name := limitName(t, "bysession")
	if _, err := c.Put(ctx, name, sluice.Definition{Kind: sluice.TokenBucket, Rate: 5, Period: 60_000}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Limit(ctx, name, sluice.Decision{Session: sid}); err != nil || !r.OK {
		t.Fatalf("a decision by the authorized session: %+v, %v", r, err)
	}
	if err := c.RevokeSession(ctx, sid); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Limit(ctx, name, sluice.Decision{Session: sid}); !errors.As(err, &apiErr) || apiErr.Code != "session_not_authorized" {
		t.Fatalf("a decision by the revoked session: %v", err)
	}
}
