package app

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// Secrets are the server keys, all derived from one root secret (SECRET_KEY, or on SQLite the
// key file beside the database), so that every instance agrees on them. The root never lives in
// the database: a copy of the database alone opens nothing.
type Secrets struct {
	root   []byte
	Pepper []byte // HMAC key for stored API key hashes
}

// Derive returns the key for one purpose.
func (s Secrets) Derive(purpose string) []byte {
	m := hmac.New(sha256.New, s.root)
	m.Write([]byte("sluice/" + purpose))
	return m.Sum(nil)
}

// NewSecrets derives the server keys from a root secret.
func NewSecrets(root string) Secrets {
	s := Secrets{root: []byte(root)}
	s.Pepper = s.Derive("api-key-pepper")
	return s
}

// legacySecretSetting is where versions before 2 kept a generated root secret: in the database,
// which is what a backup thief needs. It is moved out (SQLite) or deleted (PostgreSQL) once the
// root secret in use is the same, never while it is the only copy.
const legacySecretSetting = "secret_key"

// fingerprintSetting holds the fingerprint of the root secret the database was last used with
// (Secrets.fingerprint): enough to refuse a start with another secret, which would answer 401 to
// every API key, print keys no server accepts (a command with a mistyped SECRET_KEY) or, on
// SQLite, quietly generate a new secret for a database restored without its key file; nothing
// the secret can be recovered from.
const fingerprintSetting = "root_secret_fingerprint"

// fingerprint is the root secret's fingerprint, as the database records it.
func (s Secrets) fingerprint() string { return hex.EncodeToString(s.Derive("database-fingerprint")) }

// ErrSecretDiffers is the refusal to start with a root secret other than the one the database
// was last used with (its recorded fingerprint differs), unless SLUICE_ROTATE_SECRET.
var ErrSecretDiffers = errors.New("the root secret in use is not the one this database was last used with (the fingerprint it " +
	"keeps differs): every API key, dashboard session and webhook signing secret made under that one would be refused or unreadable")

// ErrSecretMissing is the refusal to generate a new root secret for a SQLite database used with
// another (it records its fingerprint, or holds API keys or webhook endpoints made under it): its
// key file is missing.
var ErrSecretMissing = errors.New("the root secret is missing")

// ErrSecretUnconfirmed is the refusal of a root secret that a database recording no fingerprint
// refutes: its webhook signing secrets do not open with it, and nothing confirms it.
var ErrSecretUnconfirmed = errors.New("the root secret in use is not the one this database's data was made under")

// secretDiffers is ErrSecretDiffers with the ways out.
func secretDiffers(cfg config.Config) error {
	return fmt.Errorf("%w. %s", ErrSecretDiffers, secretDiffersAdvice(cfg))
}

// secretDiffersAdvice says where to look, and how to rotate on purpose.
func secretDiffersAdvice(cfg config.Config) string {
	where := "SECRET_KEY"
	if cfg.SecretKey == "" {
		where = "the key file " + SecretFile(cfg.DatabaseURL)
	}
	return "Check " + where + " (restored from the same backup as the database? the same on every instance and command?); " +
		"to rotate the root secret on purpose (after a leak), start the server once with SLUICE_ROTATE_SECRET=true"
}

// legacySecretQuery is how an operator reads the stored root secret, to copy it into SECRET_KEY.
const legacySecretQuery = "`SELECT value FROM settings WHERE key = 'secret_key'`"

// ErrLegacySecretDiffers is the refusal to start when the database holds a root secret an
// earlier version stored there and the root secret in use is another: deleting the stored one
// would lose, for good, the secret that every existing API key and session was made under.
// legacySecretDiffers says how to keep it on each dialect.
var ErrLegacySecretDiffers = errors.New("this database holds a root secret stored by an earlier version, and it differs from " +
	"the one in use")

