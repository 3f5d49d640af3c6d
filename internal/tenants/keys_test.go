package tenants

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"
)

// refChecksum recomputes a key's checksum independently of keyChecksum (big.Int arithmetic), so
// the tests do not merely compare the implementation with itself.
func refChecksum(prefixAndBody string) string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	sum := sha256.Sum256([]byte(prefixAndBody))
	n := new(big.Int).SetBytes(sum[:8])
	sixtyTwo := big.NewInt(62)
	n.Mod(n, new(big.Int).Exp(sixtyTwo, big.NewInt(6), nil))
	out := make([]byte, 6)
	for i := 5; i >= 0; i-- {
		r := new(big.Int)
		n.DivMod(n, sixtyTwo, r)
		out[i] = alphabet[r.Int64()]
	}
	return string(out)
}

// replaceAt returns s with the base62 character at i replaced by a different one.
func replaceAt(s string, i int) string {
	c := byte('0')
	if s[i] == c {
		c = '1'
	}
	return s[:i] + string(c) + s[i+1:]
}

func TestNewKeysHaveDocumentedFormat(t *testing.T) {
	for _, kind := range []KeyKind{KindSecret, KindPublishable} {
		secret := newKeySecret(kind)
		if len(secret) != 36 || !strings.HasPrefix(secret, kind.prefix()) {
			t.Fatalf("%s key %q: want 36 chars starting %q", kind, secret, kind.prefix())
		}
		if got := refChecksum(secret[:30]); got != secret[30:] {
			t.Fatalf("checksum of %q = %q, reference says %q", secret, secret[30:], got)
		}
		got, err := ParseKey(secret)
		if err != nil || got != kind {
			t.Fatalf("ParseKey(%q) = %q, %v; want %q", secret, got, err, kind)
		}
	}
	if a, b := newKeySecret(KindSecret), newKeySecret(KindSecret); a == b {
		t.Fatal("two generated keys are equal")
	}
}

func TestParseKeyRejectsEverySingleCharacterChange(t *testing.T) {
	secret := newKeySecret(KindSecret)
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-"
	for i := range len(secret) {
		for _, c := range []byte(alphabet) {
			if secret[i] == c {
				continue
			}
			mutated := secret[:i] + string(c) + secret[i+1:]
			if _, err := ParseKey(mutated); !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("ParseKey accepted %q (position %d changed)", mutated, i)
			}
		}
	}
	for _, bad := range []string{"", secret[:35], secret + "0", "Bearer " + secret, strings.ToUpper(secret[:8]) + secret[8:],
		"xk_live_" + secret[8:], "sk_test_" + secret[8:], secret[:20] + "é" + secret[22:]} {
		if _, err := ParseKey(bad); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("ParseKey(%q) = %v, want ErrUnauthorized", bad, err)
		}
	}
}

func TestSecretKeyRoundTrip(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		k, secret, err := e.svc.CreateKey(e.ctx, tn.ID, KindSecret, "  backend  ", "alice")
		must(t, err)
		if !strings.HasPrefix(secret, "sk_live_") || len(secret) != KeyLen {
			t.Fatalf("secret %q has the wrong shape", secret)
		}
		if !strings.HasPrefix(k.ID, "key_") || len(k.ID) != 20 || k.TenantID != tn.ID || k.Kind != KindSecret ||
			k.Label != "backend" || k.Hint != secret[:12]+"…"+secret[32:] || !k.CreatedAt.Equal(e.clock.Now()) ||
			k.RevokedAt != nil || k.LastUsedAt != nil {
			t.Fatalf("CreateKey returned %+v", k)
		}
		p, err := e.svc.Authenticate(e.ctx, secret, KindSecret)
		must(t, err)
		if p != (Principal{TenantID: tn.ID, KeyID: k.ID}) {
			t.Fatalf("principal = %+v, want tenant %d key %s", p, tn.ID, k.ID)
		}
		listed := e.listKey(t, tn.ID, k.ID)
		if listed.Hint != k.Hint || listed.Label != k.Label || !listed.CreatedAt.Equal(k.CreatedAt) {
			t.Fatalf("listed %+v, created %+v", listed, k)
		}
		pk, pkSecret := e.key(t, tn.ID, KindPublishable)
		if !strings.HasPrefix(pkSecret, "pk_live_") {
			t.Fatalf("publishable secret %q", pkSecret)
		}
		p, err = e.svc.Authenticate(e.ctx, pkSecret, KindPublishable)
		must(t, err)
		if p.KeyID != pk.ID {
			t.Fatalf("publishable principal %+v", p)
		}
		_, err = e.svc.Authenticate(e.ctx, newKeySecret(KindSecret), KindSecret)
		wantErr(t, err, ErrUnauthorized)
		_, _, err = e.svc.CreateKey(e.ctx, tn.ID, "root", "", "alice")
		wantErr(t, err, ErrInvalid)
		_, _, err = e.svc.CreateKey(e.ctx, tn.ID+99, KindSecret, "", "alice")
		wantErr(t, err, ErrNotFound)
	})
}

