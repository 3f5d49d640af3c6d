package tenants

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/apperr"

	"github.com/sluice-dev/sluice/internal/db"
)

// KeyKind says what an API key may do.
type KeyKind string

// The kinds of API key.
const (
	// KindSecret keys ("sk_live_…") authenticate a tenant's backend to the whole /v1 API.
	KindSecret KeyKind = "secret"
	// KindPublishable keys ("pk_live_…") are embedded in web pages and can only fetch captcha
	// challenges, so leaking one costs nothing but challenge traffic.
	KindPublishable KeyKind = "publishable"
)

// Key layout: an 8-character prefix naming the kind, 22 base62 characters from crypto/rand
// (22·log2(62) ≈ 131 bits, DESIGN §5 asks for ≥ 128) and a 6-character base62 checksum. The
// checksum lets Authenticate reject typos and random guesses without a database query, and lets
// secret scanners recognise real keys.
const (
	keyPrefixLen   = 8
	keyBodyLen     = 22
	keyChecksumLen = 6
	// KeyLen is the length in bytes of every API key secret.
	KeyLen = keyPrefixLen + keyBodyLen + keyChecksumLen

	keyIDPrefix  = "key_"
	keyIDBodyLen = 16
	maxLabelLen  = 100
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// APIKey describes a stored key. It never contains the secret: that is returned once, by CreateKey.
type APIKey struct {
	ID         string // "key_" + 16 base62 characters; safe to show and to log
	TenantID   int64
	Kind       KeyKind
	Label      string
	Hint       string // first 12 and last 4 characters of the secret, e.g. "sk_live_AbCd…wXyZ"
	CreatedAt  time.Time
	RevokedAt  *time.Time
	LastUsedAt *time.Time // may lag real use by up to the flush interval
}

// Principal is who an API key authenticates as. The tenant always comes from here, never from
// the request.
type Principal struct {
	TenantID int64
	KeyID    string
}

func (k KeyKind) prefix() string {
	switch k {
	case KindSecret:
		return "sk_live_"
	case KindPublishable:
		return "pk_live_"
	}
	return ""
}

// ParseKey checks that s is a well-formed API key (known prefix, length, base62 charset, valid
// checksum) and returns its kind. It never touches the database; any failure wraps
// ErrUnauthorized.
func ParseKey(s string) (KeyKind, error) {
	if len(s) != KeyLen {
		return "", fmt.Errorf("malformed key: %w", ErrUnauthorized)
	}
	var kind KeyKind
	switch s[:keyPrefixLen] {
	case KindSecret.prefix():
		kind = KindSecret
	case KindPublishable.prefix():
		kind = KindPublishable
	default:
		return "", fmt.Errorf("malformed key: %w", ErrUnauthorized)
	}
	for i := keyPrefixLen; i < len(s); i++ {
		if strings.IndexByte(base62, s[i]) < 0 {
			return "", fmt.Errorf("malformed key: %w", ErrUnauthorized)
		}
	}
	body := s[:KeyLen-keyChecksumLen]
	if !hmac.Equal([]byte(keyChecksum(body)), []byte(s[len(body):])) {
		return "", fmt.Errorf("key checksum mismatch: %w", ErrUnauthorized)
	}
	return kind, nil
}

// keyChecksum is the first 8 bytes of SHA-256(prefix+body), reduced modulo 62^6 and written as
// exactly 6 base62 digits. It is an integrity check, not a secret.
func keyChecksum(prefixAndBody string) string {
	sum := sha256.Sum256([]byte(prefixAndBody))
	n := binary.BigEndian.Uint64(sum[:8])
	var out [keyChecksumLen]byte
	for i := keyChecksumLen - 1; i >= 0; i-- {
		out[i] = base62[n%62]
		n /= 62
	}
	return string(out[:])
}

// randomBase62 returns n uniformly random base62 characters from crypto/rand. Bytes >= 248 are
// rejected so that every character is equally likely (248 = 4·62).
func randomBase62(n int) string {
	out := make([]byte, 0, n)
	var buf [32]byte
	for len(out) < n {
		_, _ = rand.Read(buf[:]) // crypto/rand.Read never fails (it crashes the program instead)
		for _, b := range buf {
			if b < 248 && len(out) < n {
				out = append(out, base62[b%62])
			}
		}
	}
	return string(out)
}

// validKeyID reports whether id has the shape of a key ID, so that arbitrary bytes (NUL,
// invalid UTF-8) never reach a query, where PostgreSQL would reject them with an error.
func validKeyID(id string) bool {
	if len(id) != len(keyIDPrefix)+keyIDBodyLen || !strings.HasPrefix(id, keyIDPrefix) {
		return false
	}
	for i := len(keyIDPrefix); i < len(id); i++ {
		if strings.IndexByte(base62, id[i]) < 0 {
			return false
		}
	}
	return true
}

func newKeySecret(kind KeyKind) string {
	body := kind.prefix() + randomBase62(keyBodyLen)
	return body + keyChecksum(body)
}

// DeriveKey returns the API key of kind that seed determines: the same seed gives the same key,
// so a component of the server itself (the demo) can keep using its keys across restarts
// without the database ever holding them. seed must be a secret of at least 32 bytes (derived
// from the server's root secret).
func DeriveKey(kind KeyKind, seed []byte) string {
	out := make([]byte, 0, keyBodyLen)
	for counter := byte(0); len(out) < keyBodyLen; counter++ {
		m := hmac.New(sha256.New, seed)
		m.Write([]byte{counter})
		for _, b := range m.Sum(nil) {
			if b < 248 && len(out) < keyBodyLen { // as randomBase62: every character equally likely
				out = append(out, base62[b%62])
			}
		}
	}
	body := kind.prefix() + string(out)
	return body + keyChecksum(body)
}

// ErrKeyRevoked is EnsureKey's answer for a key that exists but was revoked: whoever revoked it
// meant it to stop working.
var ErrKeyRevoked = apperr.New(apperr.Conflict, "the key has been revoked")

// EnsureKey makes sure the key secret (of kind, for the tenant) exists, creating it (audited as
// actor) on first use; it is how DeriveKey's keys are stored. A revoked key is ErrKeyRevoked;
// the same secret belonging to another tenant is ErrConflict.
func (s *Service) EnsureKey(ctx context.Context, tenantID int64, kind KeyKind, label, secret, actor string) (APIKey, error) {
	if got, err := ParseKey(secret); err != nil || got != kind {
		return APIKey{}, wrap("ensure key", invalid("key", "not a valid %s API key", kind))
	}
	label, err := validLabel(label)
	if err != nil {
		return APIKey{}, wrap("ensure key", err)
	}
	hash := s.hashKey(secret)
	id := keyIDPrefix + randomBase62(keyIDBodyLen) // outside the transaction: a retry stores the same row
	var row apiKeyRow
	err = s.db.Serializable(ctx, func(tx *gorm.DB) error {
		row = apiKeyRow{}
		err := first(tx, &row, "hash = ?", hash)
		switch {
		case err == nil && row.TenantID != tenantID:
			return ErrConflict
		case err == nil && row.RevokedAt != nil:
			return ErrKeyRevoked
		case err == nil:
			return nil
		case !errors.Is(err, ErrNotFound):
			return err
		}
		if _, err := changeableTenant(tx, tenantID); err != nil {
			return err
		}
		row = apiKeyRow{ID: id, TenantID: tenantID, Kind: string(kind), Label: label, Hash: hash, Hint: keyHint(secret), CreatedAt: s.clock()}
		if err := tx.Create(&row).Error; err != nil {
			return err
		}
		return s.audit(tx, &tenantID, actor, "key.create", row.ID, fmt.Sprintf("%s key %q", kind, label))
	})
	if err != nil {
		return APIKey{}, wrap("ensure key", err)
	}
	return keyFromRow(row), nil
}

// keyHint shows enough of a key to recognise it (prefix, 4 random characters, 4 checksum
// characters) while revealing at most ~24 of its 131 random bits.
func keyHint(secret string) string {
	return secret[:12] + "…" + secret[len(secret)-4:]
}

// hashKey is what the database stores instead of the secret: HMAC-SHA256 under the server
// pepper, so that a stolen database alone cannot even confirm a guessed key.
func (s *Service) hashKey(secret string) string {
	m, _ := s.macs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, s.pepper)
	}
	m.Reset()
	m.Write([]byte(secret))
	var sum [sha256.Size]byte
	out := hex.EncodeToString(m.Sum(sum[:0]))
	s.macs.Put(m)
	return out
}

