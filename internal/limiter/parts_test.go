package limiter

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// RefuseKeysUntilOpened makes every write of the limit_state rows whose key is LIKE pattern fail
// as a serialization failure (SQLSTATE 40001, what a transaction that lost the row to another
// gets), after sleeping for slow (an attempt that waited for another instance's lock), until the
// returned function is called: a group deciding such a key retries, backing off, for as long as
// the test wants, with nothing else contended (the test's end calls it too). PostgreSQL only.
func RefuseKeysUntilOpened(t *testing.T, d *db.DB, pattern string, slow time.Duration) (open func()) {
	t.Helper()
	for _, stmt := range []string{
		"CREATE TABLE test_gate (open boolean NOT NULL)",
		"INSERT INTO test_gate VALUES (false)",
		`CREATE FUNCTION test_refuse_key() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.key LIKE '` + pattern + `' AND NOT (SELECT open FROM test_gate) THEN
				PERFORM pg_sleep(` + fmt.Sprint(slow.Seconds()) + `);
				RAISE EXCEPTION 'test: the row is contended' USING ERRCODE = '40001';
			END IF;
			RETURN NEW;
		END $$`,
		"CREATE TRIGGER test_refuse_key BEFORE INSERT OR UPDATE ON limit_state FOR EACH ROW EXECUTE FUNCTION test_refuse_key()",
	} {
		if err := d.Gorm.Exec(stmt).Error; err != nil {
			t.Fatal(err)
		}
	}
	open = func() {
		if err := d.Gorm.Exec("UPDATE test_gate SET open = true").Error; err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(open) // a test that failed half-way lets the engine's Run end at once
	return open
}

// TestThePartsOfASpentGroupKeepItsBudget: a group whose every attempt lost a contended row (each
// attempt slow, as one waiting for another instance's lock is) is tried again in parts, and
//   - the parts run at once: a decision of another tenant behind two contended parts is admitted,
//     where parts run one after another let the first spend the time of the others, which then
//     expired (503) unread;
//   - a decision its caller made at once (not queued) keeps the group's budget: its 503 comes
//     within the budget of the group's start, where it used to get a whole budget more;
//   - the parts' requests are counted once, with their group (GroupStats);
//   - a give-up is counted where decisions fail closed: for each part that spends its attempts,
//     not for the group decided again in parts, and for a spent group that makes one part.
func TestThePartsOfASpentGroupKeepItsBudget(t *testing.T) {
	d := testkit.Open(t, db.Postgres)
	// Ten attempts of 250 ms each spend the attempts in about 2.5 s, before the budget, and a
	// part given a fresh budget would spend them again (5 s in all).
	policy := func(budget time.Duration) {
		d.Retry = db.RetryPolicy{MaxAttempts: 10, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, Budget: budget}
	}
	e := NewEngine(d, Options{})
	ctx := context.Background()
	for _, tenantID := range []int64{1, 2} {
		if _, _, err := e.PutDefinition(ctx, tenantID, "api", Definition{Kind: TokenBucket, Rate: 10, Period: 3_600_000}, nil); err != nil {
			t.Fatal(err)
		}
	}
	RefuseKeysUntilOpened(t, d, "contended%", 250*time.Millisecond)
	answeredAt := func(j *job) <-chan time.Time {
		at := make(chan time.Time, 1)
		go func() { <-j.done; at <- time.Now() }()
		return at
	}
	wantRefused := func(j *job) {
		t.Helper()
		if !errors.Is(j.err, ErrUnavailable) {
			t.Fatalf("the contended decision: %+v, %v; want ErrUnavailable", j.out, j.err)
		}
	}

	t.Run("queued", func(t *testing.T) {
		policy(6 * time.Second) // the innocent part has 3.5 s left
		c1, c2 := newJob(1, true, Request{Name: "api", Key: "contended-1", Count: 1}), newJob(1, true, Request{Name: "api", Key: "contended-2", Count: 1})
		innocent := newJob(2, true, Request{Name: "api", Key: "innocent", Count: 1})
		for _, j := range []*job{c1, c2, innocent} {
			j.queuedAt = time.Now()
		}
		groups, jobs, giveUps := e.groups.Load(), e.jobs.Load(), d.GiveUpsFor(db.PurposeDecision)
		e.runGroup(nil, []*job{c1, c2, innocent})
		if g, n := e.groups.Load()-groups, e.jobs.Load()-jobs; g != 1 || n != 3 {
			t.Errorf("GroupStats counted %d groups of %d requests; want 1 of 3 (a part's requests were counted with its group)", g, n)
		}
		if n := d.GiveUpsFor(db.PurposeDecision) - giveUps; n != 2 {
			t.Errorf("give-ups counted: %d; want 2, the two contended parts' (the group decided again in parts is none)", n)
		}
		wantRefused(c1)
		wantRefused(c2)
		if innocent.err != nil || !innocent.out.OK {
			t.Fatalf("another tenant's decision behind two contended parts: %+v, %v; want admitted", innocent.out, innocent.err)
		}
	})

	t.Run("a group of one part", func(t *testing.T) {
		policy(6 * time.Second)
		c := newJob(1, true, Request{Name: "api", Key: "contended-4", Count: 1})
		c.queuedAt = time.Now()
		giveUps := d.GiveUpsFor(db.PurposeDecision)
		e.runGroup(nil, []*job{c})
		wantRefused(c)
		if n := d.GiveUpsFor(db.PurposeDecision) - giveUps; n != 1 {
			t.Errorf("give-ups counted: %d; want 1 (a spent group that makes one part is a give-up)", n)
		}
	})

	t.Run("decided at once by its caller", func(t *testing.T) {
		const budget = 3300 * time.Millisecond
		policy(budget)
		c := newJob(1, true, Request{Name: "api", Key: "contended-3", Count: 1})
		innocent := newJob(2, true, Request{Name: "api", Key: "innocent-2", Count: 1})
		start, at := time.Now(), answeredAt(c)
		e.runGroup(nil, []*job{c, innocent})
		wantRefused(c)
		// The part has what is left of the group's budget: the 503 comes at its end, give or
		// take the last attempt's cancelling; a fresh budget would take 2.5 s more.
		if took := (<-at).Sub(start); took > budget+800*time.Millisecond {
			t.Fatalf("the contended decision, not queued, answered after %v; want within its group's budget of %v", took, budget)
		}
		// The innocent decision is there to make two parts; with 0.8 s left it is admitted on
		// an idle machine, and may fail closed on a busy one, as it should past its budget.
		if innocent.err != nil && !errors.Is(innocent.err, ErrUnavailable) {
			t.Fatalf("another tenant's decision: %+v, %v; want admitted or ErrUnavailable", innocent.out, innocent.err)
		}
	})
}

// TestARetryLocksTheRowsItReadsFromItsThirdAttempt: a decision that reads its state row and
// writes it a round trip later (a fixed window's, on PostgreSQL) and lost the row twice reads it
// FOR UPDATE from its third attempt, so that another instance's decisions cannot change it before
// the write (they wait and retry instead; docs/performance.md, session 21); its first two attempts
// lock nothing, as the common path never does. Another connection probes the row with NOWAIT
// while each attempt is between its read and its write.
func TestARetryLocksTheRowsItReadsFromItsThirdAttempt(t *testing.T) {
	e, d := aFixedWindowRow(t)
	open := RefuseKeysUntilOpened(t, d, "k", 0)
	var locked []bool
	e.afterDecide = func() {
		locked = append(locked, rowLocked(t, d))
		if len(locked) == 2 {
			open() // the third attempt (its snapshot taken after this) writes
		}
	}
	if j := decideFixedWindow(e); j.err != nil || !j.out.OK {
		t.Fatalf("the retried decision: %+v, %v", j.out, j.err)
	}
	if fmt.Sprint(locked) != "[false false true]" {
		t.Fatalf("the row locked at each attempt: %v; want [false false true] (locked from the third attempt only)", locked)
	}
}

// TestLoadRowsLocksFromTheThirdAttempt: the GORM path's read of state rows (closes of holds and
// leases, the sweeper) locks them as groupPgx's does, from the third attempt of a read-write
// transaction, on PostgreSQL; never in a read-only one.
func TestLoadRowsLocksFromTheThirdAttempt(t *testing.T) {
	_, d := aFixedWindowRow(t)
	ctx := context.Background()
	row := []rowKey{{1, "fw", "k", 0}}
	for _, readOnly := range []bool{false, true} {
		var locked []bool
		run := d.Serializable
		if readOnly {
			run = d.ReadOnly
		}
		err := run(ctx, func(tx *gorm.DB) error {
			if _, err := loadRows(tx, row); err != nil {
				return err
			}
			locked = append(locked, rowLocked(t, d))
			if len(locked) < 3 {
				return &pgconn.PgError{Code: "40001", Message: "test: lost the row"}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want := "[false false true]"
		if readOnly {
			want = "[false false false]"
		}
		if fmt.Sprint(locked) != want {
			t.Fatalf("read-only %v: the row locked at each attempt: %v; want %s", readOnly, locked, want)
		}
	}
}

// aFixedWindowRow opens an engine on PostgreSQL (ten attempts, a minute's budget) with a fixed
// window fw of tenant 1 whose key k has a state row, so that there is a row to lock.
func aFixedWindowRow(t *testing.T) (*Engine, *db.DB) {
	t.Helper()
	d := testkit.Open(t, db.Postgres)
	d.Retry = db.RetryPolicy{MaxAttempts: 10, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, Budget: time.Minute}
	e := NewEngine(d, Options{})
	if _, _, err := e.PutDefinition(context.Background(), 1, "fw", Definition{Kind: FixedWindow, Rate: 100, Period: 3_600_000}, nil); err != nil {
		t.Fatal(err)
	}
	if j := decideFixedWindow(e); j.err != nil || !j.out.OK {
		t.Fatalf("the first decision: %+v, %v", j.out, j.err)
	}
	return e, d
}

// decideFixedWindow decides one unit of fw for key k in a group of its own.
func decideFixedWindow(e *Engine) *job {
	j := newJob(1, true, Request{Name: "fw", Key: "k", Count: 1})
	e.runGroup(nil, []*job{j})
	return j
}

// rowLocked reports whether another transaction holds a lock on the state row of limit fw, key
// k (tenant 1): a probe with NOWAIT from another connection.
func rowLocked(t *testing.T, d *db.DB) bool { return rowOfLocked(t, d, "fw", "k") }

// rowOfLocked is rowLocked for the row of limit name, key key (tenant 1).
func rowOfLocked(t *testing.T, d *db.DB, name, key string) bool {
	t.Helper()
	err := d.Gorm.Transaction(func(tx *gorm.DB) error {
		return tx.Exec("SELECT 1 FROM limit_state WHERE tenant_id = 1 AND name = ? AND key = ? FOR UPDATE NOWAIT", name, key).Error
	})
	var pgErr *pgconn.PgError
	if err != nil && (!errors.As(err, &pgErr) || pgErr.Code != "55P03") {
		t.Fatalf("probing the row's lock: %v", err)
	}
	return err != nil
}

// TestARetryLocksTheRowsItReadsLateToo: the rows a group reads after its first round trip (those
// its hints did not foresee: a parent's, here, once the hints are gone) are locked as well from
// the third attempt.
func TestARetryLocksTheRowsItReadsLateToo(t *testing.T) {
	d := testkit.Open(t, db.Postgres)
	d.Retry = db.RetryPolicy{MaxAttempts: 10, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, Budget: time.Minute}
	e := NewEngine(d, Options{})
	ctx := context.Background()
	for _, l := range []struct { // the parent first
		name string
		def  Definition
	}{
		{"org", Definition{Kind: FixedWindow, Rate: 100, Period: 3_600_000}},
		{"fw", Definition{Kind: FixedWindow, Rate: 10, Period: 3_600_000, Parents: []Parent{{Name: "org", Key: "o"}}}},
	} {
		if _, _, err := e.PutDefinition(ctx, 1, l.name, l.def, nil); err != nil {
			t.Fatal(err)
		}
	}
	if j := decideFixedWindow(e); j.err != nil || !j.out.OK { // both rows exist: there is something to lock
		t.Fatalf("the first decision: %+v, %v", j.out, j.err)
	}
	open := RefuseKeysUntilOpened(t, d, "k", 0)
	var parentLocked []bool
	e.afterDecide = func() {
		parentLocked = append(parentLocked, rowOfLocked(t, d, "org", "o"))
		if len(parentLocked) == 2 {
			e.hints.mu.Lock()
			e.hints.m = nil // the third attempt foresees no parent: it reads the parent's row late
			e.hints.mu.Unlock()
			open()
		}
	}
	if j := decideFixedWindow(e); j.err != nil || !j.out.OK {
		t.Fatalf("the retried decision: %+v, %v", j.out, j.err)
	}
	if fmt.Sprint(parentLocked) != "[false false true]" {
		t.Fatalf("the parent's row, read late, locked at each attempt: %v; want [false false true]", parentLocked)
	}
}

// TestAGroupWithARowLockedLongDecidesItsOtherJobsAlone: when a group's transaction waits for a
// row lock past the lock timeout (its holder stalled), the group's jobs on other rows, another
// tenant's, are decided at once in parts of their own, not held for that row until the budget
// ends; the job on the locked row is decided, once, when the lock is released.
func TestAGroupWithARowLockedLongDecidesItsOtherJobsAlone(t *testing.T) {
	d := testkit.Open(t, db.Postgres)
	d.Retry = db.RetryPolicy{MaxAttempts: 1 << 30, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond, Budget: 5 * time.Minute}
	e := NewEngine(d, Options{})
	ctx := context.Background()
	for _, tenantID := range []int64{1, 2} {
		if _, _, err := e.PutDefinition(ctx, tenantID, "api", Definition{Kind: TokenBucket, Rate: 10, Period: 3_600_000}, nil); err != nil {
			t.Fatal(err)
		}
	}
	first := newJob(1, true, Request{Name: "api", Key: "locked", Count: 1})
	e.runGroup(nil, []*job{first}) // the row exists: there is one to lock
	if first.err != nil {
		t.Fatal(first.err)
	}
	release := LockRowUntilReleased(t, d, 1, "api", "locked")
	locked, other := newJob(1, true, Request{Name: "api", Key: "locked", Count: 1}), newJob(2, true, Request{Name: "api", Key: "free", Count: 1})
	for _, j := range []*job{locked, other} {
		j.queuedAt = time.Now()
	}
	ended := make(chan struct{})
	go func() { e.runGroup(nil, []*job{locked, other}); close(ended) }()
	testkit.Await(t, other.done, "the other tenant's decision, grouped with one on a row locked past the lock timeout")
	if other.err != nil || !other.out.OK {
		t.Fatalf("the other tenant's decision: %+v, %v; want admitted", other.out, other.err)
	}
	select {
	case <-locked.done:
		t.Fatalf("the decision on the locked row ended while the row was still locked: %+v, %v", locked.out, locked.err)
	default:
	}
	release()
	testkit.Await(t, ended, "the group once the lock is released")
	if locked.err != nil || !locked.out.OK || locked.out.Results[0].Remaining < 8 || locked.out.Results[0].Remaining > 8.01 {
		t.Fatalf("the decision on the locked row: %+v, %v; want admitted, 8 remaining", locked.out, locked.err)
	}
}

// LockRowUntilReleased holds the state row of tenantID's limit name for key (shard 0) locked
// FOR UPDATE from another connection's transaction, as a stalled instance's would, until
// release commits it (or the test ends).
func LockRowUntilReleased(t *testing.T, d *db.DB, tenantID int64, name, key string) (release func()) {
	t.Helper()
	return LockUntilReleased(t, d, "the row of "+name+", key "+key, `SELECT 1 FROM limit_state
		WHERE tenant_id = $1 AND name = $2 AND key = $3 AND shard = 0 FOR UPDATE`, tenantID, name, key)
}

// LockUntilReleased holds the one row that query (a SELECT … FOR UPDATE) returns locked from
// another connection's transaction, as a stalled instance's would, until release commits it (or
// the test ends); what names the row in a failure.
func LockUntilReleased(t *testing.T, d *db.DB, what, query string, args ...any) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := d.SQL.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	holder, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Rollback() })
	var n int
	if err := holder.QueryRowContext(ctx, "SELECT count(*) FROM ("+query+") AS locked", args...).Scan(&n); err != nil || n != 1 {
		t.Fatalf("locking %s: %d rows, %v; want the one", what, n, err)
	}
	return func() {
		if err := holder.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}
