package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestBackupCopiesWhatTheWALHolds: `backup PATH` on SQLite, while another process keeps the
// database open (its last writes still in the WAL, which a copy of the database file alone
// misses), writes a new mode-0600 file holding those writes; it never overwrites a file, and on
// PostgreSQL it refuses, naming pg_dump.
func TestBackupCopiesWhatTheWALHolds(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbURL := "sqlite:" + filepath.Join(dir, "live.db")
	env := appEnv(dbURL)
	cliInProcess(t, env, "migrate")
	serving, err := db.Open(ctx, dbURL, db.Options{}) // as the running server would hold it
	if err != nil {
		t.Fatal(err)
	}
	defer serving.Close()
	if _, err := tenants.NewService(serving, nil, nil).CreateTenant(ctx, "written-last"); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(dir, "backup.db")
	out := cliInProcess(t, env, "backup", backup)
	if !strings.Contains(out, "database copied to "+backup) || !strings.Contains(out, "live.db.secret") {
		t.Fatalf("backup said %q; want where it wrote and where the root secret is", out)
	}
	if fi, err := os.Stat(backup); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the backup file: %v, %v; want mode 0600", fi, err)
	}
	copied, err := db.Open(ctx, "sqlite:"+backup, db.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer copied.Close()
	if _, err := tenants.NewService(copied, nil, nil).TenantByName(ctx, "written-last"); err != nil {
		t.Fatalf("the backup lacks the last tenant written: %v", err)
	}

	before, _ := os.ReadFile(backup)
	if _, err := cliWithStdin(env, "", "backup", backup); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("a backup onto an existing file: %v; want it refused", err)
	}
	if after, _ := os.ReadFile(backup); string(after) != string(before) {
		t.Fatal("a refused backup changed the existing file")
	}
	if _, err := cliWithStdin(env, "", "backup"); err == nil {
		t.Fatal("backup without a path: no error")
	}
	// A name SQLite would read as a URI is a file name: the copy goes into it, mode 0600.
	t.Chdir(dir)
	if out := cliInProcess(t, env, "backup", "file:uri.db?mode=memory"); !strings.Contains(out, filepath.Join(dir, "file:uri.db?mode=memory")) {
		t.Fatalf("backup to a URI-like name said %q", out)
	}
	if fi, err := os.Stat(filepath.Join(dir, "file:uri.db?mode=memory")); err != nil || fi.Size() == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the backup to a URI-like name: %v, %v; want the copy in that file, mode 0600", fi, err)
	}
	// A DATABASE_URL naming no database is refused, and creates none.
	missing := filepath.Join(dir, "nowhere", "sluice.db")
	if _, err := cliWithStdin(appEnv("sqlite:"+missing), "", "backup", filepath.Join(dir, "empty.db")); err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Fatalf("backup of a database that does not exist: %v; want a refusal naming DATABASE_URL", err)
	}
	for _, p := range []string{missing, filepath.Join(dir, "empty.db")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("backup of a database that does not exist left %s: %v", p, err)
		}
	}

	pgEnv := appEnv(testkit.URL(t, db.Postgres))
	if _, err := cliWithStdin(pgEnv, "", "backup", filepath.Join(dir, "pg.db")); err == nil || !strings.Contains(err.Error(), "pg_dump") {
		t.Fatalf("backup on PostgreSQL: %v; want a refusal naming pg_dump", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pg.db")); !os.IsNotExist(err) {
		t.Fatalf("backup on PostgreSQL left a file: %v", err)
	}
}
