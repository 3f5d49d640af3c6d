package limiter_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

const otherTenant = int64(2)

// refuseKeyUntilOpened makes every write of key's limit_state rows fail as a serialization
// failure (SQLSTATE 40001, what a transaction that lost the row to another gets) until the
// returned function is called: a group deciding key retries, backing off, for as long as the
// test wants, with nothing else contended (the test's end calls it too).
func refuseKeyUntilOpened(t *testing.T, d *db.DB, key string) (open func()) {
	t.Helper()
	for _, stmt := range []string{
		"CREATE TABLE test_gate (open boolean NOT NULL)",
		"INSERT INTO test_gate VALUES (false)",
		`CREATE FUNCTION test_refuse_key() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.key = '` + key + `' AND NOT (SELECT open FROM test_gate) THEN
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

// TestAGroupBackingOffLetsTheLaneDecideOthers: a group whose transaction keeps losing a row (a
// key two instances fight over) backs off between attempts without holding its lane: another
// tenant's decision, and the same tenant's on another key, are decided while the group still
// retries, whether the group was decided by its caller (the lane idle) or by the lane's worker
// (the lane busy when it came). A later decision on the contended key waits for the group
// instead of joining the fight; both are decided, exactly, once the row is free.
func TestAGroupBackingOffLetsTheLaneDecideOthers(t *testing.T) {
	for _, byWorker := range []bool{false, true} {
		name := "decided by its caller"
		if byWorker {
			name = "decided by the lane's worker"
		}
		t.Run(name, func(t *testing.T) {
			d := testkit.Open(t, db.Postgres)
			// Retries for as long as the test lasts: only the test ends the contention.
			d.Retry = db.RetryPolicy{MaxAttempts: 1 << 30, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond, Budget: 5 * time.Minute}
			e := newEngine(t, d, limiter.Options{}) // one lane: every decision meets in it
			ctx := context.Background()
			def := limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 3_600_000}
			mustPut(t, e, "api", def)
			if _, _, err := e.PutDefinition(ctx, otherTenant, "api", def, nil); err != nil {
				t.Fatal(err)
			}
			entered, release := make(chan struct{}), make(chan struct{})
			if byWorker { // the first group holds the lane until the contended decision has queued
				var armed atomic.Bool
				armed.Store(true)
				limiter.SetAfterDecide(e, func() {
					if armed.CompareAndSwap(true, false) {
						close(entered)
						<-release
					}
				})
			}
			open := refuseKeyUntilOpened(t, d, "contended")
			type answer struct {
				d   limiter.Decision
				err error
			}
			decide := func(tenantID int64, key string) <-chan answer {
				out := make(chan answer, 1)
				go func() {
					got, err := e.Limit(ctx, tenantID, limiter.Request{Name: "api", Key: key, Count: 1})
					out <- answer{got, err}
				}()
				return out
			}
			var first <-chan answer
			if byWorker {
				first = decide(tenant, "warm")
				testkit.Await(t, entered, "the first group to hold the lane")
			}
			contended := decide(tenant, "contended")
			if byWorker {
				waitUntil(t, "the contended decision to queue behind the first group", func() bool { return e.Queued() == 1 })
				close(release)
				if a := testkit.Await(t, first, "the first group's decision"); a.err != nil || !a.d.OK {
					t.Fatalf("the first group's decision: %+v, %v", a.d, a.err)
				}
			}
			// Its immediate retry and one after a backoff: the group has given its turn away.
			waitUntil(t, "the contended group to retry twice", func() bool { return d.RetriesFor(db.PurposeDecision) >= 2 })
			other := testkit.Await(t, decide(otherTenant, "free"), "another tenant's decision while the contended group backs off")
			if other.err != nil || !other.d.OK || other.d.Remaining != 9 {
				t.Fatalf("another tenant's decision: %+v, %v; want admitted, 9 remaining", other.d, other.err)
			}
			sameTenant := testkit.Await(t, decide(tenant, "elsewhere"), "the same tenant's decision on another key")
			if sameTenant.err != nil || !sameTenant.d.OK || sameTenant.d.Remaining != 9 {
				t.Fatalf("the same tenant's decision on another key: %+v, %v; want admitted, 9 remaining", sameTenant.d, sameTenant.err)
			}
			// Another decision on the contended key waits for the group instead of fighting it.
			again := decide(tenant, "contended")
			waitUntil(t, "the second contended decision to be held back", func() bool { return e.Queued() == 1 })
			select {
			case a := <-contended:
				t.Fatalf("the contended decision ended while its row was still refused: %+v, %v", a.d, a.err)
			default:
			}
			open()
			a := testkit.Await(t, contended, "the contended decision once its row is free")
			b := testkit.Await(t, again, "the held-back decision once the contended group ended")
			if a.err != nil || b.err != nil || !a.d.OK || !b.d.OK || a.d.Remaining != 9 || b.d.Remaining < 8 || b.d.Remaining > 8.01 {
				t.Fatalf("the contended decisions: %+v, %v and %+v, %v; want both admitted, 9 and 8 remaining (and the refill of the test's seconds)", a.d, a.err, b.d, b.err)
			}
			if v, err := e.GetValue(ctx, tenant, "api", "contended"); err != nil || v.Value < 8 || v.Value > 8.01 {
				t.Fatalf("the contended key holds %+v (%v), want 8 (taken twice)", v, err)
			}
		})
	}
}