func TestAuthenticateRejectsMalformedKeysWithoutQueryingTheDatabase(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		_, secret := e.key(t, tn.ID, KindSecret)
		malformed := []string{
			replaceAt(secret, 35), // checksum wrong
			replaceAt(secret, 10), // body changed under the same checksum
			secret[:35],
			"pk_live_" + secret[8:], // publishable prefix: its checksum no longer matches
			"sk_live_" + strings.Repeat("!", 28),
			"",
		}
		// With the database closed, any query fails with a database error, not ErrUnauthorized.
		must(t, e.db.Close())
		for _, s := range malformed {
			if _, err := e.svc.Authenticate(e.ctx, s, KindSecret); !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("Authenticate(%q) = %v; want ErrUnauthorized decided before any query", s, err)
			}
		}
		// The control: a well-formed key does reach the (closed) database, and that failure is
		// not reported as a bad credential, so the API can answer 503 rather than 401.
		_, err := e.svc.Authenticate(e.ctx, newKeySecret(KindSecret), KindSecret)
		if err == nil || errors.Is(err, ErrUnauthorized) {
			t.Fatalf("well-formed key against a closed database: %v; want a database error", err)
		}
	})
}

func TestPublishableKeyCannotAuthenticateAsSecret(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		_, pk := e.key(t, tn.ID, KindPublishable)
		_, sk := e.key(t, tn.ID, KindSecret)
		_, err := e.svc.Authenticate(e.ctx, pk, KindSecret)
		wantErr(t, err, ErrUnauthorized)
		_, err = e.svc.Authenticate(e.ctx, sk, KindPublishable)
		wantErr(t, err, ErrUnauthorized)
		// Re-prefixing a real secret with a valid checksum still finds no stored key of that kind.
		body := "pk_live_" + sk[8:30]
		forged := body + refChecksum(body)
		_, err = e.svc.Authenticate(e.ctx, forged, KindPublishable)
		wantErr(t, err, ErrUnauthorized)
	})
}

func TestRevokedKeyIsRefusedImmediately(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		k, secret := e.key(t, tn.ID, KindSecret)
		_, err := e.svc.Authenticate(e.ctx, secret, KindSecret)
		must(t, err)
		e.clock.Advance(time.Minute)
		must(t, e.svc.RevokeKey(e.ctx, tn.ID, k.ID, "alice"))
		_, err = e.svc.Authenticate(e.ctx, secret, KindSecret)
		wantErr(t, err, ErrUnauthorized)
		listed := e.listKey(t, tn.ID, k.ID)
		if listed.RevokedAt == nil || !listed.RevokedAt.Equal(e.clock.Now()) {
			t.Fatalf("RevokedAt = %v, want %v", listed.RevokedAt, e.clock.Now())
		}
		must(t, e.svc.RevokeKey(e.ctx, tn.ID, k.ID, "alice")) // idempotent
		wantErr(t, e.svc.RevokeKey(e.ctx, tn.ID, "key_0000000000000000", "alice"), ErrNotFound)
		wantErr(t, e.svc.RevokeKey(e.ctx, tn.ID, "nonsense\x00", "alice"), ErrNotFound)
	})
}

