package db_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestSerializableRetriesConflictsUntilEveryIncrementLands runs concurrent read-modify-write
// transactions on one row: serialization failures (PostgreSQL) and busy errors (SQLite) must be
// retried until every increment has been applied exactly once.
func TestSerializableRetriesConflictsUntilEveryIncrementLands(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		if err := d.Gorm.Exec(`INSERT INTO settings (key, value) VALUES ('n', '0')`).Error; err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		var wg sync.WaitGroup
		const workers, each = 16, 10
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					err := d.Serializable(ctx, func(tx *gorm.DB) error {
						calls.Add(1)
						var v string
						if err := tx.Raw(`SELECT value FROM settings WHERE key = 'n'`).Scan(&v).Error; err != nil {
							return err
						}
						n := 0
						for _, c := range v {
							n = n*10 + int(c-'0')
						}
						return tx.Exec(`UPDATE settings SET value = ? WHERE key = 'n'`, itoa(n+1)).Error
					})
					if err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		var v string
		d.Gorm.Raw(`SELECT value FROM settings WHERE key = 'n'`).Scan(&v)
		if v != itoa(workers*each) {
			t.Fatalf("counter = %s, want %d: an increment was lost or doubled", v, workers*each)
		}
		if d.Dialect == db.Postgres && d.Retries() == 0 {
			t.Fatal("no retries counted under contention")
		}
		t.Logf("%s: %d attempts for %d increments, %d retries", d.Dialect, calls.Load(), workers*each, d.Retries())
	})
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func TestErrorsOfTheCallbackAreNotRetried(t *testing.T) {
	d := testkit.Open(t, db.SQLite)
	mine := errors.New("mine")
	calls := 0
	err := d.Serializable(context.Background(), func(tx *gorm.DB) error { calls++; return mine })
	if !errors.Is(err, mine) || calls != 1 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
}

