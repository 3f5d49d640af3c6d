package app_test

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"

	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestTrustingEveryAddressAsAProxyIsWarnedOf: a TRUSTED_PROXIES entry that covers every address
// (0.0.0.0/0, ::/0, or every IPv4-mapped address) lets any client name its own address; the
// start-up log warns of each such entry and of no other.
func TestTrustingEveryAddressAsAProxyIsWarnedOf(t *testing.T) {
	cfg := apptest.Config("sqlite:" + t.TempDir() + "/sluice.db")
	cfg.TrustedProxies = []string{"10.0.0.0/8", "0.0.0.0/0", "::/0", "::ffff:0.0.0.0/96", "192.0.2.1"}
	out := new(testkit.SyncBuffer)
	apptest.Start(t, cfg, app.Options{Stdout: out})
	var warned []string
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "TRUSTED_PROXIES trusts every address") {
			_, entry, _ := strings.Cut(line, "entry=")
			warned = append(warned, entry)
		}
	}
	if strings.Join(warned, " ") != "0.0.0.0/0 ::/0 ::ffff:0.0.0.0/96" {
		t.Fatalf("warned of %q, want 0.0.0.0/0, ::/0 and ::ffff:0.0.0.0/96 only; the log:\n%s", warned, out.String())
	}
}