func keyFromRow(r apiKeyRow) APIKey {
	return APIKey{
		ID:         r.ID,
		TenantID:   r.TenantID,
		Kind:       KeyKind(r.Kind),
		Label:      r.Label,
		Hint:       r.Hint,
		CreatedAt:  utc(r.CreatedAt),
		RevokedAt:  utcPtr(r.RevokedAt),
		LastUsedAt: utcPtr(r.LastUsedAt),
	}
}

// spoofing reports the characters that make a label or an address shown on the dashboard read as
// something else: control characters, the bidirectional marks, embeddings, overrides and
// isolates ("evil\u202Egnp.exe" shows as "evilexe.png"), and the zero-width space, word joiner
// and byte order mark. Zero-width joiners and non-joiners are not among them: Persian and Indic
// text and emoji sequences need them.
func spoofing(r rune) bool {
	switch {
	case unicode.IsControl(r):
		return true
	case r == '\u061C', r == '\u200E', r == '\u200F', r >= '\u202A' && r <= '\u202E', r >= '\u2066' && r <= '\u2069':
		return true // bidirectional marks, embeddings, overrides, isolates
	case r == '\u200B', r == '\u2060', r == '\uFEFF':
		return true // zero-width space, word joiner, byte order mark
	}
	return false
}

func validLabel(label string) (string, error) {
	label = strings.TrimSpace(label)
	if !utf8.ValidString(label) || utf8.RuneCountInString(label) > maxLabelLen {
		return "", invalid("label", "label must be valid UTF-8 of at most %d characters", maxLabelLen)
	}
	if strings.ContainsFunc(label, spoofing) {
		return "", invalid("label", "label must not contain control characters or invisible bidirectional and zero-width marks (such as a right-to-left override or a zero-width space)")
	}
	return label, nil
}

