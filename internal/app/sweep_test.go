package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestIdempotencyKeysAreSweptWithTheStateSweeperOff: SWEEP_INTERVAL=off stops the sweeps of limit
// state only; expired idempotent answers are still deleted on their own schedule.
func TestIdempotencyKeysAreSweptWithTheStateSweeperOff(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		cfg := apptest.Config(dbURL)
		cfg.SweepInterval = 0             // SWEEP_INTERVAL=off
		cfg.HoldSweepInterval = time.Hour // the only other reader of the engine's clock
		// The engine reads its clock at the start of every sweep: the test wakes up then, rather
		// than sleeping. A send only happens while the test waits, so none is stale.
		sweeping := make(chan struct{})
		clock := func() time.Time {
			select {
			case sweeping <- struct{}{}:
			default:
			}
			return time.Now()
		}
		a := apptest.Start(t, cfg, app.Options{EngineNow: clock, IdempotencySweepInterval: time.Millisecond})
		ctx := context.Background()
		tn, err := a.Tenants.CreateTenant(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if err := a.DB.Gorm.Exec(`INSERT INTO idempotency_keys (tenant_id, key, part, request_hash, status, headers, body, expires_at)
			VALUES (?, 'k', 0, ?, 200, '{}', ?, 1)`, tn.ID, []byte("h"), []byte("{}")).Error; err != nil {
			t.Fatal(err)
		}
		deadline := time.After(30 * time.Second)
		for {
			var left int64
			if err := a.DB.Gorm.Raw(`SELECT COUNT(*) FROM idempotency_keys`).Scan(&left).Error; err != nil {
				t.Fatal(err)
			}
			if left == 0 {
				return
			}
			select {
			case <-sweeping:
			case <-deadline:
				t.Fatalf("an expired idempotency key is still stored 30 s later with SWEEP_INTERVAL=off")
			}
		}
	})
}
