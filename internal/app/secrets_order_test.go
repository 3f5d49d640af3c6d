package app_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
	"github.com/sluice-dev/sluice/migrations"
)

// TestAStartRefusedForItsSecretDoesNotMigrate: with MIGRATE=auto, a new release started on a
// shared PostgreSQL without SECRET_KEY is refused, and the database stays at the version of the
// release still serving. It used to migrate first and refuse after, so every running instance
// of the release before answered /readyz 503 while the new one did not start either.
func TestAStartRefusedForItsSecretDoesNotMigrate(t *testing.T) {
	url := testkit.URL(t, db.Postgres)
	ctx := context.Background()
	_, p := earlierSchema(t, url) // an earlier release's schema, its instances serving
	cfg := apptest.Config(url)
	cfg.MigrateAuto = true
	cfg.SecretKey = ""
	if _, err := app.New(ctx, cfg, app.Options{Stdout: new(strings.Builder)}); !errors.Is(err, app.ErrSecretKeyRequired) {
		t.Fatalf("a start without SECRET_KEY: %v, want ErrSecretKeyRequired", err)
	}
	if v, err := p.GetDBVersion(ctx); err != nil || v != 14 {
		t.Fatalf("the refused start moved the schema from 14 to %d (%v): the running release's instances are not ready", v, err)
	}
}

// TestAStartThatCannotListenDoesNotMigrate: with MIGRATE=auto, a new release started on a
// shared PostgreSQL where one of its addresses is taken (the main one, the metrics' or the gRPC
// one) is refused before it migrates, and the database stays at the version of the release still
// serving. It used to migrate first and fail to listen after.
func TestAStartThatCannotListenDoesNotMigrate(t *testing.T) {
	url := testkit.URL(t, db.Postgres)
	ctx := context.Background()
	_, p := earlierSchema(t, url)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for variable, addr := range map[string]func(*config.Config){
		"LISTEN_ADDR":  func(c *config.Config) { c.ListenAddr = taken.Addr().String() },
		"METRICS_ADDR": func(c *config.Config) { c.MetricsAddr = taken.Addr().String() },
		"GRPC_ADDR":    func(c *config.Config) { c.GRPCAddr = taken.Addr().String() },
	} {
		cfg := apptest.Config(url)
		cfg.MigrateAuto = true
		addr(&cfg)
		_, err := app.New(ctx, cfg, app.Options{Stdout: new(strings.Builder)})
		if err == nil || !strings.Contains(err.Error(), "listen") || !strings.Contains(err.Error(), variable) {
			t.Fatalf("a start on a taken address: %v, want a listen error naming %s", err, variable)
		}
		if v, err := p.GetDBVersion(ctx); err != nil || v != 14 {
			t.Fatalf("the start that could not listen moved the schema from 14 to %d (%v)", v, err)
		}
	}
}

// TestARefusedSecretLeavesNoKeyFileBehind: on SQLite, a start refused because SECRET_KEY differs
// from the root secret an earlier version stored in the database writes no key file, so the
// fix the refusal names (SECRET_KEY set to the stored value) then works. The refused start used
// to write its SECRET_KEY into the key file first, which then refused the stored value.
func TestARefusedSecretLeavesNoKeyFileBehind(t *testing.T) {
	const stored = "legacy-generated-root-secret-0123456789"
	url := testkit.URL(t, db.SQLite)
	ctx := context.Background()
	d, err := db.Open(ctx, url, db.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tenants.NewService(d, nil, nil).SetSettingIfAbsent(ctx, "secret_key", stored); err != nil {
		t.Fatal(err)
	}
	cfg := apptest.Config(url)
	cfg.SecretKey = "another-root-secret-0123456789abcdefgh"
	log := app.NewLogger(cfg, new(strings.Builder))
	if _, err := app.LoadSecrets(ctx, cfg, d, log); !errors.Is(err, app.ErrLegacySecretDiffers) {
		t.Fatalf("another SECRET_KEY: %v, want ErrLegacySecretDiffers", err)
	}
	if _, err := os.Stat(app.SecretFile(url)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused start left a key file behind (%v)", err)
	}
	cfg.SecretKey = stored // what the refusal tells the operator to do
	if _, err := app.LoadSecrets(ctx, cfg, d, log); err != nil {
		t.Fatalf("SECRET_KEY set to the stored value, as the refusal says: %v", err)
	}
}

// TestAStartRefusedForItsSchemaKeepsTheStoredSecret: a release started with SECRET_KEY set to the
// root secret an earlier version stored, on a shared PostgreSQL it may not migrate (no
// MIGRATE=auto), is refused for its schema, and deletes nothing: the instances of that earlier
// release, still serving, read the stored row. (Reading the secret before the schema check
// deleted it.)
func TestAStartRefusedForItsSchemaKeepsTheStoredSecret(t *testing.T) {
	const stored = "legacy-generated-root-secret-0123456789"
	url := testkit.URL(t, db.Postgres)
	ctx := context.Background()
	d, _ := earlierSchema(t, url)
	settings := tenants.NewService(d, nil, nil)
	if _, err := settings.SetSettingIfAbsent(ctx, "secret_key", stored); err != nil {
		t.Fatal(err)
	}
	cfg := apptest.Config(url)
	cfg.MigrateAuto = false
	cfg.SecretKey = stored
	if _, err := app.New(ctx, cfg, app.Options{Stdout: new(strings.Builder)}); !errors.Is(err, db.ErrSchemaNotCurrent) {
		t.Fatalf("a start on an older schema without MIGRATE=auto: %v, want ErrSchemaNotCurrent", err)
	}
	if v, err := settings.Setting(ctx, "secret_key"); err != nil || v != stored {
		t.Fatalf("the start refused for its schema deleted the stored secret the running release reads (%q, %v)", v, err)
	}
	// Migrated, the same start deletes it, as before.
	cfg.MigrateAuto = true
	a, err := app.New(ctx, cfg, app.Options{Stdout: new(strings.Builder)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close() }() // built, never run
	if _, err := settings.Setting(ctx, "secret_key"); !errors.Is(err, tenants.ErrNotFound) {
		t.Fatalf("after a start on the migrated schema, the stored secret: %v, want it deleted", err)
	}
}

// earlierSchema opens the PostgreSQL database at url migrated to version 14 only, the schema of
// an earlier release, and the migrations' provider, which reads its version.
func earlierSchema(t *testing.T, url string) (*db.DB, *goose.Provider) {
	t.Helper()
	d, err := db.Open(context.Background(), url, db.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	sub, err := fs.Sub(migrations.FS, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, d.SQL, sub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(context.Background(), 14); err != nil {
		t.Fatal(err)
	}
	return d, p
}