// CreateKey creates an API key of the given kind for a tenant and returns it with its secret.
// The secret is shown this once: only its HMAC is stored. actor (who asked, for the audit log)
// is recorded with the "key.create" entry in the same transaction. An unknown tenant is
// ErrNotFound; a bad kind or label is ErrInvalid.
func (s *Service) CreateKey(ctx context.Context, tenantID int64, kind KeyKind, label, actor string) (APIKey, string, error) {
	if kind.prefix() == "" {
		return APIKey{}, "", wrap("create key", invalid("kind", "unknown key kind %q", kind))
	}
	label, err := validLabel(label)
	if err != nil {
		return APIKey{}, "", wrap("create key", err)
	}
	// Generated outside the transaction: a retried attempt must store the secret we return.
	id := keyIDPrefix + randomBase62(keyIDBodyLen)
	secret := newKeySecret(kind)
	if kind == KindPublishable {
		secret = s.publishableSecret(id) // shown again on request: PublishableKey
	}
	row := apiKeyRow{
		ID:        id,
		TenantID:  tenantID,
		Kind:      string(kind),
		Label:     label,
		Hash:      s.hashKey(secret),
		Hint:      keyHint(secret),
		CreatedAt: s.clock(),
	}
	plan, err := s.PlanOf(ctx, tenantID)
	if err != nil {
		return APIKey{}, "", wrap("create key", err)
	}
	err = s.db.Serializable(ctx, func(tx *gorm.DB) error {
		if _, err := changeableTenant(tx, tenantID); err != nil {
			return err
		}
		// The plan's count, in the creating transaction: two concurrent creations cannot both
		// take the last place.
		n, err := countKeys(tx, tenantID)
		if err != nil {
			return err
		}
		if plan.MaxKeys > 0 && n >= plan.MaxKeys {
			return apperr.QuotaReached("API keys", plan.MaxKeys)
		}
		if err := tx.Create(&row).Error; err != nil {
			return err
		}
		if err := s.audit(tx, &tenantID, actor, "key.create", row.ID, fmt.Sprintf("%s key %q", kind, label)); err != nil {
			return err
		}
		return s.QuotaUsed(tx, tenantID, QuotaKeys, n+1, plan.MaxKeys)
	})
	if err != nil {
		return APIKey{}, "", wrap("create key", err)
	}
	return keyFromRow(row), secret, nil
}

