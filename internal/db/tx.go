package db

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/apperr"
)

// ErrUnavailable means a request (a decision, a change) could not be completed safely: the
// database is unreachable or contention outlasted every retry. Callers must fail closed (HTTP
// 503), never open. The errors
// Serializable returns are copies of it (errors.Is holds) whose cause says what happened.
var ErrUnavailable = apperr.New(apperr.Unavailable, apperr.UnavailableMessage)

// ErrAttemptsSpent is the cause (errors.Is) of an ErrUnavailable that means every attempt lost to
// another transaction: contention, not the database failing, with time left in the budget.
var ErrAttemptsSpent = errors.New("db: every attempt lost to another transaction")

// RetryPolicy bounds how long a transaction keeps retrying.
type RetryPolicy struct {
	MaxAttempts int           // attempts in all, including the first
	BaseDelay   time.Duration // first backoff (full jitter): see RetryPolicy.delay for when it comes
	MaxDelay    time.Duration // cap of one backoff
	Budget      time.Duration // wall-clock budget of all attempts together
}

// DefaultRetryPolicy tolerates heavy contention on one hot key while keeping the worst case
// (database gone) to a few seconds.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 40, BaseDelay: time.Millisecond, MaxDelay: 50 * time.Millisecond, Budget: 5 * time.Second}

// Serializable runs fn in one SERIALIZABLE transaction, retrying serialization failures,
// deadlocks and SQLite busy errors with jittered exponential backoff (see RetryPolicy.delay). When attempts, the time
// budget or the database run out it returns an error wrapping ErrUnavailable. fn must be safe to
// run more than once: it must not have effects outside the transaction.
func (d *DB) Serializable(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return d.serializable(ctx, false, fn)
}

// ReadOnly is Serializable for work that never writes; PostgreSQL may run it without
// serialization failures, and SQLite lets it run beside the writer.
func (d *DB) ReadOnly(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return d.serializable(ctx, true, fn)
}

func (d *DB) serializable(ctx context.Context, readOnly bool, fn func(tx *gorm.DB) error) error {
	opts := &sql.TxOptions{ReadOnly: readOnly}
	if d.Dialect == Postgres {
		opts.Isolation = sql.LevelSerializable
	} // SQLite transactions are serializable by construction (one writer, snapshot readers).
	return d.retry(ctx, !readOnly, func(ctx context.Context) error {
		return d.Gorm.WithContext(ctx).Transaction(fn, opts)
	})
}

