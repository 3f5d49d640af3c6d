package api_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
)

// TestInMemorySQLiteIsRefusedAtStartUp: app.New (`app serve`) refuses DATABASE_URL=sqlite::memory:
// before it opens anything: no key file ":memory:.secret" appears in the working directory.
func TestInMemorySQLiteIsRefusedAtStartUp(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, url := range []string{"sqlite::memory:", "sqlite:file::memory:?cache=shared", "sqlite:file:x.db?mode=memory"} {
		cfg := apptest.Config(url)
		cfg.SecretKey = "" // the SQLite default: a key file beside the database
		a, err := app.New(context.Background(), cfg, app.Options{Stdout: io.Discard})
		if err == nil {
			_ = a.DB.Close()
			t.Errorf("%s: started", url)
			continue
		}
		if !strings.Contains(err.Error(), "DATABASE_URL") || !strings.Contains(err.Error(), "in-memory") {
			t.Errorf("%s: %v, want a refusal naming DATABASE_URL", url, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("refused start-ups left %v in the working directory", entries)
	}
}
