// Package db opens Sluice's database (PostgreSQL or an embedded SQLite file) through GORM,
// applies the embedded migrations and runs work in serializable transactions with bounded retry.
package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Dialect names the SQL engine behind a DB.
type Dialect string

// The supported dialects.
const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
)

// DB is an open database plus the policy for running transactions on it.
type DB struct {
	Gorm    *gorm.DB
	SQL     *sql.DB
	Dialect Dialect
	Retry   RetryPolicy
	log     *slog.Logger
	url     string // for LISTEN connections (listen.go); never logged

	counters [numPurposes]txCounters // retries and give-ups, per purpose
}

// Options tune Open; the zero value is sensible.
type Options struct {
	Logger       *slog.Logger
	MaxOpenConns int // PostgreSQL pool size; default 32
	Retry        RetryPolicy
}

// SQLitePath is the database file of a sqlite:PATH database URL, and whether url is one: the
// one place that reads the form, for the database, its generated secret's file and backups.
func SQLitePath(url string) (path string, ok bool) { return strings.CutPrefix(url, "sqlite:") }

// Open connects to url ("postgres://..." or "sqlite:PATH") and checks that it answers.
func Open(ctx context.Context, url string, opts Options) (*DB, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Retry == (RetryPolicy{}) {
		opts.Retry = DefaultRetryPolicy
	}
	cfg := &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true, // we open our own transactions where atomicity matters
		PrepareStmt:            false,
	}
	d := &DB{Retry: opts.Retry, log: opts.Logger, url: url}
	var err error
	path, sqliteURL := SQLitePath(url)
	switch {
	case sqliteURL:
		d.Dialect = SQLite
		if err := checkSQLitePath(path); err != nil {
			return nil, err
		}
		if dir := filepath.Dir(path); dir != "." {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return nil, fmt.Errorf("db: sqlite: create directory: %w", err)
			}
		}
		// A new database file is readable by its owner only: it holds password hashes, key
		// hashes and sealed secrets (SQLite gives its -wal and -shm files the file's mode).
		if f, cerr := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); cerr == nil {
			_ = f.Close()
		} else if !errors.Is(cerr, fs.ErrExist) {
			return nil, fmt.Errorf("db: sqlite: create %s: %w", path, cerr)
		} else if info, serr := os.Stat(path); serr == nil && info.Mode().Perm()&0o077 != 0 {
			// An existing file keeps its mode (an operator may have chosen it), but is told of.
			opts.Logger.Warn("the SQLite database file is readable by other users; it holds password and key hashes "+
				"and sealed secrets: chmod 600 it (and its -wal and -shm files)", "path", path, "mode", fmt.Sprintf("%04o", info.Mode().Perm()))
		}
		d.Gorm, err = gorm.Open(sqlite.Open(sqliteDSN(path)), cfg)
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		d.Dialect = Postgres
		var pool *sql.DB
		if pool, err = openPostgres(url); err == nil {
			d.Gorm, err = gorm.Open(postgres.New(postgres.Config{Conn: pool}), cfg)
		}
	default:
		return nil, errors.New("db: DATABASE_URL must be postgres://… or sqlite:PATH")
	}
	if err != nil {
		return nil, fmt.Errorf("db: open %s: %w", d.Dialect, err)
	}
	d.SQL, err = d.Gorm.DB()
	if err != nil {
		return nil, fmt.Errorf("db: pool: %w", err)
	}
	switch d.Dialect {
	case SQLite:
		// One writer at a time is SQLite's model; a small pool serves concurrent readers.
		d.SQL.SetMaxOpenConns(4)
	case Postgres:
		n := opts.MaxOpenConns
		if n <= 0 {
			n = 32
		}
		d.SQL.SetMaxOpenConns(n)
		d.SQL.SetMaxIdleConns(n)
	}
	d.SQL.SetConnMaxIdleTime(5 * time.Minute)
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := d.SQL.PingContext(pingCtx); err != nil {
		_ = d.SQL.Close()
		return nil, fmt.Errorf("db: ping %s: %w", d.Dialect, err)
	}
	return d, nil
}

// idleInTransactionTimeout is the idle_in_transaction_session_timeout of Sluice's connections
// when the server, the role or DATABASE_URL sets none: PostgreSQL ends a session that sits inside
// a transaction waiting for its client for longer. Sluice's transactions never wait for the app
// for long (each retried within a budget of seconds), so only a stalled instance (paused, cut off
// from the database mid-transaction) reaches it, and the row locks it holds are then released,
// instead of keeping other instances' decisions on those keys failing until TCP gives up on the
// connection, which can take hours.
const idleInTransactionTimeout = "30s"

// sqlIdleInTransactionTimeout sets idleInTransactionTimeout for the session unless the server or
// the role set a timeout (0 is also "none set" there).
const sqlIdleInTransactionTimeout = "SELECT set_config('idle_in_transaction_session_timeout', '" + idleInTransactionTimeout + "', false) " +
	"WHERE current_setting('idle_in_transaction_session_timeout') = '0'"

