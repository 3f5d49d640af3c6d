package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestADeletedTenantsCachedKeyWritesNothingAfterTheDeletion: the server caches a tenant's key
// (for its 2 s TTL), then another process on the same database (as `tenant delete` is, which on
// SQLite the server never hears) deletes the tenant. Once the deletion has returned the server
// refuses the key (401: it no longer exists), a limit can no longer be created nor a decision
// made with it, and no row of the tenant is left in limit_state, limit_definitions or audit_log.
// On SQLite and PostgreSQL (where the server also hears the suspension's NOTIFY).
func TestADeletedTenantsCachedKeyWritesNothingAfterTheDeletion(t *testing.T) {
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		h := startApp(t, url, app.Options{})
		a := h.newTenant(t, "doomed")
		h.define(t, a.key, "api", bucket10PerMinute)
		requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/api/limit", a.key, map[string]any{"key": "k"}), http.StatusOK) // cached now

		cliDB := testkit.OpenURL(t, url)
		// The deletion waits the cache's TTL and then the retry budget (for the requests admitted
		// just before to finish writing); nothing is in flight here, so a shorter budget than the
		// default 5 s keeps the test short. The budget also bounds each of the deletion's
		// transactions, which a busy machine (CI's two shared cores) took past 300 ms. The TTL
		// part, the one this test is about, is the server's, 2 s.
		cliDB.Retry.Budget = 2 * time.Second
		cli := tenants.NewService(cliDB, []byte("the CLI needs no pepper to delete"), nil)
		start := time.Now()
		if err := cli.DeleteTenant(context.Background(), a.id, "cli"); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < tenants.DefaultAuthCacheTTL {
			t.Errorf("the deletion took %v, less than the key cache's TTL %v", took, tenants.DefaultAuthCacheTTL)
		}

		for _, r := range []response{
			h.send(t, http.MethodPut, "/v1/limits/again", a.key, bucket10PerMinute),
			h.send(t, http.MethodPost, "/v1/limits/again/limit", a.key, map[string]any{"key": "k2"}), // a decision on the limit it would create
		} {
			if r.status != http.StatusUnauthorized {
				t.Errorf("after the deletion the server answered the deleted tenant's key %v, want 401", r)
			} else {
				requireProblem(t, r, http.StatusUnauthorized, api.CodeUnauthorized)
			}
		}
		for _, table := range []string{"limit_state", "limit_definitions", "audit_log"} {
			var n int64
			if err := h.db.Gorm.Raw(`SELECT COUNT(*) FROM `+table+` WHERE tenant_id = ?`, a.id).Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("%s has %d rows of the deleted tenant", table, n)
			}
		}
	})
}
