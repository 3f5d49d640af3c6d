package db

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"gorm.io/gorm"
)

// codedError is an error with a SQLite result code, as the driver's.
type codedError int

func (e codedError) Error() string { return fmt.Sprintf("sqlite error (%d)", int(e)) }
func (e codedError) Code() int     { return int(e) }

// TestSQLiteResourceErrorsAreUnavailable: SQLite's full disk, I/O errors, read-only file, file
// that cannot be opened and memory exhaustion, in their primary and extended codes, mean the
// database is unavailable (503, at once); busy and locked stay retryable; a constraint or a
// plain SQL error stays the caller's.
func TestSQLiteResourceErrorsAreUnavailable(t *testing.T) {
	for code, want := range map[int]bool{
		7: true, 8: true, 8 | 1<<8: true, 8 | 4<<8: true, // NOMEM, READONLY, _RECOVERY, _DBMOVED
		10: true, 10 | 3<<8: true, 10 | 13<<8: true, // IOERR, _WRITE, _FSYNC
		13: true, 14: true, 14 | 6<<8: true, // FULL, CANTOPEN, _CONVPATH
		1: false, 5: false, 5 | 1<<8: false, 6: false, 19: false, 19 | 8<<8: false, 11: false, // ERROR, BUSY, LOCKED, CONSTRAINT, CORRUPT
	} {
		err := fmt.Errorf("decide: %w", codedError(code))
		if got := isUnavailable(err); got != want {
			t.Errorf("code %d: isUnavailable %v, want %v", code, got, want)
		}
	}
}

// TestSQLiteDiskFullFailsClosedAtOnce: a real SQLITE_FULL (the file may not grow past
// max_page_count) fails closed with ErrUnavailable on the first attempt, counted as a give-up and
// never retried.
func TestSQLiteDiskFullFailsClosedAtOnce(t *testing.T) {
	ctx := context.Background()
	d, err := Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "full.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.SQL.SetMaxOpenConns(1) // the pragma below holds for the one connection every transaction uses
	if err := d.Gorm.Exec(`CREATE TABLE t (x BLOB)`).Error; err != nil {
		t.Fatal(err)
	}
	var pages int64
	if err := d.Gorm.Raw(`PRAGMA page_count`).Scan(&pages).Error; err != nil {
		t.Fatal(err)
	}
	if err := d.Gorm.Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages)).Error; err != nil {
		t.Fatal(err)
	}
	calls := 0
	err = d.Serializable(ctx, func(tx *gorm.DB) error {
		calls++
		return tx.Exec(`INSERT INTO t VALUES (zeroblob(100000))`).Error
	})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "(13)") {
		t.Fatalf("got %v, want ErrUnavailable caused by SQLITE_FULL (13)", err)
	}
	if calls != 1 || d.Retries() != 0 || d.GiveUps() != 1 {
		t.Fatalf("%d attempts, %d retries, %d give-ups: want 1, 0, 1", calls, d.Retries(), d.GiveUps())
	}
}