// HasKey reports whether the tenant has the key secret, revoked or not.
func (s *Service) HasKey(ctx context.Context, tenantID int64, secret string) (bool, error) {
	var n int64
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		return tx.Model(&apiKeyRow{}).Where("tenant_id = ? AND hash = ?", tenantID, s.hashKey(secret)).Count(&n).Error
	})
	if err != nil {
		return false, wrap("has key", err)
	}
	return n > 0, nil
}

// KeysActive reports whether every one of secrets is a key of the tenant that is not revoked.
func (s *Service) KeysActive(ctx context.Context, tenantID int64, secrets ...string) (bool, error) {
	hashes := make([]string, len(secrets))
	for i, secret := range secrets {
		hashes[i] = s.hashKey(secret)
	}
	var n int64
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		return tx.Model(&apiKeyRow{}).Where("tenant_id = ? AND hash IN ? AND revoked_at IS NULL", tenantID, hashes).Count(&n).Error
	})
	if err != nil {
		return false, wrap("keys active", err)
	}
	return n == int64(len(secrets)), nil
}

// ListKeys returns a tenant's keys, revoked ones included, oldest first.
func (s *Service) ListKeys(ctx context.Context, tenantID int64) ([]APIKey, error) {
	var rows []apiKeyRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		return tx.Where("tenant_id = ?", tenantID).Order("created_at, id").Find(&rows).Error
	})
	if err != nil {
		return nil, wrap("list keys", err)
	}
	return fromRows(rows, keyFromRow), nil
}

// RevokeKey revokes one of a tenant's keys; from the moment it returns, Authenticate refuses the
// key. A key of another tenant, or no key at all, is ErrNotFound. Revoking a revoked key is a
// no-op. The "key.revoke" audit entry is written in the same transaction.
func (s *Service) RevokeKey(ctx context.Context, tenantID int64, keyID, actor string) error {
	_, err := s.RevokeKeyIfActive(ctx, tenantID, keyID, actor)
	return err
}

// RevokeKeyIfActive is RevokeKey, also reporting whether this call revoked the key (false for a
// key revoked before, which it leaves as it was), so that the dashboard does not say it did.
func (s *Service) RevokeKeyIfActive(ctx context.Context, tenantID int64, keyID, actor string) (revokedNow bool, err error) {
	if !validKeyID(keyID) {
		return false, wrap("revoke key", ErrNotFound)
	}
	_, revokedNow, err = s.revokeKey(ctx, actor, func(tx *gorm.DB, row *apiKeyRow) error {
		return first(tx, row, "id = ? AND tenant_id = ?", keyID, tenantID)
	})
	return revokedNow, wrap("revoke key", err)
}

// RevokeKeyAnyTenant is RevokeKey for the operator CLI, which knows neither the tenant nor,
// often, the ID: it accepts the key's ID or the secret itself. A string that looks like a key
// but fails the checksum is ErrInvalid (a typo must not be mistaken for "no such key").
// revokedNow is false for a key that was revoked before, so the operator is not told they
// revoked it.
func (s *Service) RevokeKeyAnyTenant(ctx context.Context, secretOrID, actor string) (key APIKey, revokedNow bool, err error) {
	var find func(tx *gorm.DB, row *apiKeyRow) error
	switch {
	case strings.HasPrefix(secretOrID, KindSecret.prefix()), strings.HasPrefix(secretOrID, KindPublishable.prefix()):
		if _, err := ParseKey(secretOrID); err != nil {
			return APIKey{}, false, wrap("revoke key", invalid("key", "not a valid API key (checksum or length wrong)"))
		}
		hash := s.hashKey(secretOrID)
		find = func(tx *gorm.DB, row *apiKeyRow) error { return first(tx, row, "hash = ?", hash) }
	case validKeyID(secretOrID):
		find = func(tx *gorm.DB, row *apiKeyRow) error { return first(tx, row, "id = ?", secretOrID) }
	default:
		return APIKey{}, false, wrap("revoke key", invalid("key", "expected a key ID (key_…) or an API key secret"))
	}
	row, revokedNow, err := s.revokeKey(ctx, actor, find)
	if err != nil {
		return APIKey{}, false, wrap("revoke key", err)
	}
	return keyFromRow(row), revokedNow, nil
}

