package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/db"
)

// ErrBackupNeedsSQLite is Backup's refusal on PostgreSQL, whose own tools do it.
var ErrBackupNeedsSQLite = errors.New("backup copies the SQLite database; on PostgreSQL use pg_dump " +
	"(e.g. `pg_dump --format=custom \"$DATABASE_URL\" > sluice.dump`, the URL without the parameters pg_dump refuses, " +
	"such as idle_in_transaction_session_timeout) or your provider's backups")

// Backup copies the SQLite database of cfg into the new file path with SQLite's VACUUM INTO: one
// read transaction, so the copy is consistent while the server writes, and it holds what the WAL
// holds too (a copy of the database file alone misses whatever is not yet checkpointed into it).
// The file is made first, empty and mode 0600 like the database, and never overwritten. It
// returns the absolute path written.
func Backup(ctx context.Context, cfg config.Config, path string) (string, error) {
	// Absolute, so that SQLite never reads the name as a URI ("file:x.db?mode=memory").
	path, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("backup: %w", err)
	}
	if file, ok := db.SQLitePath(cfg.DatabaseURL); ok {
		// Opening a missing database creates it: a backup of that would be an empty one.
		if _, err := os.Stat(file); err != nil {
			return "", fmt.Errorf("backup: the database %s (DATABASE_URL): %w", file, err)
		}
	}
	d, err := db.Open(ctx, cfg.DatabaseURL, db.Options{Logger: NewLogger(cfg, io.Discard)})
	if err != nil {
		return "", err
	}
	defer d.Close()
	if d.Dialect != db.SQLite {
		return "", ErrBackupNeedsSQLite
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("backup: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("backup: %w", err)
	}
	if err := d.Gorm.WithContext(ctx).Exec("VACUUM INTO ?", path).Error; err != nil {
		_ = os.Remove(path) // empty or partial: not a backup
		return "", fmt.Errorf("backup: %w", err)
	}
	return path, nil
}