// legacySecretDiffers is ErrLegacySecretDiffers with the ways out on the database's dialect: on
// PostgreSQL SECRET_KEY is the root secret, on SQLite the key file is (a SECRET_KEY other than
// the file's is refused).
func legacySecretDiffers(cfg config.Config, d *db.DB) error {
	keep := "set SECRET_KEY to the value of " + legacySecretQuery
	if d.Dialect == db.SQLite {
		keep = "write the value of " + legacySecretQuery + " into the key file " + SecretFile(cfg.DatabaseURL) +
			" in place of the one there (and unset SECRET_KEY, or set the same)"
	}
	return fmt.Errorf("%w: to keep the API keys, sessions and webhook signing secrets made under it, %s; "+
		"to give them up, set SLUICE_DISCARD_LEGACY_SECRET=true and Sluice deletes the stored secret", ErrLegacySecretDiffers, keep)
}

// ErrSecretKeyRequired is the refusal to start on PostgreSQL without SECRET_KEY.
var ErrSecretKeyRequired = errors.New("SECRET_KEY is required with PostgreSQL: set it to at least 32 random characters, " +
	"the same on every instance (for example the output of `openssl rand -base64 48`); Sluice never stores it in the database")

// SecretFile is where the SQLite default keeps its generated root secret: beside the database.
func SecretFile(databaseURL string) string {
	path, _ := db.SQLitePath(databaseURL)
	return path + ".secret"
}

// warnOpenKeyFile warns when SQLite's key file is open to other users (any group or other bit),
// as the database opened beside it warns of its own mode: the key file is the more sensitive of
// the two (it signs sessions and peppers API key hashes), and one written by hand under umask
// 022 is 0644.
func warnOpenKeyFile(cfg config.Config, d *db.DB, log *slog.Logger) {
	if d.Dialect != db.SQLite {
		return
	}
	path := SecretFile(cfg.DatabaseURL)
	if info, err := os.Stat(path); err == nil && info.Mode().Perm()&0o077 != 0 {
		log.Warn("the root secret's key file is open to other users (their read or write bits are set); whoever reads it "+
			"can sign dashboard sessions and check guessed API keys: chmod 600 it", "path", path, "mode", fmt.Sprintf("%04o", info.Mode().Perm()))
	}
}

// LoadSecrets returns the server keys: from SECRET_KEY when set; on SQLite otherwise from the
// key file beside the database, generated (mode 0600) on the first start; on PostgreSQL
// otherwise not at all (ErrSecretKeyRequired). A root secret an earlier version stored in the
// settings table moves to the key file (SQLite: existing API keys and sessions stay valid) or is
// deleted once SECRET_KEY holds the same value. While the root secret in use is another, it is
// the only copy of the old one: LoadSecrets refuses (ErrLegacySecretDiffers) unless
// SLUICE_DISCARD_LEGACY_SECRET says to delete it.
//
// OpenWithSecrets reads the keys (readSecrets) before it migrates, so that a start they refuse
// leaves a shared database as the running release expects it, and deletes a stored copy
// (dropLegacySecret) only once the schema is right: a start refused for its schema deletes
// nothing either.
func LoadSecrets(ctx context.Context, cfg config.Config, d *db.DB, log *slog.Logger) (Secrets, error) {
	keys, legacy, err := readSecrets(ctx, cfg, d, false)
	if err != nil {
		return Secrets{}, err
	}
	return keys, dropLegacySecret(ctx, d, log, keys, legacy)
}

