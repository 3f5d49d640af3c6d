package db

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"

	"github.com/sluice-dev/sluice/migrations"
)

// ErrSchemaNotCurrent means the database schema is behind or ahead of this binary's migrations.
var ErrSchemaNotCurrent = errors.New("database schema is not current")

func (d *DB) provider() (*goose.Provider, error) {
	sub, err := fs.Sub(migrations.FS, string(d.Dialect))
	if err != nil {
		return nil, fmt.Errorf("db: migrations: %w", err)
	}
	dialect := goose.DialectPostgres
	if d.Dialect == SQLite {
		dialect = goose.DialectSQLite3
	}
	p, err := goose.NewProvider(dialect, d.SQL, sub)
	if err != nil {
		return nil, fmt.Errorf("db: migrations: %w", err)
	}
	return p, nil
}

// versions returns the migration provider with the database's schema version and the latest
// version this binary embeds.
func (d *DB) versions(ctx context.Context) (*goose.Provider, int64, int64, error) {
	p, err := d.provider()
	if err != nil {
		return nil, 0, 0, err
	}
	current, target, err := p.GetVersions(ctx)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("db: migration versions: %w", err)
	}
	return p, current, target, nil
}

// Migrate applies every pending migration. It refuses a schema newer than this binary knows.
func (d *DB) Migrate(ctx context.Context) error {
	p, current, target, err := d.versions(ctx)
	if err != nil {
		return err
	}
	if current > target {
		return fmt.Errorf("db: %w: database is at version %d, this binary knows up to %d", ErrSchemaNotCurrent, current, target)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("db: migrate: %w", err)
	}
	for _, r := range res {
		d.log.Info("migration applied", "version", r.Source.Version, "duration", r.Duration)
	}
	return nil
}

// CheckSchema returns ErrSchemaNotCurrent unless the database is at exactly the latest version.
func (d *DB) CheckSchema(ctx context.Context) error {
	_, current, target, err := d.versions(ctx)
	if err != nil {
		return err
	}
	if current != target {
		return fmt.Errorf("db: %w: database at version %d, binary expects %d (run `app migrate` or set MIGRATE=auto)", ErrSchemaNotCurrent, current, target)
	}
	return nil
}
