package api_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/db"
)

// setMaxPageCount runs PRAGMA max_page_count on every connection of the SQLite pool (4, all
// kept idle), at the file's current size when pages is 0: the file then cannot grow, which is
// what a full disk does to SQLite (SQLITE_FULL, 13).
func setMaxPageCount(t *testing.T, h *harness, pages int64) {
	t.Helper()
	ctx := context.Background()
	h.db.SQL.SetMaxIdleConns(4) // the connections the pragma reached stay the pool's
	var conns []*sql.Conn
	for range 4 {
		c, err := h.db.SQL.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		n := pages
		if n == 0 {
			if err := c.QueryRowContext(ctx, "PRAGMA page_count").Scan(&n); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.ExecContext(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", n)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		_ = c.Close()
	}
}

// TestSQLiteDiskFullFailsClosedWith503: when the SQLite file cannot grow (a full disk), a decision
// answers 503 unavailable, as PostgreSQL's insufficient resources (class 53) does and as the Go
// client retries, never 500 internal; in /v1/decisions the item is a 503 unavailable problem. The
// failure is not retried through the budget: the answer comes at once. Once the file can grow
// again, decisions are allowed again.
func TestSQLiteDiskFullFailsClosedWith503(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteURL(t))
	tk := h.newTenant(t, "acme")
	h.define(t, tk.key, "tb", map[string]any{"kind": "token bucket", "rate": 1000, "period": 1000})
	setMaxPageCount(t, h, 0)
	t.Cleanup(func() { setMaxPageCount(t, h, 1<<30) }) // let the shutdown's flushes write

	giveUps, retries := h.db.GiveUpsFor(db.PurposeDecision), h.db.RetriesFor(db.PurposeDecision)
	full := -1
	for i := range 300 {
		key := fmt.Sprintf("%03d-%s", i, strings.Repeat("k", 240))
		r := h.send(t, http.MethodPost, "/v1/limits/tb/limit", tk.key, map[string]any{"key": key})
		if r.status == http.StatusOK {
			continue
		}
		p := requireProblem(t, r, http.StatusServiceUnavailable, api.CodeUnavailable)
		if d, _ := p["detail"].(string); strings.Contains(d, "SQLITE") || strings.Contains(d, "full") {
			t.Errorf("the problem shows the database's error: %s", r)
		}
		full = i
		break
	}
	if full < 0 {
		t.Fatal("300 new keys never filled the database: max_page_count did not hold")
	}
	if h.db.GiveUpsFor(db.PurposeDecision) == giveUps {
		t.Error("the full database was not counted as a decision's give-up (fail closed)")
	}
	if n := h.db.RetriesFor(db.PurposeDecision) - retries; n > 0 {
		t.Errorf("%d retries: a full database is not contention and must not burn the retry budget", n)
	}

	res := bulkResults(t, h, tk.key, []map[string]any{{"name": "tb", "key": "bulk-" + strings.Repeat("b", 250)}})
	p, _ := res[0]["error"].(map[string]any)
	if p == nil || p["code"] != api.CodeUnavailable || p["status"] != float64(http.StatusServiceUnavailable) {
		t.Errorf("a /v1/decisions item on a full database: %v, want a 503 unavailable problem", res[0])
	}

	setMaxPageCount(t, h, 1<<30)
	r := h.send(t, http.MethodPost, "/v1/limits/tb/limit", tk.key, map[string]any{"key": "after"})
	if m := requireJSON(t, r, http.StatusOK); m["ok"] != true {
		t.Errorf("once the file can grow: %s", r)
	}
}

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
			_ = a.Close()
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