// readSecrets is LoadSecrets up to its refusals, deleting nothing: the keys, and the root secret
// an earlier version stored in the database ("" when none; a database without the settings
// table, a new one, holds none). Only the SQLite key file is written.
//
// serving is true for the server's start: only it honours SLUICE_ROTATE_SECRET (a command run with
// the variable still set must not rotate the secret under the running servers).
func readSecrets(ctx context.Context, cfg config.Config, d *db.DB, serving bool) (Secrets, string, error) {
	rotate := serving && cfg.RotateSecret
	settings := tenants.NewService(d, nil, nil)
	var legacy, recorded string
	hasSettings, err := tableExists(ctx, d, "settings")
	if err != nil {
		return Secrets{}, "", fmt.Errorf("secret key: %w", err)
	}
	if hasSettings {
		var err error
		legacy, err = settings.Setting(ctx, legacySecretSetting)
		if err != nil && !errors.Is(err, tenants.ErrNotFound) {
			return Secrets{}, "", fmt.Errorf("secret key: %w", err)
		}
		recorded, err = settings.Setting(ctx, fingerprintSetting)
		if err != nil && !errors.Is(err, tenants.ErrNotFound) {
			return Secrets{}, "", fmt.Errorf("secret key: %w", err)
		}
	}
	// recognised refuses a root secret whose fingerprint is not the recorded one; with none
	// recorded (a new database, or one an earlier version used), one the database's data refutes
	// (witness). It runs before a key file is written and before the schema is migrated.
	recognised := func(root string) error {
		switch {
		case rotate, recorded == "" && givesUpLegacy(cfg, legacy, root):
			return nil
		case recorded != "" && NewSecrets(root).fingerprint() == recorded:
			return nil
		case recorded != "":
			return secretDiffers(cfg)
		}
		v, err := witness(ctx, cfg, d, NewSecrets(root))
		if err != nil {
			return fmt.Errorf("secret key: %w", err)
		}
		if v == refuted {
			return fmt.Errorf("%w: the database's webhook signing secrets do not open with it, and none of its publishable keys "+
				"was derived from it. %s", ErrSecretUnconfirmed, secretDiffersAdvice(cfg))
		}
		return nil
	}
	// differs refuses a root secret other than the stored one, unless SLUICE_DISCARD_LEGACY_SECRET.
	differs := func(root string) bool { return legacy != "" && legacy != root && !cfg.DiscardLegacySecret }
	root := cfg.SecretKey
	// Refused before anything is written: a key file written with a SECRET_KEY refused here
	// would refuse the stored value the refusal tells the operator to set.
	if root != "" && differs(root) {
		return Secrets{}, "", legacySecretDiffers(cfg, d)
	}
	if root != "" {
		// Checked before a key file is written with it, as the legacy refusal above.
		if err := recognised(root); err != nil {
			return Secrets{}, "", err
		}
	}
	switch {
	case root != "" && d.Dialect == db.SQLite:
		// One root secret for every process on the file: the key file is written with
		// SECRET_KEY when there is none, so that a command run without SECRET_KEY (key create)
		// uses the same; a key file that holds another is refused, not silently left behind
		// for the next process without SECRET_KEY to pick up.
		path := SecretFile(cfg.DatabaseURL)
		stored, err := keyFile(path, root)
		if err != nil {
			return Secrets{}, "", fmt.Errorf("secret key: %w", err)
		}
		if stored != root {
			return Secrets{}, "", fmt.Errorf("secret key: SECRET_KEY differs from the key file %s, which a process run without SECRET_KEY "+
				"would use: to rotate the root secret, write the new one into that file (and unset SECRET_KEY or set the same), "+
				"or unset SECRET_KEY to keep the file's", path)
		}
	case root != "":
	case d.Dialect == db.SQLite:
		path := SecretFile(cfg.DatabaseURL)
		_, statErr := os.Stat(path)
		missing := errors.Is(statErr, os.ErrNotExist) && legacy == "" && !rotate
		made := false
		if missing && recorded == "" {
			if made, err = madeUnderASecret(ctx, d); err != nil {
				return Secrets{}, "", fmt.Errorf("secret key: %w", err)
			}
		}
		if missing && (recorded != "" || made) {
			// Not generated anew: the database was used with a secret (it records one, or holds
			// API keys or webhook endpoints made under one: a backup an earlier release took),
			// and its file is gone (a backup restored without it).
			return Secrets{}, "", fmt.Errorf("%w: this database was used with a root secret, and its key file %s is missing "+
				"(a backup restored without it?). Put the key file back beside the database, or set SECRET_KEY to that secret; "+
				"to start with a new secret instead, start the server once with SLUICE_ROTATE_SECRET=true", ErrSecretMissing, path)
		}
		if errors.Is(statErr, os.ErrNotExist) && legacy != "" {
			// The stored secret is about to be written into the key file: checked first, so that
			// a refused start leaves no file holding it.
			if err := recognised(legacy); err != nil {
				return Secrets{}, "", err
			}
		}
		if root, err = keyFile(path, legacy); err != nil {
			return Secrets{}, "", fmt.Errorf("secret key: %w", err)
		}
		if differs(root) { // the key file's against the stored one first, as SECRET_KEY's is
			return Secrets{}, "", legacySecretDiffers(cfg, d)
		}
		if err := recognised(root); err != nil {
			return Secrets{}, "", err
		}
	case legacy != "":
		return Secrets{}, "", fmt.Errorf("%w. This database holds a key generated by an earlier version: to keep its API keys "+
			"and sessions valid, set SECRET_KEY to the value of "+legacySecretQuery+"; "+
			"Sluice then deletes that row", ErrSecretKeyRequired)
	default:
		return Secrets{}, "", ErrSecretKeyRequired
	}
	if differs(root) { // the key file's
		return Secrets{}, "", legacySecretDiffers(cfg, d)
	}
	return NewSecrets(root), legacy, nil
}

