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
	if err := startOnce(t, cfg); !errors.Is(err, app.ErrSecretDiffers) {
		t.Fatalf("a start without the key file: %v; want ErrSecretDiffers", err)
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
