package limiter

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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
//   - the parts' requests are counted once, with their group (GroupStats).
func TestThePartsOfASpentGroupKeepItsBudget(t *testing.T) {
	const budget = 2 * time.Second
	d := testkit.Open(t, db.Postgres)
	// Six attempts of 250 ms each spend the attempts (about 1.5 s) before the budget.
	d.Retry = db.RetryPolicy{MaxAttempts: 6, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, Budget: budget}
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
		c1, c2 := newJob(1, true, Request{Name: "api", Key: "contended-1", Count: 1}), newJob(1, true, Request{Name: "api", Key: "contended-2", Count: 1})
		innocent := newJob(2, true, Request{Name: "api", Key: "innocent", Count: 1})
		for _, j := range []*job{c1, c2, innocent} {
			j.queuedAt = time.Now()
		}
		groups, jobs := e.groups.Load(), e.jobs.Load()
		e.runGroup(nil, []*job{c1, c2, innocent})
		if g, n := e.groups.Load()-groups, e.jobs.Load()-jobs; g != 1 || n != 3 {
			t.Errorf("GroupStats counted %d groups of %d requests; want 1 of 3 (a part's requests were counted with its group)", g, n)
		}
		wantRefused(c1)
		wantRefused(c2)
		if innocent.err != nil || !innocent.out.OK {
			t.Fatalf("another tenant's decision behind two contended parts: %+v, %v; want admitted", innocent.out, innocent.err)
		}
	})

	t.Run("decided at once by its caller", func(t *testing.T) {
		c := newJob(1, true, Request{Name: "api", Key: "contended-3", Count: 1})
		innocent := newJob(2, true, Request{Name: "api", Key: "innocent-2", Count: 1})
		start, at := time.Now(), answeredAt(c)
		e.runGroup(nil, []*job{c, innocent})
		wantRefused(c)
		// The part has what is left of the group's budget: the 503 comes at its end, give or
		// take the last attempt's cancelling; a fresh budget would take 1.5 s more.
		if took := (<-at).Sub(start); took > budget+600*time.Millisecond {
			t.Fatalf("the contended decision, not queued, answered after %v; want within its group's budget of %v", took, budget)
		}
		if innocent.err != nil || !innocent.out.OK {
			t.Fatalf("another tenant's decision: %+v, %v; want admitted", innocent.out, innocent.err)
		}
	})
}
