package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// TestAdminCommandsLogToStderr: what opening the database logs for a tenant, key or user command
// (here: the root secret an earlier version stored, the same as SECRET_KEY, removed) is written
// to stderr, where the operator sees it; stdout keeps only the command's own output, which
// scripts read. It used to be discarded.
func TestAdminCommandsLogToStderr(t *testing.T) {
	url := "sqlite:" + filepath.Join(t.TempDir(), "cli.db")
	env := appEnv(url)
	cliInProcess(t, env, "migrate")
	d, err := db.Open(context.Background(), url, db.Options{})
	if err != nil {
		t.Fatal(err)
	}
	secret := envFunc(env)("SECRET_KEY")
	if _, err := tenants.NewService(d, nil, nil).SetSettingIfAbsent(context.Background(), "secret_key", secret); err != nil {
		t.Fatal(err)
	}
	_ = d.Close()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"tenant", "list"}, envFunc(env), strings.NewReader(""), &stdout, &stderr); err != nil {
		t.Fatalf("tenant list: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "removed the root secret an earlier version stored") {
		t.Fatalf("stderr lacks the removal of the stored secret: %q", stderr.String())
	}
	if strings.Contains(stdout.String(), "root secret") {
		t.Fatalf("stdout carries the log: %q", stdout.String())
	}
}