func TestRevokeKeyAnyTenantAcceptsSecretOrID(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		a, b := e.tenant(t, "a"), e.tenant(t, "b")
		ka, secretA := e.key(t, a.ID, KindSecret)
		kb, secretB := e.key(t, b.ID, KindPublishable)

		got, revokedNow, err := e.svc.RevokeKeyAnyTenant(e.ctx, secretA, "cli")
		must(t, err)
		if got.ID != ka.ID || got.TenantID != a.ID || got.RevokedAt == nil || !revokedNow {
			t.Fatalf("revoked by secret: %+v, revoked now %v", got, revokedNow)
		}
		got, revokedNow, err = e.svc.RevokeKeyAnyTenant(e.ctx, kb.ID, "cli")
		must(t, err)
		if got.ID != kb.ID || got.TenantID != b.ID || got.RevokedAt == nil || !revokedNow {
			t.Fatalf("revoked by ID: %+v, revoked now %v", got, revokedNow)
		}
		// A second revocation changes nothing and says so: the operator did not revoke it now.
		again, revokedNow, err := e.svc.RevokeKeyAnyTenant(e.ctx, kb.ID, "cli")
		must(t, err)
		if revokedNow || again.RevokedAt == nil || !again.RevokedAt.Equal(*got.RevokedAt) {
			t.Fatalf("revoking a revoked key: %+v, revoked now %v; want its first revocation's time and not revoked now", again, revokedNow)
		}
		_, err = e.svc.Authenticate(e.ctx, secretA, KindSecret)
		wantErr(t, err, ErrUnauthorized)
		_, err = e.svc.Authenticate(e.ctx, secretB, KindPublishable)
		wantErr(t, err, ErrUnauthorized)

		_, _, err = e.svc.RevokeKeyAnyTenant(e.ctx, replaceAt(secretA, 35), "cli")
		wantErr(t, err, ErrInvalid)
		_, _, err = e.svc.RevokeKeyAnyTenant(e.ctx, "whatever", "cli")
		wantErr(t, err, ErrInvalid)
		_, _, err = e.svc.RevokeKeyAnyTenant(e.ctx, "key_0000000000000000", "cli")
		wantErr(t, err, ErrNotFound)
		_, _, err = e.svc.RevokeKeyAnyTenant(e.ctx, newKeySecret(KindSecret), "cli")
		wantErr(t, err, ErrNotFound)
	})
}

func TestKeysAreIsolatedBetweenTenants(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		a, b := e.tenant(t, "tenant-a"), e.tenant(t, "tenant-b")
		ka, secretA := e.key(t, a.ID, KindSecret)

		wantErr(t, e.svc.RevokeKey(e.ctx, b.ID, ka.ID, "mallory"), ErrNotFound)
		p, err := e.svc.Authenticate(e.ctx, secretA, KindSecret)
		must(t, err)
		if p.TenantID != a.ID {
			t.Fatalf("key of tenant %d authenticated as tenant %d", a.ID, p.TenantID)
		}
		keysB, err := e.svc.ListKeys(e.ctx, b.ID)
		must(t, err)
		if len(keysB) != 0 {
			t.Fatalf("tenant B lists %d keys of tenant A", len(keysB))
		}
		if e.listKey(t, a.ID, ka.ID).RevokedAt != nil {
			t.Fatal("tenant B's revocation attempt revoked tenant A's key")
		}
		logB, err := e.svc.AuditLog(e.ctx, b.ID, 0)
		must(t, err)
		if len(logB) != 0 {
			t.Fatalf("tenant B's audit log shows %+v", logB)
		}
	})
}