// openPostgres is the pool of connections to url, each of which sets its
// idle_in_transaction_session_timeout as it opens (sqlIdleInTransactionTimeout), unless url sets
// one itself (0, none, included).
func openPostgres(url string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(url) // its errors hide the password
	if err != nil {
		return nil, err
	}
	const param = "idle_in_transaction_session_timeout"
	if _, set := cfg.RuntimeParams[param]; !set && !strings.Contains(cfg.RuntimeParams["options"], param) {
		cfg.AfterConnect = func(ctx context.Context, conn *pgconn.PgConn) error {
			return conn.Exec(ctx, sqlIdleInTransactionTimeout).Close()
		}
	}
	return stdlib.OpenDB(*cfg), nil
}

// checkSQLitePath refuses a sqlite:PATH that is no database file: an empty path or ":memory:"
// (each pooled connection would get a private database of its own; config refuses every
// in-memory form before this) and a directory.
func checkSQLitePath(path string) error {
	switch {
	case path == "":
		return errors.New("db: DATABASE_URL=sqlite:PATH needs the path of a database file; the path is empty")
	case path == ":memory:":
		return errors.New("db: DATABASE_URL=sqlite::memory: is refused: each pooled connection would have a database " +
			"of its own; give the path of a database file, e.g. sqlite:data/sluice.db")
	case strings.HasSuffix(path, "/"):
		return fmt.Errorf("db: DATABASE_URL=sqlite:%s names a directory; give the path of a database file in it, e.g. sqlite:%ssluice.db", path, path)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("db: DATABASE_URL=sqlite:%s names a directory; give the path of a database file in it, e.g. sqlite:%s", path, filepath.Join(path, "sluice.db"))
	}
	return nil
}

// sqliteDSN is the driver's data source name for the database file at path, exactly that file:
// a file: URI (the driver reads its query parameters, SQLite opens its path). SQLite decodes %HH
// in a URI's path and ends the path at '?' or '#', so those three characters are percent-encoded;
// an absolute path is given the empty authority ("file:///…"), so that one beginning with "//"
// is not read as a host. SecretFile puts the key file beside the same literal path.
//
// WAL lets readers proceed beside the writer; _txlock=immediate takes the write lock at BEGIN,
// so a read-modify-write never has to upgrade its lock (the classic SQLITE_BUSY deadlock);
// busy_timeout makes a second process (the CLI) wait instead of failing at once.
func sqliteDSN(path string) string {
	var b strings.Builder
	b.WriteString("file:")
	if strings.HasPrefix(path, "/") {
		b.WriteString("//")
	}
	for i := 0; i < len(path); i++ {
		switch c := path[i]; c {
		case '%', '?', '#':
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteString("?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)" +
		"&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)&_txlock=immediate")
	return b.String()
}

// Close releases the connection pool.
func (d *DB) Close() error { return d.SQL.Close() }

// Retries is how many transaction attempts were repeated after a retryable failure.
func (d *DB) Retries() int64 {
	var n int64
	for p := range d.counters {
		n += d.counters[p].retries.Load()
	}
	return n
}

// GiveUps is how many transactions failed closed with ErrUnavailable.
func (d *DB) GiveUps() int64 {
	var n int64
	for p := range d.counters {
		n += d.counters[p].giveUps.Load()
	}
	return n
}

// RetriesFor is Retries of the transactions of one purpose.
func (d *DB) RetriesFor(p Purpose) int64 { return d.counters[p].retries.Load() }

// GiveUpsFor is GiveUps of the transactions of one purpose.
func (d *DB) GiveUpsFor(p Purpose) int64 { return d.counters[p].giveUps.Load() }

// GaveUp counts a give-up of p's that no transaction counted: work that waited out the retry
// budget in a queue fails closed as one that spent it retrying does, and so does a transaction
// of CountSpentLater's that its caller could not retry another way.
func (d *DB) GaveUp(p Purpose) { d.counters[p].giveUps.Add(1) }

// Ping reports whether the database answers.
func (d *DB) Ping(ctx context.Context) error { return d.SQL.PingContext(ctx) }

// ErrReadOnly is CheckWritable's answer for a database that takes no writes.
var ErrReadOnly = errors.New("db: the database takes no writes (a standby, or default_transaction_read_only is on)")

// CheckWritable reports whether PostgreSQL takes writes: a standby (after a failover that
// moved the primary elsewhere) or a server made read-only answers every decision 503, so an
// instance on it is not ready. SQLite's read-only file fails the decisions the same way, but is
// not asked here (one process, nothing to move traffic to).
func (d *DB) CheckWritable(ctx context.Context) error {
	if d.Dialect != Postgres {
		return nil
	}
	var readOnly bool
	if err := d.SQL.QueryRowContext(ctx, `SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'`).Scan(&readOnly); err != nil {
		return fmt.Errorf("db: check writable: %w", err)
	}
	if readOnly {
		return ErrReadOnly
	}
	return nil
}
