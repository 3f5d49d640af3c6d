package app_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func TestPostgresRefusesToStartWithoutSecretKey(t *testing.T) {
	cfg := apptest.Config(testkit.URL(t, db.Postgres))
	cfg.SecretKey = ""
	_, err := app.New(context.Background(), cfg, app.Options{Stdout: new(strings.Builder)})
	if !errors.Is(err, app.ErrSecretKeyRequired) || !strings.Contains(err.Error(), "SECRET_KEY") || !strings.Contains(err.Error(), "openssl rand") {
		t.Fatalf("start on PostgreSQL without SECRET_KEY: %v", err)
	}
}

func TestSQLiteKeepsItsGeneratedSecretInAPrivateFileBesideTheDatabase(t *testing.T) {
	url := testkit.URL(t, db.SQLite)
	cfg := apptest.Config(url)
	cfg.SecretKey = ""
	a := apptest.Start(t, cfg, app.Options{})
	st, err := os.Stat(app.SecretFile(url))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v, want mode 0600", st, err)
	}
	first, err := app.LoadSecrets(context.Background(), cfg, a.DB, a.Log)
	if err != nil {
		t.Fatal(err)
	}
	again, err := app.LoadSecrets(context.Background(), cfg, a.DB, a.Log)
	if err != nil || !hmac.Equal(first.Pepper, again.Pepper) {
		t.Fatalf("the second load derived other keys (%v)", err)
	}
	if _, err := a.Tenants.Setting(context.Background(), "secret_key"); !errors.Is(err, tenants.ErrNotFound) {
		t.Fatalf("the database holds a secret_key setting: %v", err)
	}
}

// TestLegacyStoredSecretLeavesTheDatabase: a key an earlier version stored in the settings table
// moves to the key file on SQLite (API keys stay valid) and is deleted on PostgreSQL once
// SECRET_KEY is set; PostgreSQL without SECRET_KEY refuses and says how to keep the old key.
func TestLegacyStoredSecretLeavesTheDatabase(t *testing.T) {
	const legacy = "legacy-generated-root-secret-0123456789"
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		svc := tenants.NewService(d, nil, nil)
		if _, err := svc.SetSettingIfAbsent(ctx, "secret_key", legacy); err != nil {
			t.Fatal(err)
		}
		cfg := apptest.Config("sqlite:" + t.TempDir() + "/copy.db")
		cfg.SecretKey = ""
		log := app.NewLogger(cfg, new(strings.Builder))
		if d.Dialect == db.Postgres {
			if _, err := app.LoadSecrets(ctx, cfg, d, log); !errors.Is(err, app.ErrSecretKeyRequired) || !strings.Contains(err.Error(), "SELECT value FROM settings") {
				t.Fatalf("PostgreSQL with a stored key and no SECRET_KEY: %v", err)
			}
			cfg.SecretKey = legacy // what the message tells the operator to do
		}
		s, err := app.LoadSecrets(ctx, cfg, d, log)
		if err != nil {
			t.Fatal(err)
		}
		if !hmac.Equal(s.Pepper, app.NewSecrets(legacy).Pepper) {
			t.Fatal("the keys no longer derive from the stored secret: existing API keys would stop working")
		}
		if _, err := svc.Setting(ctx, "secret_key"); !errors.Is(err, tenants.ErrNotFound) {
			t.Fatalf("the stored secret is still in the database: %v", err)
		}
		if d.Dialect == db.SQLite {
			if b, err := os.ReadFile(app.SecretFile(cfg.DatabaseURL)); err != nil || strings.TrimSpace(string(b)) != legacy {
				t.Fatalf("key file holds %q (%v), want the stored secret", b, err)
			}
		}
	})
}