// givesUpLegacy reports whether the operator gave up the root secret an earlier version stored
// (SLUICE_DISCARD_LEGACY_SECRET) for another, root: what was made under the stored one is given
// up knowingly, so its data refuting root is no reason to refuse (as SLUICE_ROTATE_SECRET).
func givesUpLegacy(cfg config.Config, legacy, root string) bool {
	return cfg.DiscardLegacySecret && legacy != "" && legacy != root
}

// verdict is what a database's data says of a root secret (witness).
type verdict int

const (
	unknown     verdict = iota // its data can say nothing either way (API keys only: they are hashed)
	nothingMade                // nothing in it was made under a root secret: the first one is its own
	confirmed                  // a publishable key was derived from it, or a webhook secret opens with it
	refuted                    // a webhook signing secret does not open with it, and nothing confirms it
)

// witness asks the database's data about the root secret keys come from: its publishable keys,
// derived from it (they can confirm a secret, never refute one: keys made before they were
// derived match no secret), and the newest webhook endpoint's signing secret, sealed with a key
// derived from it (sealing authenticates, so it confirms or refutes). A confirmation wins over a
// refutation: an endpoint older than a rotation made by hand under an earlier release no longer
// opens, while the keys made since confirm the secret in use.
func witness(ctx context.Context, cfg config.Config, d *db.DB, keys Secrets) (verdict, error) {
	if ok, err := tableExists(ctx, d, "api_keys"); err != nil || !ok {
		return nothingMade, err
	}
	anyKey, keysConfirm, err := tenants.NewService(d, keys.Pepper, nil).RootSecretWitness(ctx)
	if err != nil {
		return unknown, err
	}
	var anyEndpoint, opens bool
	endpoints, err := tableExists(ctx, d, "webhook_endpoints")
	if err != nil {
		return unknown, err
	}
	if endpoints {
		hooks, err := newWebhooks(cfg, d, keys, nil, nil)
		if err != nil {
			return unknown, err
		}
		if anyEndpoint, opens, err = hooks.RootSecretWitness(ctx); err != nil {
			return unknown, err
		}
	}
	switch {
	case keysConfirm || opens:
		return confirmed, nil
	case anyEndpoint:
		return refuted, nil
	case !anyKey:
		return nothingMade, nil
	}
	return unknown, nil
}

