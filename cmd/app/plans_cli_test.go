package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheCommandLineKeepsToTheDefaultPlan: `key create` counts against the configured default
// plan (PLAN_MAX_KEYS) like the dashboard and the API, and says which quota refused it.
func TestTheCommandLineKeepsToTheDefaultPlan(t *testing.T) {
	env := []string{"DATABASE_URL=sqlite:" + filepath.Join(t.TempDir(), "x.db"), "PLAN_MAX_KEYS=1", "LOG_LEVEL=warn"}
	cliInProcess(t, env, "tenant", "create", "acme")
	cliInProcess(t, env, "key", "create", "--tenant", "acme")
	var out bytes.Buffer
	err := run(context.Background(), []string{"key", "create", "--tenant", "acme"}, envFunc(env), strings.NewReader(""), &out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "at most 1 API key;") {
		t.Fatalf("a second key past PLAN_MAX_KEYS=1: %v\n%s", err, out.String())
	}
}
