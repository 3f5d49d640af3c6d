package app_test

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// startOnce starts the application with cfg and stops it again, returning New's error.
func startOnce(t *testing.T, cfg config.Config) error {
	t.Helper()
	a, err := app.New(context.Background(), cfg, app.Options{Stdout: io.Discard})
	if err != nil {
		return err
	}
	return a.Close()
}

// TestAnotherRootSecretIsRefusedUnlessRotated: the database keeps the fingerprint of the root
// secret it was first used with; a start or a command with another (a mistyped SECRET_KEY on
// one instance, a command run with the wrong one, which printed keys no server accepts) is
// refused before it changes anything, until SLUICE_ROTATE_SECRET says the change is meant; the
// new secret is then the database's, and the old one refused.
func TestAnotherRootSecretIsRefusedUnlessRotated(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		const first, second = "the-first-root-secret-0123456789abcdef", "the-second-root-secret-0123456789abcde"
		cfg := apptest.Config(dbURL)
		cfg.SecretKey = first
		if err := startOnce(t, cfg); err != nil {
			t.Fatal(err)
		}
		other := cfg
		other.SecretKey = second
		if d, ok := db.SQLitePath(dbURL); ok {
			// On SQLite the key file refuses another SECRET_KEY first: write the new secret
			// there, as the README's rotation says, so that the database's check is what is left.
			if err := os.WriteFile(d+".secret", []byte(second+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := startOnce(t, other); !errors.Is(err, app.ErrSecretDiffers) {
			t.Fatalf("a start with another root secret: %v; want ErrSecretDiffers", err)
		}
		if _, _, err := app.OpenForCommand(context.Background(), other, app.NewLogger(other, io.Discard)); !errors.Is(err, app.ErrSecretDiffers) {
			t.Fatalf("a command with another root secret: %v; want ErrSecretDiffers", err)
		}
		rotate := other
		rotate.RotateSecret = true
		if err := startOnce(t, rotate); err != nil {
			t.Fatalf("a start with SLUICE_ROTATE_SECRET: %v", err)
		}
		if err := startOnce(t, other); err != nil {
			t.Fatalf("the rotated secret without SLUICE_ROTATE_SECRET: %v", err)
		}
		if _, ok := db.SQLitePath(dbURL); !ok {
			if err := startOnce(t, cfg); !errors.Is(err, app.ErrSecretDiffers) {
				t.Fatalf("the old root secret after the rotation: %v; want ErrSecretDiffers", err)
			}
		}
	})
}

// TestASQLiteDatabaseWithoutItsKeyFileIsRefused: a SQLite database restored without its key file
// made the next process generate a new root secret without a word, and every API key was then
// refused; the database knows it was used with a secret, so the start is refused, no new key
// file is written, and putting the file back mends it.
func TestASQLiteDatabaseWithoutItsKeyFileIsRefused(t *testing.T) {
	url := testkit.URL(t, db.SQLite)
	cfg := apptest.Config(url)
	cfg.SecretKey = "" // the zero-setup default: the secret is generated into the key file
	if err := startOnce(t, cfg); err != nil {
		t.Fatal(err)
	}
	path := app.SecretFile(url)
	saved, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := startOnce(t, cfg); !errors.Is(err, app.ErrSecretMissing) {
		t.Fatalf("a start without the key file: %v; want ErrSecretMissing", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the refused start wrote a key file (%v)", err)
	}
	if err := os.WriteFile(path, saved, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := startOnce(t, cfg); err != nil {
		t.Fatalf("with the key file put back: %v", err)
	}
}

// TestAnUpgradedDatabaseRecordsOnlyASecretItsDataConfirms: a database an earlier release used has
// no fingerprint, but API keys made under its root secret; the first process of this release
// used to record whatever secret it had, so a mistyped one (a command, one misconfigured
// instance) became the database's and locked out every correct instance. Now a secret is recorded
// only when the data confirms it (a publishable key derived from it, a webhook secret that opens
// with it); a webhook secret that does not open refuses it; and while nothing can tell, nothing is
// recorded.
func TestAnUpgradedDatabaseRecordsOnlyASecretItsDataConfirms(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		ctx := context.Background()
		const right, wrong = "the-right-root-secret-0123456789abcdefg", "a-mistyped-root-secret-0123456789abcde"
		cfg := apptest.Config(dbURL)
		cfg.SecretKey = right
		useSecret := func(secret string) config.Config {
			c := cfg
			c.SecretKey = secret
			if path, ok := db.SQLitePath(dbURL); ok { // the key file holds the secret a process uses
				if err := os.WriteFile(path+".secret", []byte(secret+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			return c
		}
		// The earlier release's database: a tenant with a secret key, no fingerprint.
		a := apptest.Start(t, useSecret(right), app.Options{})
		tn, err := a.Tenants.CreateTenant(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := a.Tenants.CreateKey(ctx, tn.ID, tenants.KindSecret, "k", "test"); err != nil {
			t.Fatal(err)
		}
		forget := func() {
			t.Helper()
			if err := a.DB.Gorm.Exec(`DELETE FROM settings WHERE key = 'root_secret_fingerprint'`).Error; err != nil {
				t.Fatal(err)
			}
		}
		recorded := func() bool {
			t.Helper()
			var n int64
			if err := a.DB.Gorm.Raw(`SELECT COUNT(*) FROM settings WHERE key = 'root_secret_fingerprint'`).Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			return n > 0
		}
		forget()
		// A command, then a server, with the mistyped secret: nothing confirms it, nothing is recorded.
		w := useSecret(wrong)
		if _, _, err := app.OpenForCommand(ctx, w, app.NewLogger(w, io.Discard)); err != nil {
			t.Fatalf("a command with an unconfirmed secret: %v", err)
		}
		if err := startOnce(t, w); err != nil {
			t.Fatalf("a start with an unconfirmed secret: %v", err)
		}
		if recorded() {
			t.Fatal("a secret nothing confirms was recorded as the database's")
		}
		// The right secret's publishable key confirms it: recorded; the mistyped one is refused.
		if _, _, err := a.Tenants.CreateKey(ctx, tn.ID, tenants.KindPublishable, "widget", "test"); err != nil {
			t.Fatal(err)
		}
		if err := startOnce(t, useSecret(right)); err != nil || !recorded() {
			t.Fatalf("a start whose publishable key confirms its secret: %v, recorded %v", err, recorded())
		}
		if err := startOnce(t, useSecret(wrong)); !errors.Is(err, app.ErrSecretDiffers) {
			t.Fatalf("the mistyped secret once the right one is recorded: %v; want ErrSecretDiffers", err)
		}
		// A webhook endpoint's secret that does not open refutes a secret, recorded or not.
		forget()
		if _, _, err := a.Webhooks.CreateEndpoint(ctx, tn.ID, "https://hooks.example.com/h", []string{"key.created"}); err != nil {
			t.Fatal(err)
		}
		if err := startOnce(t, useSecret(wrong)); !errors.Is(err, app.ErrSecretUnconfirmed) || recorded() {
			t.Fatalf("a start whose secret the webhook secrets refute: %v, recorded %v; want ErrSecretUnconfirmed, nothing recorded", err, recorded())
		}
		// A publishable key confirming the secret wins over an endpoint that does not open (one
		// sealed before a rotation made by hand under an earlier release; a sealed value of
		// another key stands for it here).
		forget()
		if err := a.DB.Gorm.Exec(`UPDATE webhook_endpoints SET secret_sealed = ?`, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").Error; err != nil {
			t.Fatal(err)
		}
		if err := startOnce(t, useSecret(right)); err != nil || !recorded() {
			t.Fatalf("a start the publishable keys confirm beside an endpoint that does not open: %v, recorded %v", err, recorded())
		}
		useSecret(right)
	})
}

// TestARefutedSecretLeavesNoKeyFileBehind: a SQLite start with a mistyped SECRET_KEY, no key
// file and a database whose webhook secrets refute it is refused before the key file is written
// with it (the corrected SECRET_KEY was then refused as differing from that file); a backup with
// webhook endpoints but no API keys, restored without its key file, is refused as missing its
// secret rather than given a new one.
func TestARefutedSecretLeavesNoKeyFileBehind(t *testing.T) {
	url := testkit.URL(t, db.SQLite)
	cfg := apptest.Config(url)
	cfg.SecretKey = "the-right-root-secret-0123456789abcdefg"
	earlierReleaseDatabase(t, url, cfg.SecretKey, "", anEndpoint)
	path := app.SecretFile(url)
	wrong := cfg
	wrong.SecretKey = "a-mistyped-root-secret-0123456789abcde"
	if err := startOnce(t, wrong); !errors.Is(err, app.ErrSecretUnconfirmed) {
		t.Fatalf("a mistyped SECRET_KEY the webhook secrets refute: %v; want ErrSecretUnconfirmed", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the refused start wrote its key file (%v)", err)
	}
	none := cfg
	none.SecretKey = ""
	if err := startOnce(t, none); !errors.Is(err, app.ErrSecretMissing) {
		t.Fatalf("no SECRET_KEY, no key file, webhook endpoints in the database: %v; want ErrSecretMissing", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the refused start generated a key file (%v)", err)
	}
	if err := startOnce(t, cfg); err != nil {
		t.Fatalf("the right SECRET_KEY: %v", err)
	}
}

// TestASQLiteBackupOfAnEarlierReleaseWithoutItsKeyFileIsRefused: a backup taken before the
// database recorded a fingerprint, restored without its key file, holds API keys made under a
// secret no one has given: a new secret is not generated for it (every key would be refused), as
// for a database that records one.
func TestASQLiteBackupOfAnEarlierReleaseWithoutItsKeyFileIsRefused(t *testing.T) {
	ctx := context.Background()
	url := testkit.URL(t, db.SQLite)
	cfg := apptest.Config(url)
	cfg.SecretKey = "" // the zero-setup default: the secret was generated into the key file
	earlierReleaseDatabase(t, url, "", "", aSecretKey)
	path := app.SecretFile(url)
	if _, _, err := app.OpenForCommand(ctx, cfg, app.NewLogger(cfg, io.Discard)); !errors.Is(err, app.ErrSecretMissing) {
		t.Fatalf("a command on the restored backup: %v; want ErrSecretMissing", err)
	}
	if err := startOnce(t, cfg); !errors.Is(err, app.ErrSecretMissing) {
		t.Fatalf("a start on the restored backup: %v; want ErrSecretMissing", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a refused start wrote a key file (%v)", err)
	}
}

// earlierReleaseDatabase makes, at dbURL, a database as an earlier release left it: a tenant
// with what makes adds (made under root; "" for a generated one), no fingerprint, and the root
// secret that release stored in its settings (legacy; "" for none). The SQLite key file is
// removed.
func earlierReleaseDatabase(t *testing.T, dbURL, root, legacy string, makes func(ctx context.Context, a *app.App, tenantID int64) error) {
	t.Helper()
	ctx := context.Background()
	cfg := apptest.Config(dbURL)
	cfg.SecretKey = root
	a, err := app.New(ctx, cfg, app.Options{Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	tn, err := a.Tenants.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if err := makes(ctx, a, tn.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.DB.Gorm.Exec(`DELETE FROM settings WHERE key = 'root_secret_fingerprint'`).Error; err != nil {
		t.Fatal(err)
	}
	if legacy != "" {
		if err := a.DB.Gorm.Exec(`INSERT INTO settings (key, value) VALUES ('secret_key', ?)`, legacy).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if path, ok := db.SQLitePath(dbURL); ok {
		if err := os.Remove(path + ".secret"); err != nil {
			t.Fatal(err)
		}
	}
}

// anEndpoint makes a webhook endpoint, whose signing secret is sealed under the root secret.
func anEndpoint(ctx context.Context, a *app.App, tenantID int64) error {
	_, _, err := a.Webhooks.CreateEndpoint(ctx, tenantID, "https://hooks.example.com/h", []string{"key.created"})
	return err
}

// aSecretKey makes a secret API key, whose hash is peppered with the root secret.
func aSecretKey(ctx context.Context, a *app.App, tenantID int64) error {
	_, _, err := a.Tenants.CreateKey(ctx, tenantID, tenants.KindSecret, "k", "test")
	return err
}

// TestAStoredSecretTheDataRefutesIsNotWrittenIntoAKeyFile: on SQLite without SECRET_KEY or a key
// file, an earlier release's stored secret is moved into the key file; one the database's
// webhook secrets refute (an operator's later SECRET_KEY sealed them) is refused before the file
// is written, not after (the file then held it, and the right SECRET_KEY was refused as
// differing from it).
func TestAStoredSecretTheDataRefutesIsNotWrittenIntoAKeyFile(t *testing.T) {
	const sealedUnder, stored = "the-secret-that-sealed-0123456789abcdef", "a-stale-stored-secret-0123456789abcdef"
	url := testkit.URL(t, db.SQLite)
	earlierReleaseDatabase(t, url, sealedUnder, stored, anEndpoint)
	cfg := apptest.Config(url)
	cfg.SecretKey = ""
	if err := startOnce(t, cfg); !errors.Is(err, app.ErrSecretUnconfirmed) {
		t.Fatalf("a stored secret the webhook secrets refute: %v; want ErrSecretUnconfirmed", err)
	}
	if _, err := os.Stat(app.SecretFile(url)); !os.IsNotExist(err) {
		t.Fatalf("the refused start wrote the stored secret into a key file (%v)", err)
	}
}

// TestDiscardingTheStoredSecretGivesUpWhatWasMadeUnderIt: SLUICE_DISCARD_LEGACY_SECRET gives up the
// secret an earlier release stored and what was made under it (README); webhook secrets that do
// not open with the new secret are part of that, not a reason to refuse, and the new secret is
// recorded as the database's.
func TestDiscardingTheStoredSecretGivesUpWhatWasMadeUnderIt(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		const old, fresh = "the-old-stored-root-secret-0123456789ab", "the-fresh-root-secret-0123456789abcdefg"
		earlierReleaseDatabase(t, dbURL, old, old, anEndpoint)
		cfg := apptest.Config(dbURL)
		cfg.SecretKey = fresh
		if err := startOnce(t, cfg); !errors.Is(err, app.ErrLegacySecretDiffers) {
			t.Fatalf("another SECRET_KEY than the stored one: %v; want ErrLegacySecretDiffers", err)
		}
		cfg.DiscardLegacySecret = true
		if err := startOnce(t, cfg); err != nil {
			t.Fatalf("SLUICE_DISCARD_LEGACY_SECRET with webhook endpoints made under the stored secret: %v", err)
		}
		cfg.DiscardLegacySecret = false
		if err := startOnce(t, cfg); err != nil {
			t.Fatalf("the fresh secret once the stored one is discarded: %v", err)
		}
		wrong := cfg
		wrong.SecretKey = old
		if path, ok := db.SQLitePath(dbURL); ok {
			if err := os.WriteFile(path+".secret", []byte(old+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := startOnce(t, wrong); !errors.Is(err, app.ErrSecretDiffers) {
			t.Fatalf("the discarded secret again: %v; want ErrSecretDiffers (the fresh one is recorded)", err)
		}
	})
}

// TestAKeyFileOtherThanTheStoredSecretIsAskedToBeMended: on SQLite without SECRET_KEY, a key file
// that differs from the secret an earlier release stored is refused as SECRET_KEY would be, with
// the way to keep the stored one (ErrLegacySecretDiffers), before the data is asked: the data's
// refusal advised a rotation, which gives up the very secret the data was made under.
func TestAKeyFileOtherThanTheStoredSecretIsAskedToBeMended(t *testing.T) {
	const stored = "the-stored-root-secret-0123456789abcdefg"
	url := testkit.URL(t, db.SQLite)
	earlierReleaseDatabase(t, url, stored, stored, anEndpoint)
	if err := os.WriteFile(app.SecretFile(url), []byte("another-key-file-secret-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := apptest.Config(url)
	cfg.SecretKey = ""
	if err := startOnce(t, cfg); !errors.Is(err, app.ErrLegacySecretDiffers) {
		t.Fatalf("a key file other than the stored secret: %v; want ErrLegacySecretDiffers", err)
	}
}

// TestDiscardingTheStoredSecretDoesNotLiftARecordedFingerprint: SLUICE_DISCARD_LEGACY_SECRET gives
// up a stored secret's data while nothing is recorded; once the database records a fingerprint,
// another secret is refused whatever is given up (only SLUICE_ROTATE_SECRET lifts it), before
// anything is written.
func TestDiscardingTheStoredSecretDoesNotLiftARecordedFingerprint(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		const recorded, other = "the-recorded-root-secret-0123456789abcd", "another-root-secret-0123456789abcdefgh"
		earlierReleaseDatabase(t, dbURL, recorded, "", anEndpoint)
		cfg := apptest.Config(dbURL)
		cfg.SecretKey = recorded
		if err := startOnce(t, cfg); err != nil { // records it: the endpoint opens with it
			t.Fatal(err)
		}
		d := testkit.OpenURL(t, dbURL)
		if err := d.Gorm.Exec(`INSERT INTO settings (key, value) VALUES ('secret_key', ?)`, recorded).Error; err != nil {
			t.Fatal(err)
		}
		discard := cfg
		discard.SecretKey, discard.DiscardLegacySecret = other, true
		if err := startOnce(t, discard); !errors.Is(err, app.ErrSecretDiffers) {
			t.Fatalf("another secret with SLUICE_DISCARD_LEGACY_SECRET on a database that records one: %v; want ErrSecretDiffers", err)
		}
		var legacy int64
		if err := d.Gorm.Raw(`SELECT COUNT(*) FROM settings WHERE key = 'secret_key'`).Scan(&legacy).Error; err != nil || legacy != 1 {
			t.Fatalf("the refused start deleted the stored secret (%d rows, %v)", legacy, err)
		}
	})
}