// madeUnderASecret reports whether the database holds anything made under a root secret: API
// keys or webhook endpoints (a new database, without the tables yet, holds neither).
func madeUnderASecret(ctx context.Context, d *db.DB) (bool, error) {
	for _, table := range []string{"api_keys", "webhook_endpoints"} {
		ok, err := tableExists(ctx, d, table)
		if err != nil {
			return false, err
		}
		if !ok {
			continue
		}
		var one []int
		if err := d.Gorm.WithContext(ctx).Raw(`SELECT 1 FROM ` + table + ` LIMIT 1`).Scan(&one).Error; err != nil {
			return false, err
		}
		if len(one) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// tableExists reports whether the database has table, with the error of a failed look (GORM's
// Migrator().HasTable reads a failure as "no table", which here would read as a new database).
func tableExists(ctx context.Context, d *db.DB, table string) (bool, error) {
	q := `SELECT to_regclass(?) IS NOT NULL`
	if d.Dialect == db.SQLite {
		q = `SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?`
	}
	var ok bool
	err := d.Gorm.WithContext(ctx).Raw(q, table).Scan(&ok).Error
	return ok, err
}

// recordSecret records the fingerprint of the root secret in use (keys') as the database's, once
// its schema is right. With none recorded yet (a new database, or one an earlier release used)
// it is recorded only when nothing was made under a root secret yet (the first process's secret
// is the database's by definition) or the data confirms it (witness), so that a mistyped
// SECRET_KEY on the first process after an upgrade does not become the database's and lock out
// every correct one (readSecrets refused one the data refutes); when the data can say nothing
// either way, nothing is recorded and the check waits until it can. A recorded fingerprint that
// differs refuses (another instance recorded its own since readSecrets looked), unless the server
// starts with SLUICE_ROTATE_SECRET, which records this one (and warns on every start while set).
func recordSecret(ctx context.Context, cfg config.Config, d *db.DB, log *slog.Logger, keys Secrets, serving, givenUp bool) error {
	rotate := serving && cfg.RotateSecret
	settings := tenants.NewService(d, keys.Pepper, nil)
	fp := keys.fingerprint()
	recorded, err := settings.Setting(ctx, fingerprintSetting)
	if err != nil && !errors.Is(err, tenants.ErrNotFound) {
		return fmt.Errorf("secret key: %w", err)
	}
	if rotate {
		log.WarnContext(ctx, "SLUICE_ROTATE_SECRET is set: any root secret is accepted and recorded as the database's; unset it once every instance and command uses the new one")
	}
	switch {
	case recorded == fp:
		return nil
	case recorded != "" && rotate:
		if err := settings.PutSetting(ctx, fingerprintSetting, fp); err != nil {
			return fmt.Errorf("secret key: %w", err)
		}
		log.WarnContext(ctx, "SLUICE_ROTATE_SECRET: the database now records the root secret in use")
		return nil
	case recorded != "":
		return secretDiffers(cfg)
	}
	v, err := witness(ctx, cfg, d, keys)
	if err != nil {
		return fmt.Errorf("secret key: %w", err)
	}
	if rotate || givenUp || v == nothingMade || v == confirmed {
		got, err := settings.SetSettingIfAbsent(ctx, fingerprintSetting, fp)
		if err != nil {
			return fmt.Errorf("secret key: %w", err)
		}
		if got != fp {
			return secretDiffers(cfg)
		}
		return nil
	}
	log.InfoContext(ctx, "the database records no root secret fingerprint yet, and nothing in it confirms the one in use "+
		"(no publishable key or webhook endpoint made under it): it is recorded once something does")
	return nil
}

// dropLegacySecret deletes the root secret an earlier version stored (legacy, "" when none),
// which readSecrets found the same as the one in use (keys') or SLUICE_DISCARD_LEGACY_SECRET
// gives up.
func dropLegacySecret(ctx context.Context, d *db.DB, log *slog.Logger, keys Secrets, legacy string) error {
	if legacy == "" {
		return nil
	}
	if err := tenants.NewService(d, nil, nil).DeleteSetting(ctx, legacySecretSetting); err != nil {
		return fmt.Errorf("secret key: remove the copy in the database: %w", err)
	}
	if legacy != string(keys.root) {
		log.Warn("discarded the root secret an earlier version stored in the database's settings table (SLUICE_DISCARD_LEGACY_SECRET=true): " +
			"API keys, sessions and webhook signing secrets made under it no longer work")
	} else {
		log.Warn("removed the root secret an earlier version stored in the database's settings table (the root secret in use is the same)")
	}
	return nil
}

// keyFile reads the root secret at path, or creates the file (mode 0600) with legacy or, when
// there is none, a new random secret. Two processes starting at once on a new database (the
// server and the CLI) agree: the file appears whole or not at all, and the second reads the first's.
func keyFile(path, legacy string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		if s := strings.TrimSpace(string(b)); len(s) >= 32 {
			return s, nil
		}
		return "", fmt.Errorf("%s holds less than 32 characters; delete it to generate a new key (API keys and dashboard sessions will stop working)", path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	secret := legacy
	if secret == "" {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		secret = base64.RawURLEncoding.EncodeToString(b[:])
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".sluice-secret-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(secret + "\n"); err != nil {
		_ = tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, os.ErrExist) {
		return keyFile(path, legacy) // another process won: use its key
	} else if err != nil {
		return "", err
	}
	return secret, nil
}