// WithPgx runs attempt on one pooled PostgreSQL connection as *pgx.Conn, with Serializable's
// retry policy. attempt owns the transaction: it must BEGIN ISOLATION LEVEL SERIALIZABLE and end
// with COMMIT or ROLLBACK. It lets the hot path pipeline several statements per round trip, which
// database/sql cannot. A connection left inside a transaction is discarded, never reused.
func (d *DB) WithPgx(ctx context.Context, attempt func(ctx context.Context, conn *pgx.Conn) error) error {
	if d.Dialect != Postgres {
		return errors.New("db: WithPgx needs PostgreSQL")
	}
	return d.retry(ctx, true, func(ctx context.Context) error {
		c, err := d.SQL.Conn(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		var attemptErr error
		err = c.Raw(func(driverConn any) error {
			conn := driverConn.(*stdlib.Conn).Conn()
			attemptErr = attempt(ctx, conn)
			if conn.PgConn().TxStatus() != 'I' { // still in a transaction: roll back or drop the connection
				rbCtx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				if _, err := conn.Exec(rbCtx, "ROLLBACK"); err != nil || conn.PgConn().TxStatus() != 'I' {
					return driver.ErrBadConn
				}
			}
			return nil
		})
		if attemptErr != nil {
			return attemptErr
		}
		return err
	})
}

// retry runs attempt until it succeeds, fails for a reason retrying cannot fix, or the attempts,
// the time budget or the database run out (ErrUnavailable). With numbered (read-write
// transactions: a read-only one may not lock rows), each attempt's ctx carries its number
// (Attempt).
func (d *DB) retry(ctx context.Context, numbered bool, attempt func(ctx context.Context) error) error {
	count := &d.counters[PurposeOf(ctx)]
	beforeWaiting, _ := ctx.Value(beforeWaitingKey{}).(func())
	ctx, cancel := context.WithTimeout(ctx, d.Retry.Budget)
	defer cancel()
	var last error
	for n := 1; ; n++ {
		actx := ctx
		if numbered && n > 1 {
			actx = context.WithValue(ctx, attemptKey{}, n)
		}
		err := attempt(actx)
		if err == nil {
			return nil
		}
		last = err
		switch {
		case isRetryable(err):
		case isUnavailable(err) || ctx.Err() != nil:
			if parentGone(ctx) {
				return fmt.Errorf("db: transaction: %w", err)
			}
			count.giveUps.Add(1)
			return ErrUnavailable.Wrap(fmt.Errorf("db: %v", err))
		default:
			return err // a real error of fn's, or a bug: not ours to retry
		}
		if n >= d.Retry.MaxAttempts {
			if counted, _ := ctx.Value(spentCountedLaterKey{}).(bool); !counted {
				count.giveUps.Add(1)
			}
			return ErrUnavailable.Wrap(fmt.Errorf("%w: after %d attempts: %v", ErrAttemptsSpent, n, last))
		}
		count.retries.Add(1)
		wait := d.Retry.delay(n, err)
		if wait > 0 && beforeWaiting != nil {
			beforeWaiting()
			beforeWaiting = nil
		}
		if !sleep(ctx, wait) {
			if parentGone(ctx) {
				return fmt.Errorf("db: transaction: %w", context.Cause(ctx))
			}
			count.giveUps.Add(1)
			return ErrUnavailable.Wrap(fmt.Errorf("db: retry budget spent: %v", last))
		}
	}
}

type spentCountedLaterKey struct{}

// CountSpentLater returns ctx whose transaction (Serializable, WithPgx), should every attempt
// lose to another transaction (ErrAttemptsSpent), leaves counting that give-up to its caller
// (GaveUp): the limiter decides such a group again in parts that share no row, and only what
// then fails closed answers 503.
func CountSpentLater(ctx context.Context) context.Context {
	return context.WithValue(ctx, spentCountedLaterKey{}, true)
}

type attemptKey struct{}

// Attempt is the number of the attempt (1 for the first) of the read-write transaction that ctx
// was given to (Serializable, WithPgx; always 1 for ReadOnly's): a transaction that lost its
// rows twice can lock them as it reads them, so that it cannot lose them the same way again.
func Attempt(ctx context.Context) int {
	if n, ok := ctx.Value(attemptKey{}).(int); ok {
		return n
	}
	return 1
}

type beforeWaitingKey struct{}

// BeforeWaiting returns ctx whose transaction (Serializable, WithPgx) calls f once, just before
// it first waits between two attempts (an immediate retry is no wait). The limiter's lanes give
// their turn away then, so that a group that keeps losing a contended row does not hold back the
// lane's other decisions while it backs off.
func BeforeWaiting(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, beforeWaitingKey{}, f)
}

// sleep waits for d, or less if ctx ends first, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
	}
	return ctx.Err() == nil
}

// parentGone tells a caller that went away (request cancelled) from our own budget running out.
func parentGone(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), context.Canceled)
}

// delay is how long to wait before attempt n+1, after attempt n failed with the retryable err.
//
// PostgreSQL reports a write conflict (40001's "concurrent update", 23505's lost insert race) once
// the other transaction has committed, so the first retry after one of its errors goes at once:
// the row is free, and a backoff would only hand it to the other instance's next transaction,
// which would make the same group lose again and again (docs/performance.md, "an immediate first
// retry"). SSI's other serialization failures are raised once the transaction it conflicts with
// has committed, too. A deadlock's victim may find the survivor still holding its locks and wait
// behind it; at worst its immediate retry costs one attempt. From the second retry on, and for
// SQLite's busy lock, which is still held when reported, the wait is full-jittered and doubles
// each time, up to MaxDelay: PostgreSQL's schedule is SQLite's, one step later. lock_timeout's
// 55P03 is like SQLite's busy lock, not a conflict: the lock's holder had not finished when the
// wait ended, so its retry backs off (and a decision's lane is given to others) at once.
func (p RetryPolicy) delay(n int, err error) time.Duration {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && !IsLockTimeout(err) {
		if n == 1 {
			return 0
		}
		n-- // the immediate retry took the first step
	}
	backoff := min(p.MaxDelay, p.BaseDelay<<min(n-1, 20))
	return rand.N(backoff) + time.Microsecond
}