func (s *Service) revokeKey(ctx context.Context, actor string, find func(*gorm.DB, *apiKeyRow) error) (row apiKeyRow, revokedNow bool, err error) {
	err = s.db.Serializable(ctx, func(tx *gorm.DB) error {
		row, revokedNow = apiKeyRow{}, false
		if err := find(tx, &row); err != nil {
			return err
		}
		if row.RevokedAt != nil {
			return nil
		}
		revokedNow = true
		now := s.clock()
		err := tx.Model(&apiKeyRow{}).Where("id = ? AND tenant_id = ?", row.ID, row.TenantID).
			Update("revoked_at", now).Error
		if err != nil {
			return err
		}
		row.RevokedAt = &now
		if err := db.Notify(tx, s.db.Dialect, revocationChannel, row.Hash); err != nil {
			return err
		}
		return s.audit(tx, &row.TenantID, actor, "key.revoke", row.ID, fmt.Sprintf("%s key %q", row.Kind, row.Label))
	})
	if err == nil {
		s.forgetKey(row.Hash)
	}
	return row, revokedNow, err
}

// Authenticate returns the principal of a valid, unrevoked key of the given kind. Malformed
// keys, bad checksums and the wrong kind are refused with ErrUnauthorized before any database
// query; unknown and revoked keys are ErrUnauthorized too, and keys of a suspended tenant
// ErrTenantSuspended. Successful lookups are cached briefly
// (authcache.go); revocation evicts them at once on every instance. A database failure is returned as such (wrapping db.ErrUnavailable when the
// database is unreachable), so callers can fail with 503 instead of 401.
func (s *Service) Authenticate(ctx context.Context, secret string, kind KeyKind) (Principal, error) {
	got, err := ParseKey(secret)
	if err != nil {
		return Principal{}, wrap("authenticate", err)
	}
	if got != kind {
		return Principal{}, wrap("authenticate", fmt.Errorf("%s key used where a %s key is required: %w", got, kind, ErrUnauthorized))
	}
	hash := s.hashKey(secret)
	if c, ok := s.cachedPrincipal(hash, kind); ok {
		if c.suspended {
			return Principal{}, wrap("authenticate", ErrTenantSuspended)
		}
		s.recordUse(c.principal.KeyID, c.principal.TenantID)
		return c.principal, nil
	}
	found, err := s.lookupShared(ctx, hash)
	row, suspended := found.row, found.suspended
	switch {
	case errors.Is(err, ErrNotFound):
		return Principal{}, wrap("authenticate", fmt.Errorf("unknown key: %w", ErrUnauthorized))
	case err != nil:
		return Principal{}, wrap("authenticate", err)
	case row.RevokedAt != nil:
		return Principal{}, wrap("authenticate", fmt.Errorf("revoked key: %w", ErrUnauthorized))
	case row.Kind != string(kind):
		return Principal{}, wrap("authenticate", fmt.Errorf("key kind mismatch: %w", ErrUnauthorized))
	}
	p := Principal{TenantID: row.TenantID, KeyID: row.ID}
	if suspended {
		return Principal{}, wrap("authenticate", ErrTenantSuspended)
	}
	s.recordUse(row.ID, row.TenantID)
	return p, nil
}

// recordUse notes a key's use in memory; Run writes it later, so that authenticating
// stays a pure read.
func (s *Service) recordUse(keyID string, tenantID int64) {
	now := s.clock()
	s.mu.Lock()
	s.pending[keyID] = keyUse{tenantID: tenantID, at: now}
	s.mu.Unlock()
}

