package db_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestServerSideRefusalsFailClosed: PostgreSQL answering that it takes no writes (25006: a
// standby after a failover, default_transaction_read_only) or that its statement_timeout
// cancelled the statement (57014) is the database unavailable: ErrUnavailable (503) at once,
// counted as a give-up, not a 500 of the caller's; its lock_timeout ending a wait (55P03) is
// contention, retried like a conflict.
func TestServerSideRefusalsFailClosed(t *testing.T) {
	d := testkit.Open(t, db.SQLite) // the policy depends on the error, not on the dialect
	d.Retry = db.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond, Budget: 30 * time.Second}
	for _, refusal := range []*pgconn.PgError{
		{Code: "25006", Message: "cannot execute UPDATE in a read-only transaction"},
		{Code: "57014", Message: "canceling statement due to statement timeout"},
	} {
		before, attempts := d.GiveUps(), 0
		err := d.Serializable(context.Background(), func(tx *gorm.DB) error { attempts++; return refusal })
		if !errors.Is(err, db.ErrUnavailable) || attempts != 1 || d.GiveUps() != before+1 {
			t.Errorf("after %s (%s): err %v after %d attempts, %d give-ups counted; want ErrUnavailable after one attempt, one give-up",
				refusal.Code, refusal.Message, err, attempts, d.GiveUps()-before)
		}
	}
	attempts := 0
	err := d.Serializable(context.Background(), func(tx *gorm.DB) error {
		if attempts++; attempts == 1 {
			return &pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"}
		}
		return nil
	})
	if err != nil || attempts != 2 {
		t.Fatalf("after a lock timeout: err %v after %d attempts; want it retried", err, attempts)
	}
}

// TestAReadOnlyPostgresIsNotWritable: a database whose sessions are read-only (as a standby's
// are) fails CheckWritable, which readiness asks, and its writes fail closed.
func TestAReadOnlyPostgresIsNotWritable(t *testing.T) {
	url := testkit.URL(t, db.Postgres)
	ctx := context.Background()
	d := testkit.OpenURL(t, url)
	if err := d.CheckWritable(ctx); err != nil {
		t.Fatalf("a writable database: %v", err)
	}
	if err := d.Gorm.Exec(`DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = on', current_database()); END $$`).Error; err != nil {
		t.Fatal(err)
	}
	ro, err := db.Open(ctx, url, db.Options{}) // new sessions, which take the setting
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.CheckWritable(ctx); !errors.Is(err, db.ErrReadOnly) {
		t.Fatalf("CheckWritable on a read-only database: %v, want ErrReadOnly", err)
	}
	err = ro.Serializable(ctx, func(tx *gorm.DB) error { return tx.Exec(`DELETE FROM limit_state WHERE false`).Error })
	if !errors.Is(err, db.ErrUnavailable) {
		t.Fatalf("a write on a read-only database: %v, want ErrUnavailable", err)
	}
}