// lockNotAvailable is PostgreSQL's lock_not_available: lock_timeout ended a wait for a lock.
const lockNotAvailable = "55P03"

// IsLockTimeout reports whether err is PostgreSQL's lock_timeout ending a wait for a lock: the
// holder had not finished within it.
func IsLockTimeout(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == lockNotAvailable
}

// isRetryable reports errors that mean "another transaction got there first; try again", and
// the one that means "a statement cached on this connection is stale; prepare it again".
func isRetryable(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code {
		case "40001", "40P01": // serialization_failure, deadlock_detected
			return true
		case "23505": // unique_violation: two first consumptions of one key raced to insert
			return true
		case lockNotAvailable: // the server's lock_timeout ended a wait: contention
			return true
		case "0A000": // feature_not_supported; this one: a migration (a rolling upgrade's) changed
			// a table a cached statement reads; pgx dropped the statement, and the retry prepares it anew
			return strings.Contains(pg.Message, "cached plan must not change result type")
		}
		return false
	}
	msg := err.Error()
	// SQLite (modernc): SQLITE_BUSY (5), SQLITE_LOCKED (6) and their extended codes.
	return strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "SQLITE_LOCKED") ||
		strings.Contains(msg, "database is locked") || strings.Contains(msg, "database table is locked")
}

// isUnavailable reports errors that mean the database itself cannot be reached.
func isUnavailable(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		// Class 08: connection exception; 57P01-03: admin shutdown, crash shutdown, cannot connect now;
		// 53: insufficient resources; 25006: the server takes no writes (a standby after a
		// failover, default_transaction_read_only, a managed database out of disk); 57014: the
		// server's statement_timeout cancelled the statement (a cancel of ours is the caller
		// gone, which retry tells apart first).
		return strings.HasPrefix(pg.Code, "08") || strings.HasPrefix(pg.Code, "57P") || strings.HasPrefix(pg.Code, "53") ||
			pg.Code == "25006" || pg.Code == "57014"
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	if sqliteUnavailable(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "database is closed") || strings.Contains(msg, "unexpected EOF") ||
		strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection refused")
}

// SQLite's primary result codes that mean the database file cannot be used right now, not that
// the statement is wrong: SQLite's counterparts of PostgreSQL's classes 08, 53 and 57P.
const (
	sqliteNoMem    = 7  // SQLITE_NOMEM: a memory allocation failed
	sqliteReadOnly = 8  // SQLITE_READONLY: the file (or its directory, or the WAL) cannot be written
	sqliteIOErr    = 10 // SQLITE_IOERR: the operating system reported an I/O error
	sqliteFull     = 13 // SQLITE_FULL: the disk (or max_page_count) is full
	sqliteCantOpen = 14 // SQLITE_CANTOPEN: the file, its journal or its WAL cannot be opened
)

// sqliteUnavailable reports the SQLite driver's errors whose primary result code (code & 0xff,
// so that extended codes such as SQLITE_IOERR_WRITE match) is one of the codes above. The
// driver's error (modernc's, as forked by glebarez/go-sqlite) is matched by its Code method, so
// that this package needs no import of it. retry fails closed at once on them, as on
// PostgreSQL's insufficient resources: retrying a full disk within the budget would only delay
// the 503 and hold the writer's lock.
func sqliteUnavailable(err error) bool {
	var coded interface {
		error
		Code() int
	}
	if !errors.As(err, &coded) {
		return false
	}
	switch coded.Code() & 0xff {
	case sqliteNoMem, sqliteReadOnly, sqliteIOErr, sqliteFull, sqliteCantOpen:
		return true
	}
	return false
}