// backgroundFlush is one tick of Run's flush loop. A failed batch is kept and retried on the next
// tick (or by Run's final flush).
func (s *Service) backgroundFlush(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(s.flushInterval, 10*time.Second))
	_ = s.Flush(ctx)
	cancel()
	if s.flushed != nil {
		select {
		case s.flushed <- struct{}{}:
		default:
		}
	}
}

// Flush writes the recorded last-used times now. Run calls it every flush interval and once more
// on the way out; on failure the times are kept for the next attempt.
func (s *Service) Flush(ctx context.Context) error {
	s.mu.Lock()
	batch := s.pending
	s.pending = make(map[string]keyUse)
	s.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		for id, u := range batch {
			err := tx.Model(&apiKeyRow{}).Where("id = ? AND tenant_id = ?", id, u.tenantID).
				Update("last_used_at", u.at).Error
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.mu.Lock()
		for id, u := range batch {
			if cur, ok := s.pending[id]; !ok || cur.at.Before(u.at) {
				s.pending[id] = u
			}
		}
		s.mu.Unlock()
		return wrap("flush last used", err)
	}
	return nil
}

// publishableSecret is the publishable key of key ID id: derived from the pepper (the root
// secret) and the ID, so that it can be shown again without the database holding it. A
// publishable key is public by design (it sits in the tenant's web pages); deriving it keeps it
// unguessable to whoever does not hold the root secret.
func (s *Service) publishableSecret(id string) string {
	m := hmac.New(sha256.New, s.pepper)
	m.Write([]byte("publishable-key\x00" + id))
	return DeriveKey(KindPublishable, m.Sum(nil))
}

// ErrKeyNotShowable is PublishableKey's answer for a publishable key created before publishable
// keys could be shown again (its secret was random and only its hash is stored).
var ErrKeyNotShowable = apperr.New(apperr.NotFound, "this publishable key was created before keys could be shown again; create a new one and revoke this one")

// PublishableKey returns the secret of a tenant's publishable key that is not revoked, so that an
// admin can see it again and the captcha snippet can carry it. Another tenant's key, a secret
// key, a revoked or unknown one is ErrNotFound.
func (s *Service) PublishableKey(ctx context.Context, tenantID int64, keyID string) (string, error) {
	if !validKeyID(keyID) {
		return "", wrap("publishable key", ErrNotFound)
	}
	var row apiKeyRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		return first(tx, &row, "id = ? AND tenant_id = ? AND kind = ? AND revoked_at IS NULL", keyID, tenantID, string(KindPublishable))
	})
	if err != nil {
		return "", wrap("publishable key", err)
	}
	secret := s.publishableSecret(row.ID)
	if !hmac.Equal([]byte(s.hashKey(secret)), []byte(row.Hash)) {
		return "", wrap("publishable key", ErrKeyNotShowable)
	}
	return secret, nil
}

// RootSecretWitness says what the tenants' API keys tell of the root secret the service was
// made with (its pepper): anyKey, whether any key exists (made under some root secret);
// confirmed, whether a publishable key, derived from the pepper, hashes to what is stored for
// it. A publishable key that does not is no proof of another secret (keys made before they
// were derived do not), so the keys can confirm a root secret but never refute one.
func (s *Service) RootSecretWitness(ctx context.Context) (anyKey, confirmed bool, err error) {
	var rows []apiKeyRow
	err = s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		var one []int
		if err := tx.Raw(`SELECT 1 FROM api_keys LIMIT 1`).Scan(&one).Error; err != nil {
			return err
		}
		anyKey = len(one) > 0
		return tx.Where("kind = ?", string(KindPublishable)).Order("created_at DESC").Limit(20).Find(&rows).Error
	})
	if err != nil {
		return false, false, wrap("root secret witness", err)
	}
	for _, r := range rows {
		if hmac.Equal([]byte(s.hashKey(s.publishableSecret(r.ID))), []byte(r.Hash)) {
			return anyKey, true, nil
		}
	}
	return anyKey, false, nil
}
