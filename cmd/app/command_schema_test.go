package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestCommandsMigrateOnlyANewDatabase: a tenant, key or user command migrates a new database (the
// walkthrough's first command may come before the server's start), but not one a release is
// running on, whatever MIGRATE says: run beside the servers of the release before (a newer
// image's CLI, a `go run` after a pull), it would have moved the schema under them and made them
// all not ready at once. It says what to do instead, and leaves the schema as it was.
func TestCommandsMigrateOnlyANewDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cli.db")
	env := appEnv("sqlite:"+path, "MIGRATE=auto")
	// A new database: migrated by the command, which says so on stderr (a mistyped path would
	// otherwise be a silent, separate database).
	var stderr bytes.Buffer
	if err := run(context.Background(), []string{"tenant", "create", "acme"}, envFunc(env), strings.NewReader(""), io.Discard, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "new, empty database") {
		t.Fatalf("the command made a new database without a word on stderr:\n%s", stderr.String())
	}
	stderr.Reset()
	cliInProcess(t, env, "tenant", "create", "other")
	if err := run(context.Background(), []string{"tenant", "list"}, envFunc(env), strings.NewReader(""), io.Discard, &stderr); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stderr.String(), "new, empty database") {
		t.Fatalf("a command on the existing database warned that it is new:\n%s", stderr.String())
	}

	// The database of the release before: its last migration not applied (its record removed).
	d, err := db.Open(context.Background(), "sqlite:"+path, db.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	version := func() int64 {
		t.Helper()
		var v int64
		if err := d.Gorm.Raw(`SELECT MAX(version_id) FROM goose_db_version`).Scan(&v).Error; err != nil {
			t.Fatal(err)
		}
		return v
	}
	latest := version()
	if err := d.Gorm.Exec(`DELETE FROM goose_db_version WHERE version_id = ?`, latest).Error; err != nil {
		t.Fatal(err)
	}
	out, err := cliWithStdin(env, "", "tenant", "list")
	if err == nil || !strings.Contains(err.Error(), "commands migrate only a new database") {
		t.Fatalf("tenant list on a database one migration behind: %q, %v; want refused, saying commands migrate only a new database", out, err)
	}
	if got := version(); got != latest-1 {
		t.Fatalf("after the refused command the database is at version %d, want %d (not migrated)", got, latest-1)
	}
}

// TestAStopWhileWaitingForTheMigrationLockIsClean: a server asked to stop (SIGTERM) while it
// waits for another instance's migration lock stops at once and cleanly, as a serving one does:
// it exited 1 saying "context canceled", which an orchestrator counts as a failed container.
func TestAStopWhileWaitingForTheMigrationLockIsClean(t *testing.T) {
	dbURL := postgresForTest(t)
	testkit.HoldMigrationLock(t, dbURL) // as another instance's migration holds it
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out testkit.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve"}, envFunc(appEnv(dbURL, "LOG_LEVEL=info")), strings.NewReader(""), &out, io.Discard)
	}()
	// Stopped once it says it waits for the lock (what it logs before it asks for it).
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(out.String(), "another session holds the migration lock"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not say within 60 s that it waits for the migration lock:\n%s", out.String())
		}
	}
	cancel()
	if err := testkit.Await(t, done, "the server to stop after its context ended"); err != nil {
		t.Fatalf("a stop while waiting for the migration lock: %v; want a clean stop\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "stopped before serving") {
		t.Fatalf("the stop was not logged:\n%s", out.String())
	}
}