// TestACopyOfTheDatabaseOpensNothing plays a thief with a copy of the database (and, on
// PostgreSQL, without SECRET_KEY): every value stored anywhere is tried as the root secret, to
// forge a dashboard session cookie for the operator and to confirm a known API key against its
// stored hash. Both must fail; the same attack with the real root secret must succeed, which
// proves the attack would notice a root secret kept in the database.
func TestACopyOfTheDatabaseOpensNothing(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		cfg := apptest.Config(dbURL)
		if strings.HasPrefix(dbURL, "sqlite:") {
			cfg.SecretKey = "" // the zero-setup default: the key is generated into a file
		}
		a := apptest.Start(t, cfg, app.Options{})
		ctx := context.Background()
		tn, err := a.Tenants.CreateTenant(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		_, apiKey, err := a.Tenants.CreateKey(ctx, tn.ID, tenants.KindSecret, "k", "test")
		if err != nil {
			t.Fatal(err)
		}
		op, err := a.Tenants.CreateUser(ctx, "op@example.com", "operator-password-1", true, nil, "test", "")
		if err != nil {
			t.Fatal(err)
		}
		noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := noRedirect.PostForm(a.BaseURL()+"/login", url.Values{"email": {"op@example.com"}, "password": {"operator-password-1"}})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("operator login: %d", res.StatusCode)
		}

		values := storedStrings(t, a.DB)
		var keyHashes []string
		if err := a.DB.Gorm.Raw(`SELECT hash FROM api_keys`).Scan(&keyHashes).Error; err != nil {
			t.Fatal(err)
		}
		attack := func(root string) (confirmedKey, openedDashboard bool) {
			s := app.NewSecrets(root)
			m := hmac.New(sha256.New, s.Pepper)
			m.Write([]byte(apiKey))
			for _, h := range keyHashes {
				if h == hex.EncodeToString(m.Sum(nil)) {
					confirmedKey = true
				}
			}
			for _, jti := range values { // a session ID, if one is stored as it is
				tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
					Issuer: "sluice", Audience: jwt.ClaimStrings{"sluice-dashboard"}, Subject: strconv.FormatInt(op.ID, 10), ID: jti,
					IssuedAt: jwt.NewNumericDate(time.Now()), ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour)),
				}).SignedString(s.Derive("dashboard-session"))
				if err != nil {
					t.Fatal(err)
				}
				req, _ := http.NewRequest(http.MethodGet, a.BaseURL()+"/tenants", nil)
				req.AddCookie(&http.Cookie{Name: "sluice_session", Value: tok})
				res, err := noRedirect.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					openedDashboard = true
					break
				}
			}
			return confirmedKey, openedDashboard
		}
		for _, root := range append(values, "") {
			if key, dash := attack(root); key || dash {
				t.Fatalf("a value stored in the database works as the root secret: confirms API key %v, opens the dashboard %v", key, dash)
			}
		}
		root := cfg.SecretKey
		if root == "" {
			b, err := os.ReadFile(app.SecretFile(dbURL))
			if err != nil {
				t.Fatal(err)
			}
			root = strings.TrimSpace(string(b))
		}
		if key, _ := attack(root); !key {
			t.Fatal("the attack does not even work with the real root secret: it proves nothing")
		}
		t.Logf("%d stored values tried as the root secret; none confirmed the API key or opened the dashboard", len(values))
	})
}

// storedStrings is every value in every table of d, as text.
func storedStrings(t *testing.T, d *db.DB) []string {
	t.Helper()
	var out []string
	for _, table := range testkit.Tables(t, d) {
		out = append(out, testkit.Texts(t, d, table)...)
	}
	return out
}

