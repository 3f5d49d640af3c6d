package app_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"

	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestPortZeroIsTheRealPortEverywhere: with LISTEN_ADDR's port 0 and no BASE_URL, the base URL
// derived from it takes the port really listened on, for every use of it (the start's log, the
// session tokens' issuer, the dashboard's links, the demo's origin), not "…:0" for all but the
// printed links.
func TestPortZeroIsTheRealPortEverywhere(t *testing.T) {
	cfg := apptest.Config("sqlite:" + t.TempDir() + "/sluice.db")
	cfg.BaseURL = "http://127.0.0.1:0" // as config derives it from LISTEN_ADDR 127.0.0.1:0
	cfg.LogLevel = slog.LevelInfo
	out := new(testkit.SyncBuffer)
	a := apptest.Start(t, cfg, app.Options{Stdout: out})
	want := "http://" + a.Addr()
	if a.Config.BaseURL != want || a.BaseURL() != want {
		t.Fatalf("base URL %q (config %q), want %q", a.BaseURL(), a.Config.BaseURL, want)
	}
	if !strings.Contains(out.String(), "base="+want+" ") {
		t.Fatalf("the start's log does not name %s as the base URL:\n%s", want, out.String())
	}
}