func TestOnlyKeyHMACIsStored(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		var secrets []string
		for _, kind := range []KeyKind{KindSecret, KindPublishable} {
			k, secret := e.key(t, tn.ID, kind)
			must(t, e.svc.RevokeKey(e.ctx, tn.ID, k.ID, "alice")) // revocation must not store it either
			secrets = append(secrets, secret)
		}
		var stored []string
		for _, table := range []string{"api_keys", "audit_log", "settings"} {
			stored = append(stored, e.rowsAsText(t, table)...)
		}
		for _, secret := range secrets {
			random := secret[8:30]
			for _, v := range stored {
				// The hint shows 4 random characters; nothing longer may appear anywhere.
				for i := 0; i+5 <= len(random); i++ {
					if strings.Contains(v, random[i:i+5]) {
						t.Fatalf("stored value %q contains %q from the secret's random part", v, random[i:i+5])
					}
				}
			}
			m := hmac.New(sha256.New, testPepper)
			m.Write([]byte(secret))
			var n int64
			must(t, e.db.Gorm.WithContext(e.ctx).Table("api_keys").Where("hash = ?", hex.EncodeToString(m.Sum(nil))).Count(&n).Error)
			if n != 1 {
				t.Fatalf("no api_keys row has hash = hex HMAC-SHA256(pepper, secret)")
			}
		}
	})
}

func TestLastUsedIsWrittenInTheBackground(t *testing.T) {
	flushed := make(chan struct{}, 1)
	notify := func(s *Service) { s.flushed = flushed }
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		k, secret := e.key(t, tn.ID, KindSecret)
		e.clock.Advance(time.Hour)
		used := e.clock.Now()
		_, err := e.svc.Authenticate(e.ctx, secret, KindSecret)
		must(t, err)
		deadline := time.After(10 * time.Second)
		for {
			select {
			case <-flushed:
			case <-deadline:
				t.Fatal("last-used time never written by the background flusher")
			}
			if lu := e.listKey(t, tn.ID, k.ID).LastUsedAt; lu != nil {
				if !lu.Equal(used) {
					t.Fatalf("LastUsedAt = %v, want %v", lu, used)
				}
				return
			}
		}
	}, WithFlushInterval(5*time.Millisecond), notify)
}

func TestLastUsedIsNotWrittenPerRequestButWhenRunEnds(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		k, secret := e.key(t, tn.ID, KindSecret)
		_, err := e.svc.Authenticate(e.ctx, secret, KindSecret)
		must(t, err)
		if lu := e.listKey(t, tn.ID, k.ID).LastUsedAt; lu != nil {
			t.Fatalf("LastUsedAt written synchronously (%v); it must be batched", lu)
		}
		must(t, e.stop())
		if lu := e.listKey(t, tn.ID, k.ID).LastUsedAt; lu == nil || !lu.Equal(e.clock.Now()) {
			t.Fatalf("after Run returned LastUsedAt = %v, want %v", lu, e.clock.Now())
		}
	}, WithFlushInterval(time.Hour))
}

func TestFlushKeepsUsesWhenTheDatabaseFails(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		_, secret := e.key(t, tn.ID, KindSecret)
		_, err := e.svc.Authenticate(e.ctx, secret, KindSecret)
		must(t, err)
		must(t, e.db.Close())
		if err := e.svc.Flush(e.ctx); err == nil {
			t.Fatal("Flush against a closed database succeeded")
		}
		e.svc.mu.Lock()
		n := len(e.svc.pending)
		e.svc.mu.Unlock()
		if n != 1 {
			t.Fatalf("%d pending uses after a failed flush, want 1 kept for retry", n)
		}
	}, WithFlushInterval(time.Hour))
}

// hashKey reuses pooled HMAC states; every result must still be HMAC-SHA256(pepper, secret).
func TestHashKeyIsHMACOfThePepper(t *testing.T) {
	s := &Service{pepper: []byte("pepper")}
	for _, secret := range []string{"sk_live_a", "sk_live_b", "", "sk_live_a", strings.Repeat("x", 300)} {
		m := hmac.New(sha256.New, []byte("pepper"))
		m.Write([]byte(secret))
		if got, want := s.hashKey(secret), hex.EncodeToString(m.Sum(nil)); got != want {
			t.Fatalf("hashKey(%q) = %s, want %s", secret, got, want)
		}
	}
}