// TestLegacyStoredSecretIsNotDeletedForAnotherRootSecret: when the root secret in use (SECRET_KEY,
// or on SQLite an existing key file) differs from the one an earlier version stored, the stored
// one is the only copy of the secret existing API keys were made under: Sluice refuses to start
// and keeps it, naming both ways out, until SLUICE_DISCARD_LEGACY_SECRET=true says to delete it.
func TestLegacyStoredSecretIsNotDeletedForAnotherRootSecret(t *testing.T) {
	const legacy = "legacy-generated-root-secret-0123456789"
	const other = "another-root-secret-0123456789abcdefgh"
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		svc := tenants.NewService(d, nil, nil)
		if _, err := svc.SetSettingIfAbsent(ctx, "secret_key", legacy); err != nil {
			t.Fatal(err)
		}
		cfg := apptest.Config("sqlite:" + t.TempDir() + "/copy.db")
		cfg.SecretKey = other
		log := app.NewLogger(cfg, new(strings.Builder))
		stillStored := func(when string) {
			t.Helper()
			if v, err := svc.Setting(ctx, "secret_key"); err != nil || v != legacy {
				t.Fatalf("%s: the stored secret is %q (%v), want it kept", when, v, err)
			}
		}
		// The way to keep it is the dialect's: SECRET_KEY on PostgreSQL, the key file on SQLite
		// (which refuses a SECRET_KEY other than the file's).
		keep := "set SECRET_KEY to the value of"
		if d.Dialect == db.SQLite {
			keep = "into the key file " + app.SecretFile(cfg.DatabaseURL)
		}
		_, err := app.LoadSecrets(ctx, cfg, d, log)
		if !errors.Is(err, app.ErrLegacySecretDiffers) || !strings.Contains(err.Error(), "SELECT value FROM settings") ||
			!strings.Contains(err.Error(), "SLUICE_DISCARD_LEGACY_SECRET=true") || !strings.Contains(err.Error(), keep) {
			t.Fatalf("another SECRET_KEY than the stored secret: %v; want the way out %q", err, keep)
		}
		stillStored("another SECRET_KEY")
		if d.Dialect == db.SQLite {
			// A key file made by a newer version beside a database restored from an older one.
			if err := os.WriteFile(app.SecretFile(cfg.DatabaseURL), []byte(other+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			noKey := cfg
			noKey.SecretKey = ""
			if _, err := app.LoadSecrets(ctx, noKey, d, log); !errors.Is(err, app.ErrLegacySecretDiffers) || !strings.Contains(err.Error(), keep) {
				t.Fatalf("a key file that differs from the stored secret: %v; want the way out %q", err, keep)
			}
			stillStored("another key file")
		}

		cfg.DiscardLegacySecret = true
		s, err := app.LoadSecrets(ctx, cfg, d, log)
		if err != nil {
			t.Fatal(err)
		}
		if !hmac.Equal(s.Pepper, app.NewSecrets(other).Pepper) {
			t.Fatal("the keys do not derive from SECRET_KEY")
		}
		if _, err := svc.Setting(ctx, "secret_key"); !errors.Is(err, tenants.ErrNotFound) {
			t.Fatalf("SLUICE_DISCARD_LEGACY_SECRET=true kept the stored secret: %v", err)
		}
	})
}

// TestSQLiteKeepsOneRootSecretForEveryProcess: on SQLite a SECRET_KEY is written into the key
// file when there is none, so that a command run without it (key create) derives the same keys;
// a SECRET_KEY that differs from the file is refused and named, where it used to be taken by the
// server while commands without it went on using the file's (their keys then 401).
func TestSQLiteKeepsOneRootSecretForEveryProcess(t *testing.T) {
	const root = "the-operators-root-secret-0123456789abc"
	url := testkit.URL(t, db.SQLite)
	d := testkit.OpenURL(t, url)
	cfg := apptest.Config(url)
	cfg.SecretKey = root
	log := app.NewLogger(cfg, new(strings.Builder))
	withKey, err := app.LoadSecrets(context.Background(), cfg, d, log)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(app.SecretFile(url))
	if err != nil || strings.TrimSpace(string(b)) != root {
		t.Fatalf("key file %q (%v), want SECRET_KEY written into it", b, err)
	}
	noKey := cfg
	noKey.SecretKey = ""
	if s, err := app.LoadSecrets(context.Background(), noKey, d, log); err != nil || !hmac.Equal(s.Pepper, withKey.Pepper) {
		t.Fatalf("a process without SECRET_KEY derived other keys (%v)", err)
	}
	other := cfg
	other.SecretKey = "another-root-secret-0123456789abcdefgh"
	if _, err := app.LoadSecrets(context.Background(), other, d, log); err == nil || !strings.Contains(err.Error(), app.SecretFile(url)) {
		t.Fatalf("a SECRET_KEY that differs from the key file: %v, want refused, naming the file", err)
	}
}