func TestGoneDatabaseFailsClosedWithinTheBudget(t *testing.T) {
	srv, err := testkit.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	d, err := db.Open(context.Background(), srv.URL, db.Options{Retry: db.RetryPolicy{MaxAttempts: 5, BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond, Budget: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = d.Serializable(context.Background(), func(tx *gorm.DB) error { return tx.Exec("SELECT 1").Error })
	if !errors.Is(err, db.ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("took %v", took)
	}
	if d.GiveUps() == 0 {
		t.Fatal("give-up not counted")
	}
}

func TestSchemaCheckRefusesAnUnmigratedDatabase(t *testing.T) {
	d, err := db.Open(context.Background(), testkit.URL(t, db.SQLite), db.Options{}) // not migrated
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.CheckSchema(context.Background()); !errors.Is(err, db.ErrSchemaNotCurrent) {
		t.Fatalf("got %v", err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := d.CheckSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Listen is run and waited for by its caller: it reports that LISTEN is in effect (fn("")),
// delivers a committed NOTIFY, and returns once its context ends.
func TestListenDeliversNotificationsAndReturnsWhenCtxEnds(t *testing.T) {
	d := testkit.Open(t, db.Postgres)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Listen(ctx, "sluice_test", func(payload string) { got <- payload })
	}()
	next := func(what string) string {
		t.Helper()
		return testkit.Await(t, got, what)
	}
	if p := next("the LISTEN connection to come up"); p != "" {
		t.Fatalf("first call %q, want \"\" (connected: drop caches)", p)
	}
	err := d.Serializable(ctx, func(tx *gorm.DB) error { return db.Notify(tx, d.Dialect, "sluice_test", "hello") })
	if err != nil {
		t.Fatal(err)
	}
	if p := next("the notification"); p != "hello" {
		t.Fatalf("payload %q, want hello", p)
	}
	// The connection is lost twice: each time Listen connects again, says so, and hears on.
	for i := range 2 {
		var killed int
		if err := d.Gorm.Raw(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND query = 'LISTEN "sluice_test"'`).Scan(&killed).Error; err != nil || killed != 1 {
			t.Fatalf("terminating the LISTEN connection (%d): %d terminated, %v", i+1, killed, err)
		}
		if p := next("the LISTEN connection to come back"); p != "" {
			t.Fatalf("after the loss %d: %q, want \"\" (connected again: drop caches)", i+1, p)
		}
		err := d.Serializable(ctx, func(tx *gorm.DB) error { return db.Notify(tx, d.Dialect, "sluice_test", "again") })
		if err != nil {
			t.Fatal(err)
		}
		if p := next("the notification after the loss"); p != "again" {
			t.Fatalf("payload %q, want again", p)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("waited 30 s for Listen to return after its context ended")
	}
}

// TestRetriesAndGiveUpsAreCountedUnderTheTransactionsPurpose: the metrics must tell a decision
// that failed closed from background work that gave up, so each counter goes to the purpose the
// transaction's context carries.
func TestRetriesAndGiveUpsAreCountedUnderTheTransactionsPurpose(t *testing.T) {
	d := testkit.Open(t, db.SQLite)
	d.Retry = db.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Microsecond, MaxDelay: time.Microsecond, Budget: 10 * time.Second}
	busy := errors.New("SQLITE_BUSY: database is locked") // what SQLite answers a second writer
	ctx := db.WithPurpose(context.Background(), db.PurposeSweep)
	err := d.Serializable(ctx, func(tx *gorm.DB) error { return busy })
	if !errors.Is(err, db.ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable after the attempts ran out", err)
	}
	if err := d.Serializable(context.Background(), func(tx *gorm.DB) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, p := range db.Purposes {
		wantRetries, wantGiveUps := int64(0), int64(0)
		if p == db.PurposeSweep {
			wantRetries, wantGiveUps = 2, 1
		}
		if got := d.RetriesFor(p); got != wantRetries {
			t.Errorf("retries of %s = %d, want %d", p, got, wantRetries)
		}
		if got := d.GiveUpsFor(p); got != wantGiveUps {
			t.Errorf("give-ups of %s = %d, want %d", p, got, wantGiveUps)
		}
	}
	if d.Retries() != 2 || d.GiveUps() != 1 {
		t.Errorf("totals: %d retries, %d give-ups; want 2 and 1", d.Retries(), d.GiveUps())
	}
}

// TestAPostgresConflictIsRetriedAtOnce: PostgreSQL reports a conflict once the other transaction
// has committed, so the first retry must not wait; a backoff there hands the row to the other
// instance's next transaction. SQLite's busy lock is still held when reported, so it still waits.
func TestAPostgresConflictIsRetriedAtOnce(t *testing.T) {
	d := testkit.Open(t, db.SQLite) // the policy depends on the error, not on the dialect
	d.Retry = db.RetryPolicy{MaxAttempts: 3, BaseDelay: 1000 * time.Hour, MaxDelay: 1000 * time.Hour, Budget: 30 * time.Second}

	// A serialization failure, a deadlock, and a lost insert race (the decision function's plain
	// insert of a row another instance inserted first: migration 00024) are each retried at once.
	for _, conflict := range []*pgconn.PgError{
		{Code: "40001", Message: "could not serialize access due to concurrent update"},
		{Code: "40P01", Message: "deadlock detected"},
		{Code: "23505", Message: `duplicate key value violates unique constraint "limit_state_pkey"`},
	} {
		attempts := 0
		err := d.Serializable(context.Background(), func(tx *gorm.DB) error {
			if attempts++; attempts == 1 {
				return conflict
			}
			return nil
		})
		if err != nil || attempts != 2 {
			t.Fatalf("after %s (%s): err %v after %d attempts; want the second attempt at once, not after a backoff of up to 1,000 hours",
				conflict.Code, conflict.Message, err, attempts)
		}
	}
	attempts := 0
	err := d.Serializable(context.Background(), func(tx *gorm.DB) error {
		attempts++
		return &pgconn.PgError{Code: "23503", Message: "insert or update violates foreign key constraint"}
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23503" || attempts != 1 {
		t.Fatalf("after a foreign key violation: err %v after %d attempts; want it returned after one attempt (retrying cannot fix it)", err, attempts)
	}

	d.Retry.Budget = 200 * time.Millisecond
	attempts = 0
	err = d.Serializable(context.Background(), func(tx *gorm.DB) error {
		attempts++
		return errors.New("SQLITE_BUSY: database is locked")
	})
	if !errors.Is(err, db.ErrUnavailable) || attempts != 1 {
		t.Fatalf("after SQLite's busy lock: err %v after %d attempts; want one attempt, then the budget spent in the backoff", err, attempts)
	}
}

// TestPostgresSessionsEndTransactionsLeftIdle: every pooled PostgreSQL connection ends a
// transaction its client leaves idle for 30 s (a stalled instance's row locks are released),
// unless DATABASE_URL (0, none, included), the server or the role sets a timeout of its own,
// which is kept.
func TestPostgresSessionsEndTransactionsLeftIdle(t *testing.T) {
	timeout := func(d *db.DB) string {
		t.Helper()
		var got string
		if err := d.Serializable(context.Background(), func(tx *gorm.DB) error {
			return tx.Raw("SHOW idle_in_transaction_session_timeout").Scan(&got).Error
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := timeout(testkit.Open(t, db.Postgres)); got != "30s" {
		t.Fatalf("idle_in_transaction_session_timeout %q; want 30s", got)
	}
	url := testkit.URL(t, db.Postgres)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	for _, own := range []string{"7s", "0"} { // 0: the URL asks for none
		if got := timeout(testkit.OpenURL(t, testkit.URL(t, db.Postgres)+sep+"idle_in_transaction_session_timeout="+own)); got != own {
			t.Fatalf("with DATABASE_URL's own timeout %s: %q; want the URL's", own, got)
		}
	}
}

// TestAStatementCachedBeforeAColumnWasAddedIsRetried: a migration that adds a column to a table
// (00026 did to tenants) while an instance runs changes the result type of its connections'
// cached `SELECT *` statements; PostgreSQL then answers "cached plan must not change result type"
// (0A000) once per connection, which pgx answers by dropping the statement. The transaction is
// retried on the statement prepared anew, not failed (an older build answered those requests
// 500 in a rolling upgrade).
func TestAStatementCachedBeforeAColumnWasAddedIsRetried(t *testing.T) {
	d, err := db.Open(context.Background(), testkit.URL(t, db.Postgres), db.Options{MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	ctx := context.Background()
	if err := d.Gorm.Exec(`CREATE TABLE widgets (id BIGINT PRIMARY KEY, name TEXT NOT NULL); INSERT INTO widgets VALUES (1, 'a')`).Error; err != nil {
		t.Fatal(err)
	}
	type widget struct {
		ID   int64
		Name string
	}
	read := func() error {
		var w widget
		return d.ReadOnly(ctx, func(tx *gorm.DB) error { return tx.Table("widgets").Where("id = ?", 1).Take(&w).Error })
	}
	if err := read(); err != nil { // prepares and caches the statement on the one connection
		t.Fatal(err)
	}
	if err := d.Gorm.Exec(`ALTER TABLE widgets ADD COLUMN colour TEXT`).Error; err != nil {
		t.Fatal(err)
	}
	if err := read(); err != nil {
		t.Fatalf("reading through a statement cached before a column was added: %v", err)
	}
}
