package testkit

import (
	"context"
	"database/sql"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
)

// HoldMigrationLock takes, on the PostgreSQL database at url, the lock Sluice's migrations take
// (db.MigrationLockID), as an instance migrating that database holds it. It returns the session
// that holds it (for queries beside it; closed, and the lock with it, when the test ends) and
// release, which lets the lock go.
func HoldMigrationLock(t testing.TB, url string) (conn *sql.Conn, release func()) {
	t.Helper()
	pool, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	conn, err = pool.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.ExecContext(context.Background(), `SELECT pg_advisory_lock($1)`, db.MigrationLockID); err != nil {
		t.Fatal(err)
	}
	return conn, func() {
		t.Helper()
		if _, err := conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, db.MigrationLockID); err != nil {
			t.Fatal(err)
		}
	}
}
