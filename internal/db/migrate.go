package db

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/sluice-dev/sluice/migrations"
)

// ErrSchemaNotCurrent means the database schema is behind or ahead of this binary's migrations.
var ErrSchemaNotCurrent = errors.New("database schema is not current")

// MigrationLockID is the PostgreSQL advisory lock (session level; advisory locks are per
// database) that Migrate holds while it reads which migrations are pending and applies them. It
// is Sluice's own (crc32 of "sluice migrations") rather than goose's default, so that another
// goose user of the same database never waits for Sluice's migrations nor Sluice for theirs.
const MigrationLockID int64 = 2139821120

// Waiting for the migration lock: polled every second, up to 600 times (10 minutes), since the
// holder may be running a long migration; the caller's context ends the wait sooner. The lock is
// released when its holder's session ends, so a crashed holder never blocks the others.
const (
	migrationLockPollSeconds = 1
	migrationLockPolls       = 600
)

// provider returns the migration provider. On PostgreSQL, its Up (and only Up) takes the
// migration lock before it reads what is pending.
func (d *DB) provider() (*goose.Provider, error) {
	sub, err := fs.Sub(migrations.FS, string(d.Dialect))
	if err != nil {
		return nil, fmt.Errorf("db: migrations: %w", err)
	}
	dialect := goose.DialectPostgres
	var opts []goose.ProviderOption
	switch d.Dialect {
	case SQLite:
		dialect = goose.DialectSQLite3
	case Postgres:
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(MigrationLockID),
			lock.WithLockTimeout(migrationLockPollSeconds, migrationLockPolls))
		if err != nil {
			return nil, fmt.Errorf("db: migrations: lock: %w", err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	p, err := goose.NewProvider(dialect, d.SQL, sub, opts...)
	if err != nil {
		return nil, fmt.Errorf("db: migrations: %w", err)
	}
	return p, nil
}

// versions returns the migration provider with the database's schema version and the latest
// version this binary embeds. Reading the versions takes no lock.
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

// noteLockHolder says, when another session holds the migration lock Up is about to wait for,
// that this start waits and for whom: a wait of minutes was otherwise silent. A lookup that fails
// says nothing (Up reports what matters).
func (d *DB) noteLockHolder(ctx context.Context) {
	var pid int64
	err := d.SQL.QueryRowContext(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND classid = $1 AND objid = $2 AND objsubid = 1
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) LIMIT 1`,
		MigrationLockID>>32, MigrationLockID&0xffffffff).Scan(&pid)
	if err == nil {
		d.log.InfoContext(ctx, "another session holds the migration lock (an instance migrating this database, or checking that nothing is pending): waiting for it",
			"holder_pid", pid, "lock_id", MigrationLockID, "up_to", (migrationLockPollSeconds * migrationLockPolls * time.Second).String())
	}
}

// Migrate applies every pending migration. It refuses a schema newer than this binary knows.
//
// Several processes may migrate one database at once: instances started together with
// MIGRATE=auto, or on SQLite the server and a CLI command opening a new file. On PostgreSQL,
// goose's Up holds the migration lock while it lists the applied migrations and applies the
// others, so each is applied once and whoever waited finds nothing left to do. SQLite has no
// such lock: a migration another process applied first fails here (its table or column exists
// already), and, each migration being a transaction of its own, leaves nothing behind. So on
// SQLite a failed Up is run again whenever the database's version moved on during it (a
// migration was applied, by this process or another); an attempt that made no progress
// returns its error.
func (d *DB) Migrate(ctx context.Context) error {
	p, current, target, err := d.versions(ctx)
	if err != nil {
		return err
	}
	if d.Dialect == Postgres {
		d.noteLockHolder(ctx)
	}
	for {
		if current > target {
			return fmt.Errorf("db: %w: database is at version %d, this binary knows up to %d", ErrSchemaNotCurrent, current, target)
		}
		res, err := p.Up(ctx)
		var partial *goose.PartialError
		if errors.As(err, &partial) {
			res = partial.Applied
		}
		for _, r := range res {
			d.log.Info("migration applied", "version", r.Source.Version, "duration", r.Duration)
		}
		if err == nil {
			return nil
		}
		if d.Dialect != SQLite {
			return fmt.Errorf("db: migrate: %w", err)
		}
		now, _, verr := p.GetVersions(ctx)
		if verr != nil || now <= current {
			return fmt.Errorf("db: migrate: %w", err)
		}
		d.log.Info("migrating again from the version reached: the attempt failed after applying some migrations (another process may be migrating too)", "version", now, "error", err)
		current = now
	}
}

// MigrateEmpty migrates a database no migration was applied to (a new one: no release can be
// running on it) and otherwise is CheckSchema: for the command line, which must not move the
// schema under a running release (its instances would all go not ready at once).
func (d *DB) MigrateEmpty(ctx context.Context) error {
	_, current, _, err := d.versions(ctx)
	if err != nil {
		return err
	}
	if current == 0 {
		// Said at warning level (LOG_LEVEL=warn still shows it): a mistyped DATABASE_URL makes a
		// new, empty database here, and what the command changes there no server sees.
		d.log.WarnContext(ctx, "DATABASE_URL names a new, empty database: making it (if a server already runs on another, it will not see this command's change)")
		return d.Migrate(ctx)
	}
	if err := d.CheckSchema(ctx); err != nil {
		return fmt.Errorf("%w; commands migrate only a new database: start this release's server (on SQLite, or with MIGRATE=auto) or run its migrate command first", err)
	}
	return nil
}

// CheckSchema returns ErrSchemaNotCurrent unless the database is at exactly the latest version.
func (d *DB) CheckSchema(ctx context.Context) error {
	_, current, target, err := d.versions(ctx)
	if err != nil {
		return err
	}
	if current > target { // migrated by a newer release: this one cannot move it back
		return fmt.Errorf("db: %w: database at version %d, newer than this binary knows (%d): run the release that migrated it, or a newer one", ErrSchemaNotCurrent, current, target)
	}
	if current != target {
		return fmt.Errorf("db: %w: database at version %d, binary expects %d (run the migrate command, e.g. `sluice migrate`, or set MIGRATE=auto)", ErrSchemaNotCurrent, current, target)
	}
	return nil
}
