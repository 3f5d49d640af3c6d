package limiter_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestOneTripDecidesAsTheGoMath: on PostgreSQL, plain single-shard token bucket decisions are
// decided in one round trip by the server-side function (group_onetrip_pg.go); on SQLite by the
// Go math alone. The same random sequence (odd rates and periods, capacities, reservations,
// fractional counts, a clock that also steps back, groups of several requests on the same keys)
// gets the same answers, bit for bit, on both; and on PostgreSQL nearly every group took one
// round trip (only a limit's first decision, which has no hint yet, takes two).
func TestOneTripDecidesAsTheGoMath(t *testing.T) {
	pgURL := testkit.URL(t, db.Postgres)
	clockPG, clockLite := newClock(1_700_000_000_000), newClock(1_700_000_000_000)
	pg := newEngine(t, testkit.OpenURL(t, pgURL), limiter.Options{Now: clockPG.Now, IntN: func(n int) int { return n / 2 }})
	lite := newEngine(t, testkit.Open(t, db.SQLite), limiter.Options{Now: clockLite.Now, IntN: func(n int) int { return n / 2 }})
	r := rand.New(rand.NewPCG(7, 13))
	defs := []limiter.Definition{
		{Kind: limiter.TokenBucket, Rate: 7.3, Period: 1_234},
		{Kind: limiter.TokenBucket, Rate: 3, Period: 10_000, Capacity: ptr(5.5), MaxReserved: ptr(2.25)},
		{Kind: limiter.TokenBucket, Rate: 0.1, Period: 997, Capacity: ptr(4.0), MaxReserved: ptr(0.0), Jitter: 300},
		{Kind: limiter.GCRA, Rate: 1e6, Period: 86_400_000, Capacity: ptr(1e3)},
		{Kind: limiter.TokenBucket, Rate: 2, Period: 60_000, Capacity: ptr(4.0), Mode: limiter.Shadow},
		// The smallest rate the function decides, over the longest period: the refill is tiny
		// but never underflows to zero (which PostgreSQL would raise as an error).
		{Kind: limiter.TokenBucket, Rate: 1e-290, Period: 316_224_000_000, Capacity: ptr(4.0), MaxReserved: ptr(1e-3)},
	}
	for i, d := range defs {
		mustPut(t, pg, fmt.Sprint("l", i), d)
		mustPut(t, lite, fmt.Sprint("l", i), d)
	}
	counts := []float64{0, 0.5, 1, 1, 1, 2, 3.75, 1e-3}
	ctx := context.Background()
	before := pg.GroupStats()
	decisions := 0
	for step := range 400 {
		dt := int64(r.IntN(1_500))
		if r.IntN(20) == 0 {
			dt = -int64(r.IntN(3_000)) // the clock steps back: a stored ts ahead of now
		}
		clockPG.Advance(dt)
		clockLite.Advance(dt)
		reqs := make([]limiter.Request, 1+r.IntN(6))
		for i := range reqs {
			reqs[i] = limiter.Request{Name: fmt.Sprint("l", r.IntN(len(defs))), Key: fmt.Sprint("k", r.IntN(3)),
				Count: counts[r.IntN(len(counts))], Reserve: r.IntN(3) == 0}
		}
		consume := r.IntN(10) != 0
		got, want := pg.Each(ctx, tenant, reqs, consume), lite.Each(ctx, tenant, reqs, consume)
		for i := range reqs {
			decisions++
			if g, w := outcomeText(got[i]), outcomeText(want[i]); g != w {
				t.Fatalf("step %d, request %d %+v: PostgreSQL (one trip) %s, SQLite (the Go math) %s", step, i, reqs[i], g, w)
			}
		}
	}
	after := pg.GroupStats()
	groups, trips := after.Groups-before.Groups, after.RoundTrips-before.RoundTrips
	if trips > groups+int64(2*len(defs)) {
		t.Fatalf("%d round trips for %d groups (%d decisions): the one-trip path was not taken", trips, groups, decisions)
	}
}

// outcomeText is what a caller sees of an outcome, with every float's exact bits.
func outcomeText(o limiter.Outcome) string {
	if o.Err != nil {
		return "error " + o.Err.Error()
	}
	d := o.Decision
	s := fmt.Sprintf("ok=%v remaining=%x", d.OK, math.Float64bits(d.Remaining))
	if d.RetryAfter != nil {
		s += fmt.Sprintf(" retryAfter=%d", *d.RetryAfter)
	}
	if d.Shadow != nil {
		s += fmt.Sprintf(" shadow.ok=%v", d.Shadow.OK)
		if d.Shadow.RetryAfter != nil {
			s += fmt.Sprintf(" shadow.retryAfter=%d", *d.Shadow.RetryAfter)
		}
	}
	return s
}

// TestOneTripFailsClosedWhenTheDatabaseDisagrees: the engine replays every one-trip group in Go
// and compares. A statement for a lone request, or a function for a group, that admits everything
// (installed here on purpose) makes the group fail closed: the over-admitting decisions are
// errors (503 unavailable), never answered as admitted.
func TestOneTripFailsClosedWhenTheDatabaseDisagrees(t *testing.T) {
	t.Run("one request", func(t *testing.T) {
		url := testkit.URL(t, db.Postgres)
		e := newEngine(t, testkit.OpenURL(t, url), newClock(1_700_000_000_000).opts())
		mustPut(t, e, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 2, Period: 60_000})
		mustLimit(t, e, limiter.Request{Name: "tb", Count: 1}) // the hint: later decisions take one trip
		mustLimit(t, e, limiter.Request{Name: "tb", Count: 1})
		const decide = "(c.rest >= 0 OR ($6::boolean AND -c.rest <= c.reserve)) AND NOT (c.existed AND c.penalty_until > c.t) AS ok"
		if !strings.Contains(limiter.TakeOne, decide) {
			t.Fatalf("the statement no longer decides with %q; update this test", decide)
		}
		limiter.SetTakeOne(e, strings.Replace(limiter.TakeOne, decide, "(TRUE OR $6::boolean) AS ok", 1)) // $6 still typed
		_, err := e.Limit(context.Background(), tenant, limiter.Request{Name: "tb", Count: 1})
		if !errors.Is(err, limiter.ErrOneTripDiffers) || !errors.Is(err, limiter.ErrUnavailable) {
			t.Fatalf("a third token from a bucket of 2, admitted by the database: err = %v, want the group failed closed", err)
		}
		// The failure dropped the limit's hint: the next decision reads the definition the
		// general way (two round trips) and is decided, not failed again.
		before := e.GroupStats().RoundTrips
		if got := mustLimit(t, e, limiter.Request{Name: "tb", Count: 1}); got.OK {
			t.Fatal("a token from an emptied bucket admitted after the failure")
		}
		if trips := e.GroupStats().RoundTrips - before; trips != 2 {
			t.Fatalf("the decision after the failure took %d round trips, want 2 (the general way)", trips)
		}
	})
	t.Run("a group", func(t *testing.T) {
		url := testkit.URL(t, db.Postgres)
		d := testkit.OpenURL(t, url)
		e := newEngine(t, d, newClock(1_700_000_000_000).opts())
		mustPut(t, e, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 2, Period: 60_000})
		mustLimit(t, e, limiter.Request{Name: "tb", Count: 1}) // the hint: later decisions take one trip

		var def string
		if err := d.Gorm.Raw(`SELECT pg_get_functiondef(` + takeTokens + `::regprocedure)`).Scan(&def).Error; err != nil {
			t.Fatal(err)
		}
		const decide = "ok := (rest >= 0 OR (p_reserve[i] AND -rest <= reserves[i])) AND NOT (e AND pen > t);"
		if !strings.Contains(def, decide) {
			t.Fatalf("the function no longer decides with %q; update this test", decide)
		}
		if err := d.Gorm.Exec(strings.Replace(def, decide, "ok := TRUE;", 1)).Error; err != nil {
			t.Fatal(err)
		}
		// The last token goes to a lone request (the statement, not the function), whose decision
		// then waits, holding the lane, until two more requests have queued behind it: those two
		// are one group, which the function decides.
		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		limiter.SetAfterDecide(e, func() { once.Do(func() { close(entered); <-release }) })
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		lone := make(chan error, 1)
		go func() {
			_, err := e.Limit(ctx, tenant, limiter.Request{Name: "tb", Count: 1})
			lone <- err
		}()
		select {
		case <-entered:
		case <-ctx.Done():
			t.Fatal("waited a minute for the lone request's decision")
		}
		grouped := make(chan []limiter.Outcome, 1)
		go func() {
			grouped <- e.Each(ctx, tenant, []limiter.Request{{Name: "tb", Count: 1}, {Name: "tb", Count: 1}}, true)
		}()
		for e.Queued() < 2 {
			if ctx.Err() != nil {
				t.Fatalf("waited a minute for two requests to queue behind the lone one; %d did", e.Queued())
			}
			runtime.Gosched()
		}
		close(release)
		if err := <-lone; err != nil {
			t.Fatalf("the lone request for the last token: %v", err)
		}
		for i, o := range <-grouped {
			if !errors.Is(o.Err, limiter.ErrOneTripDiffers) || !errors.Is(o.Err, limiter.ErrUnavailable) {
				t.Fatalf("request %d of the group, admitted by the database from an empty bucket: %+v, want the group failed closed", i, o)
			}
		}
	})
}

// takeTokens is the one-trip function the engine calls (migration 00016; its body since 00024), by its signature.
const takeTokens = `'sluice_take_tokens(bigint, bigint[], text[], text[], float8[], boolean[], boolean[], bigint[])'`

// TestTakeTokensReturnsDefinitionsOnce: the function returns each limit's definition once, with
// its version, on the first of its rows, and not at all when the caller names the stored version (p_known);
// the first form (migration 00015), which instances of the previous release call during an
// upgrade, still returns it on every row.
func TestTakeTokensReturnsDefinitionsOnce(t *testing.T) {
	d := testkit.OpenURL(t, testkit.URL(t, db.Postgres))
	e := newEngine(t, d, newClock(1_700_000_000_000).opts())
	for _, name := range []string{"a", "b"} {
		mustPut(t, e, name, limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 1000})
	}
	var aVersion int64
	if err := d.Gorm.Raw(`SELECT xmin::text::bigint FROM limit_definitions WHERE tenant_id = ? AND name = 'a'`, tenant).Scan(&aVersion).Error; err != nil {
		t.Fatal(err)
	}
	// Requests in arrival order: a/k2, b/k1, a/k1, a/k2; the function decides them in key order.
	call := func(known string) string {
		t.Helper()
		var out []struct {
			Ord        int
			Name       *string
			DefVersion *int64
		}
		q := `SELECT ord, (def).name, def_version FROM sluice_take_tokens(NULL, ARRAY[?, ?, ?, ?]::bigint[], ARRAY['a', 'b', 'a', 'a'],
			ARRAY['k2', 'k1', 'k1', 'k2'], ARRAY[1, 1, 1, 1]::float8[], ARRAY[false, false, false, false], ARRAY[true, true, true, true]` + known + `)`
		args := []any{tenant, tenant, tenant, tenant}
		if strings.Contains(known, "?") {
			args = append(args, aVersion, aVersion, aVersion)
		}
		if err := d.Gorm.Raw(q, args...).Scan(&out).Error; err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, r := range out {
			name := "-"
			if r.Name != nil {
				name = *r.Name
			}
			if (r.Name != nil) != (r.DefVersion != nil) || r.Name != nil && *r.Name == "a" && *r.DefVersion != aVersion {
				t.Errorf("row %d: definition %v with version %v, want a's version %d with a's definition", r.Ord, r.Name, r.DefVersion, aVersion)
			}
			fmt.Fprintf(&b, "%d:%s ", r.Ord, name)
		}
		return strings.TrimSpace(b.String())
	}
	for _, c := range []struct{ what, known, want string }{
		{"nothing known", ", NULL", "3:a 1:- 4:- 2:b"},
		{"a known", ", ARRAY[?, 0, ?, ?]::bigint[]", "3:- 1:- 4:- 2:b"},
		{"a known as another version", ", ARRAY[7, 0, 7, 7]::bigint[]", "3:a 1:- 4:- 2:b"},
	} {
		if got := call(c.known); got != c.want {
			t.Errorf("%s: rows (ord:definition) %q, want %q", c.what, got, c.want)
		}
	}
	var firstForm []string
	if err := d.Gorm.Raw(`SELECT (def).name FROM sluice_take_tokens(NULL, ARRAY[?, ?]::bigint[], ARRAY['a', 'a'], ARRAY['k1', 'k2'],
		ARRAY[1, 1]::float8[], ARRAY[false, false], ARRAY[true, true])`, tenant, tenant).Scan(&firstForm).Error; err != nil {
		t.Fatal(err)
	}
	if strings.Join(firstForm, " ") != "a a" {
		t.Errorf("the first form returned definitions %q, want one on every row", firstForm)
	}
}

// takeTokensByHand is a PostgreSQL engine on a database of its own with the limit tb (10 tokens
// a minute) and the database's pool, for the tests that call sluice_take_tokens by hand on tb's
// key k in transactions of their own.
func takeTokensByHand(t *testing.T) (*fakeClock, *limiter.Engine, *sql.DB) {
	t.Helper()
	d := testkit.OpenURL(t, testkit.URL(t, db.Postgres))
	clock := newClock(1_700_000_000_000)
	e := newEngine(t, d, clock.opts())
	mustPut(t, e, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000})
	pool, err := d.Gorm.DB()
	if err != nil {
		t.Fatal(err)
	}
	return clock, e, pool
}

// takeATokenOfK is one request for a token of tb's key k ($1 the tenant, $2 the time).
const takeATokenOfK = `SELECT ok, post_value FROM sluice_take_tokens($2, ARRAY[$1::bigint], ARRAY['tb'], ARRAY['k'],
	ARRAY[1::float8], ARRAY[false], ARRAY[true], ARRAY[0::bigint])`

// keyK is tb's row of key k ($1 the tenant).
const keyK = "tenant_id = $1 AND name = 'tb' AND key = 'k'"

// TestTakeTokensNeverAnswersAWriteThatDidNotHappen: the function writes a stored row by the ctid
// its read returned (migration 00023). The engine calls it under SERIALIZABLE, where a row moved
// since the read fails the UPDATE itself; under READ COMMITTED the UPDATE would find no row at
// that ctid and write nothing. The function must then fail with a serialization failure, never
// return the decision as made: here a caller in READ COMMITTED waits on another transaction's
// change of the row, which commits, and the call fails with 40001, the row as the other left it.
func TestTakeTokensNeverAnswersAWriteThatDidNotHappen(t *testing.T) {
	clock, e, pool := takeTokensByHand(t)
	mustLimit(t, e, limiter.Request{Name: "tb", Key: "k", Count: 1}) // the stored row
	// At the engine's time, when the row (9 of 10 tokens) is not full: a full row is written by
	// key (see TestTakeTokensInsertsAFullRowTheSweeperDeleted).
	err := takeATokenBehind(t, pool, sql.LevelReadCommitted, clock.Now().UnixMilli(),
		`UPDATE limit_state SET value = 3 WHERE `+keyK, tenant)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("the call whose row moved before its write: %v, want a serialization failure (40001)", err)
	}
}

// takeATokenBehind runs takeATokenOfK at the time now behind another transaction's write of k's
// row (write with args, leaving 3 tokens in it): the write first, then the call in a
// transaction of its own (both at isolation), which must wait on the write's lock; then the
// write commits. It returns the call's outcome, an error or one saying what the call answered,
// and fails t unless the row is the other transaction's afterwards.
func takeATokenBehind(t *testing.T, pool *sql.DB, isolation sql.IsolationLevel, now int64, write string, args ...any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	other, err := pool.BeginTx(ctx, &sql.TxOptions{Isolation: isolation})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback() }()
	if _, err := other.ExecContext(ctx, write, args...); err != nil {
		t.Fatal(err)
	}
	caller, err := pool.BeginTx(ctx, &sql.TxOptions{Isolation: isolation})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = caller.Rollback() }()
	var callerPID int
	if err := caller.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&callerPID); err != nil {
		t.Fatal(err)
	}
	called := make(chan error, 1)
	go func() {
		var ok bool
		var post float64
		err := caller.QueryRowContext(ctx, takeATokenOfK, tenant, now).Scan(&ok, &post)
		if err == nil {
			err = fmt.Errorf("the call answered ok=%v with %v tokens left", ok, post)
		}
		called <- err
	}()
	for waiting := false; !waiting; {
		select {
		case err := <-called:
			t.Fatalf("the call returned before waiting on the other transaction's write: %v", err)
		default:
		}
		if err := pool.QueryRowContext(ctx, `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`,
			callerPID).Scan(&waiting); err != nil {
			t.Fatalf("waited a minute for the call to wait on the other transaction's write: %v", err)
		}
		runtime.Gosched()
	}
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	err = <-called
	_ = caller.Rollback()
	var value float64
	if err := pool.QueryRowContext(ctx, `SELECT value FROM limit_state WHERE `+keyK, tenant).Scan(&value); err != nil {
		t.Fatal(err)
	}
	if value != 3 {
		t.Fatalf("the row holds %v after the call (%v), want the other transaction's 3", value, err)
	}
	return err
}

// TestTakeTokensInsertsAFullRowTheSweeperDeleted: the sweeper deletes a row that reads as full
// (in READ COMMITTED, if it is unchanged), and may do so between a group's read of the row and
// its write. The function writes a full row by key, as the upsert it is, so the decision inserts
// the row again and commits: a full row and no row decide alike. A row that is not full is
// written by its ctid, and a deletion of it (which no sweep makes, as it is not full) fails the
// transaction with a serialization failure, which the engine would retry.
func TestTakeTokensInsertsAFullRowTheSweeperDeleted(t *testing.T) {
	clock, e, pool := takeTokensByHand(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		what    string
		after   int64  // ms after the row's last decision that the call decides at
		errCode string // "": the call and its commit succeed
	}{
		{"full", 60_000, ""},
		{"not full", 0, "40001"},
	} {
		mustLimit(t, e, limiter.Request{Name: "tb", Key: "k", Count: 1}) // a token taken: the row is stored, not full
		decider, err := pool.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
		if err != nil {
			t.Fatal(err)
		}
		var before float64
		if err := decider.QueryRowContext(ctx, `SELECT value FROM limit_state WHERE `+keyK, tenant).Scan(&before); err != nil {
			t.Fatal(err) // the transaction's snapshot, with the row in it
		}
		if _, err := pool.ExecContext(ctx, `DELETE FROM limit_state WHERE `+keyK, tenant); err != nil {
			t.Fatal(err)
		}
		now := clock.Now().UnixMilli() + c.after
		var ok bool
		var post float64
		err = decider.QueryRowContext(ctx, takeATokenOfK, tenant, now).Scan(&ok, &post)
		if err == nil {
			err = decider.Commit()
		}
		_ = decider.Rollback()
		var pgErr *pgconn.PgError
		switch {
		case c.errCode == "" && err != nil:
			t.Fatalf("%s row deleted after the decision's read: %v, want the decision made and committed", c.what, err)
		case c.errCode == "" && (!ok || post != 9):
			t.Fatalf("%s row deleted after the decision's read: ok=%v, 9 tokens left=%v, want a token taken from a full bucket", c.what, ok, post)
		case c.errCode != "" && (!errors.As(err, &pgErr) || pgErr.Code != c.errCode):
			t.Fatalf("%s row deleted after the decision's read: %v, want SQLSTATE %s", c.what, err, c.errCode)
		}
		var rows int64
		if err := pool.QueryRowContext(ctx, `SELECT count(*) FROM limit_state WHERE `+keyK, tenant).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int64{true: 1, false: 0}[c.errCode == ""]; rows != want {
			t.Fatalf("%s row: %d rows left for the key, want %d", c.what, rows, want)
		}
	}
}

// TestTakeTokensLosesAnInsertRaceRetryably: the function inserts a row its read did not find
// with a plain INSERT (migration 00024). When another transaction inserts the same row after the
// decision's snapshot (two instances' first decisions on one key), the call must fail with an
// error the engine retries (internal/db retries 40001 and 23505), never answer the decision:
// here the other transaction's insert (a blind one, so PostgreSQL reports a unique violation;
// a winner that had read the key too is reported as a serialization failure) is still open when
// the call reaches its own, which waits for it; the other commits, the call fails, and the row
// is the other's.
func TestTakeTokensLosesAnInsertRaceRetryably(t *testing.T) {
	clock, _, pool := takeTokensByHand(t)
	now := clock.Now().UnixMilli()
	err := takeATokenBehind(t, pool, sql.LevelSerializable, now, `INSERT INTO limit_state
		(tenant_id, name, key, shard, value, ts, counters, penalty_until) VALUES ($1, 'tb', 'k', 0, 3, $2, '', 0)`, tenant, now)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || (pgErr.Code != "40001" && pgErr.Code != "23505") {
		t.Fatalf("the call that lost the insert race: %v, want a serialization failure (40001) or a unique violation (23505)", err)
	}
}

// TestTakeTokensRefusesANullKey: a NULL tenant, name or key in the function's arguments is an
// error before anything is read (22004). The comparisons that find where one row's requests end
// cannot see a NULL, so such a request would otherwise be counted on its neighbour's row.
func TestTakeTokensRefusesANullKey(t *testing.T) {
	clock, e, pool := takeTokensByHand(t)
	mustLimit(t, e, limiter.Request{Name: "tb", Key: "k", Count: 1})
	for _, c := range []struct{ what, tenants, names, keys string }{
		{"key", "ARRAY[$1, $1]::bigint[]", "ARRAY['tb', 'tb']", "ARRAY['k', NULL]"},
		{"name", "ARRAY[$1, $1]::bigint[]", "ARRAY['tb', NULL]", "ARRAY['k', 'k']"},
		{"tenant", "ARRAY[$1, NULL]::bigint[]", "ARRAY['tb', 'tb']", "ARRAY['k', 'k']"},
	} {
		// At the engine's time, when k's row is not full and would be written by its ctid.
		_, err := pool.Exec(`SELECT * FROM sluice_take_tokens($2, `+c.tenants+`, `+c.names+`, `+c.keys+`,
			ARRAY[1, 1]::float8[], ARRAY[false, false], ARRAY[true, true], ARRAY[0, 0]::bigint[])`, tenant, clock.Now().UnixMilli())
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22004" {
			t.Errorf("a NULL %s: %v, want 22004 (null value not allowed)", c.what, err)
		}
	}
	var value float64
	if err := pool.QueryRow(`SELECT value FROM limit_state WHERE `+keyK, tenant).Scan(&value); err != nil {
		t.Fatal(err)
	}
	if value != 9 {
		t.Fatalf("k's row holds %v, want 9: a refused call took from it", value)
	}
}

// TestOneTripFallsBackWhenTheLimitChanged: a limit that another instance changed since this
// one's hint (here into a fixed window) is not decided by the function; the group is decided
// the general way, under the new definition.
func TestOneTripFallsBackWhenTheLimitChanged(t *testing.T) {
	a, b := twoInstances(t)
	mustPut(t, a, "x", limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 60_000})
	mustLimit(t, a, limiter.Request{Name: "x", Key: "k", Count: 1})
	mustPut(t, b, "x", limiter.Definition{Kind: limiter.FixedWindow, Rate: 2, Period: 60_000})
	before := a.GroupStats()
	for i, wantOK := range []bool{true, true, false} {
		got := mustLimit(t, a, limiter.Request{Name: "x", Key: "k", Count: 1})
		if got.Definition.Kind != limiter.FixedWindow || got.OK != wantOK {
			t.Fatalf("decision %d after the change: %s ok=%v, want a fixed window's ok=%v", i+1, got.Definition.Kind, got.OK, wantOK)
		}
	}
	if after := a.GroupStats(); after.RoundTrips-before.RoundTrips != 3+2+2 {
		t.Fatalf("%d round trips, want 3 for the first decision (one trip that decided nothing, then two) and 2 for each other (fixed windows take two)",
			after.RoundTrips-before.RoundTrips)
	}
}

// TestOneTripInstancesNeverOverAdmit runs two engines (two app processes' pools) and 24
// goroutines against one PostgreSQL database, on five keys of one token bucket, each call
// several requests on random keys in random order, so that groups of both instances write
// overlapping rows in different arrival orders. Nearly every group takes the one-trip path; no
// key admits more than its bound, no decision fails (a deadlock between the function's writes
// would surface as a long stall or an error), and the contention is real (retries happen).
func TestOneTripInstancesNeverOverAdmit(t *testing.T) {
	ctx := context.Background()
	dbs := instancePools(t, testkit.NewDatabase(t), 8)
	engines := []*limiter.Engine{newEngine(t, dbs[0], limiter.Options{}), newEngine(t, dbs[1], limiter.Options{})}
	const capacity, perSecond, keys = 30, 100, 5
	mustPut(t, engines[0], "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: perSecond, Period: 1000, Capacity: ptr(float64(capacity))})
	for _, e := range engines { // each instance's hint: its later groups take one trip
		mustLimit(t, e, limiter.Request{Name: "tb", Key: "warm-up", Count: 0})
	}
	before := [2]limiter.GroupStats{engines[0].GroupStats(), engines[1].GroupStats()}
	retriesBefore := dbs[0].Retries() + dbs[1].Retries()

	var admitted [keys]atomic.Int64
	var errs sync.Map
	began := time.Now()
	deadline := began.Add(hammerDuration())
	var wg sync.WaitGroup
	for g := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := engines[g%2]
			r := rand.New(rand.NewPCG(uint64(g), 2))
			for time.Now().Before(deadline) {
				reqs := make([]limiter.Request, 1+r.IntN(4))
				picked := make([]int, len(reqs))
				for i := range reqs {
					picked[i] = r.IntN(keys)
					reqs[i] = limiter.Request{Name: "tb", Key: fmt.Sprint("k", picked[i]), Count: 1}
				}
				for i, o := range e.Each(ctx, tenant, reqs, true) {
					switch {
					case o.Err != nil:
						errs.Store(o.Err.Error(), true)
					case o.Decision.OK:
						admitted[picked[i]].Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began) + 2*time.Millisecond // ms rounding of the database clock's readings

	errs.Range(func(k, _ any) bool { t.Errorf("decision error: %v", k); return true })
	bound := capacity + perSecond*elapsed.Seconds()
	var total int64
	for k := range admitted {
		n := admitted[k].Load()
		total += n
		if float64(n) > bound {
			t.Errorf("key k%d admitted %d > bound %.1f", k, n, bound)
		}
	}
	var groups, trips int64
	for i, e := range engines {
		st := e.GroupStats()
		groups += st.Groups - before[i].Groups
		trips += st.RoundTrips - before[i].RoundTrips
	}
	retries := dbs[0].Retries() + dbs[1].Retries() - retriesBefore
	t.Logf("in %v: %d admitted on %d keys (bound %.0f each); %d groups, %d round trips, %d serialization retries",
		elapsed.Round(time.Millisecond), total, keys, bound, groups, trips, retries)
	if trips != groups+retries { // every attempt of every group one round trip
		t.Errorf("%d round trips for %d groups and %d retries: not every group took the one-trip path", trips, groups, retries)
	}
	if retries == 0 {
		t.Error("no serialization retries happened: the test did not exercise contention between the instances")
	}
	if total < keys*capacity {
		t.Errorf("%d admitted: too little for the test to mean anything", total)
	}
}

// TestOneTripEdgeDefinitions: definitions at the edges of what the function decides give the
// same answers on PostgreSQL (one trip) as on SQLite (the Go math): a capacity of -0 (valid, and
// the one value where Go's math.Min and PostgreSQL's least disagree unless it is read as +0), a
// penalty left running on a key by a definition that no longer has one, and a capacity changed
// behind the hint (the function decides with the stored definition, which still fits).
func TestOneTripEdgeDefinitions(t *testing.T) {
	clockPG, clockLite := newClock(1_700_000_000_000), newClock(1_700_000_000_000)
	pgDB := testkit.OpenURL(t, testkit.URL(t, db.Postgres))
	pg := newEngine(t, pgDB, clockPG.opts())
	lite := newEngine(t, testkit.Open(t, db.SQLite), clockLite.opts())
	ctx := context.Background()
	both := func(f func(e *limiter.Engine)) { f(pg); f(lite) }
	step := func(what string, reqs ...limiter.Request) {
		t.Helper()
		got, want := pg.Each(ctx, tenant, reqs, true), lite.Each(ctx, tenant, reqs, true)
		for i := range reqs {
			if g, w := outcomeText(got[i]), outcomeText(want[i]); g != w {
				t.Fatalf("%s, request %d: PostgreSQL (one trip) %s, SQLite (the Go math) %s", what, i, g, w)
			}
		}
	}
	advance := func(ms int64) { clockPG.Advance(ms); clockLite.Advance(ms) }

	both(func(e *limiter.Engine) {
		mustPut(t, e, "zero", limiter.Definition{Kind: limiter.TokenBucket, Rate: 5, Period: 1000, Capacity: ptr(math.Copysign(0, -1)), MaxReserved: ptr(1.0)})
	})
	// A reservation takes the key below zero; 300 ms refill it past zero, where the capacity
	// caps it (Go's math.Min(1, -0) is -0, as is PostgreSQL's least); a new key starts at the
	// capacity itself.
	for i := range 4 {
		step("capacity -0", limiter.Request{Name: "zero", Key: "k", Count: 0}, limiter.Request{Name: "zero", Key: "k", Count: 0.5, Reserve: true})
		advance(300)
		step("capacity -0, refilled past it", limiter.Request{Name: "zero", Key: "k", Count: 0})
		step("capacity -0, a new key", limiter.Request{Name: "zero", Key: fmt.Sprint("new", i), Count: 0})
	}
	// Stored before definitions were normalized: the function reads the -0 itself.
	if err := pgDB.Gorm.Exec(`UPDATE limit_definitions SET capacity = '-0' WHERE name = 'zero'`).Error; err != nil {
		t.Fatal(err)
	}
	step("capacity -0 as stored, a new key", limiter.Request{Name: "zero", Key: "stored", Count: 0})

	both(func(e *limiter.Engine) {
		mustPut(t, e, "pen", limiter.Definition{Kind: limiter.TokenBucket, Rate: 2, Period: 1000, Penalty: 5_000})
	})
	step("penalty", limiter.Request{Name: "pen", Key: "k", Count: 2}, limiter.Request{Name: "pen", Key: "k", Count: 1}) // the refusal starts a penalty
	both(func(e *limiter.Engine) {
		mustPut(t, e, "pen", limiter.Definition{Kind: limiter.TokenBucket, Rate: 2, Period: 1000})
	})
	for range 4 { // the penalty left on the key still refuses; then it ends
		advance(1_500)
		step("penalty left by the old definition", limiter.Request{Name: "pen", Key: "k", Count: 1})
	}

	both(func(e *limiter.Engine) {
		mustPut(t, e, "cap", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 1000})
	})
	step("capacity 10", limiter.Request{Name: "cap", Key: "k", Count: 4}, limiter.Request{Name: "cap", Key: "k", Count: 4})
	both(func(e *limiter.Engine) {
		mustPut(t, e, "cap", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 1000, Capacity: ptr(3.0)})
	})
	step("capacity 3, behind the hint", limiter.Request{Name: "cap", Key: "k", Count: 1}, limiter.Request{Name: "cap", Key: "k", Count: 1})
}

// TestOneTripFollowsAChangedDefinition: once an instance's hint carries the definition's
// version, the function returns no definition to it; when another instance changes the limit
// (still a token bucket the function decides), the function returns the new one and the
// instance decides with it, in one round trip, without failing the group.
func TestOneTripFollowsAChangedDefinition(t *testing.T) {
	a, b := twoInstances(t)
	mustPut(t, a, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 60_000, Capacity: ptr(5.0)})
	// The general way, then one trip that returns the definition, then one without.
	for i, wantRead := range []int64{0, 1, 0} {
		before := a.GroupStats().DefinitionsRead
		mustLimit(t, a, limiter.Request{Name: "tb", Key: "k", Count: 1})
		if read := a.GroupStats().DefinitionsRead - before; read != wantRead {
			t.Fatalf("decision %d: the function returned %d definitions, want %d", i+1, read, wantRead)
		}
	}
	mustPut(t, b, "tb", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 60_000, Capacity: ptr(1.0)})
	before := a.GroupStats().RoundTrips
	// 2 tokens left of 5, capped at the new capacity of 1: one more admitted, then none.
	for i, wantOK := range []bool{true, false} {
		if got := mustLimit(t, a, limiter.Request{Name: "tb", Key: "k", Count: 1}); got.OK != wantOK || *got.Definition.Capacity != 1 {
			t.Fatalf("decision %d after the change: ok=%v capacity %v, want ok=%v under the new capacity 1", i+1, got.OK, *got.Definition.Capacity, wantOK)
		}
	}
	if trips := a.GroupStats().RoundTrips - before; trips != 2 {
		t.Fatalf("%d round trips for 2 decisions after the change, want 2 (one trip each)", trips)
	}
}

// TestOneTripFollowsARecreatedDefinition: a limit deleted and created again, at the same instant
// (the clock is frozen) and with the same numbers, but enforced where it was in shadow mode. The
// function's math cannot tell the two apart, so only the definition's version can: the
// instance that held the shadow one must refuse under the enforced one.
func TestOneTripFollowsARecreatedDefinition(t *testing.T) {
	a, b := twoInstances(t)
	def := limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 60_000, Capacity: ptr(1.0), Mode: limiter.Shadow}
	mustPut(t, a, "tb", def)
	for range 3 { // a's hint now holds the shadow definition with its version
		mustLimit(t, a, limiter.Request{Name: "tb", Key: "warm-up", Count: 0})
	}
	if err := b.DeleteDefinition(context.Background(), tenant, "tb", nil); err != nil {
		t.Fatal(err)
	}
	def.Mode = limiter.Enforce
	mustPut(t, b, "tb", def)
	for i, wantOK := range []bool{true, false} {
		if got := mustLimit(t, a, limiter.Request{Name: "tb", Key: "k", Count: 1}); got.OK != wantOK || got.Shadow != nil {
			t.Fatalf("decision %d after the re-creation: ok=%v shadow=%v, want ok=%v, enforced", i+1, got.OK, got.Shadow != nil, wantOK)
		}
	}
}

// twoInstances returns two engines (two app processes' pools) on one PostgreSQL database, their
// clock frozen at the same instant (no refill between decisions).
func twoInstances(t *testing.T) (a, b *limiter.Engine) {
	url := testkit.URL(t, db.Postgres)
	clock := newClock(1_700_000_000_000)
	return newEngine(t, testkit.OpenURL(t, url), clock.opts()), newEngine(t, testkit.OpenURL(t, url), clock.opts())
}

// TestOneTripForgetsDeletedLimits: a limit deleted by another instance costs this one the
// function's wasted round trip once, not on every later decision.
func TestOneTripForgetsDeletedLimits(t *testing.T) {
	a, b := twoInstances(t)
	mustPut(t, a, "gone", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 1000})
	mustLimit(t, a, limiter.Request{Name: "gone", Count: 1})
	if err := b.DeleteDefinition(context.Background(), tenant, "gone", nil); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{1 + 2, 2} { // one trip that decides nothing, then two; then two
		before := a.GroupStats().RoundTrips
		if _, err := a.Limit(context.Background(), tenant, limiter.Request{Name: "gone", Count: 1}); !errors.Is(err, limiter.ErrLimitNotFound) {
			t.Fatalf("decision %d on a deleted limit: %v, want limit not found", i+1, err)
		}
		if got := a.GroupStats().RoundTrips - before; got != want {
			t.Fatalf("decision %d on a deleted limit took %d round trips, want %d", i+1, got, want)
		}
	}
}

// TestOneTripLoneRequestFollowsEveryShapeItDoesNotDecide: an instance holds a token bucket's
// hint; another changes the limit into a shape the one-trip path does not decide (a deny
// override on the key, a penalty, two shards, a parent, a rate too small). The first instance's
// next lone request (the one-statement form, pgTakeOne) writes nothing and is decided the general
// way under the new definition: the override refuses it, and no shape is decided as the old one.
func TestOneTripLoneRequestFollowsEveryShapeItDoesNotDecide(t *testing.T) {
	ctx := context.Background()
	bucket := limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 60_000}
	for _, c := range []struct {
		name   string
		change func(t *testing.T, b *limiter.Engine)
		check  func(t *testing.T, a *limiter.Engine, got limiter.Decision)
	}{
		{"deny override", func(t *testing.T, b *limiter.Engine) {
			if _, _, err := b.PutOverride(ctx, tenant, "x", limiter.Override{Match: "k", Action: limiter.ActionDeny}, nil); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, a *limiter.Engine, got limiter.Decision) {
			if got.OK {
				t.Fatal("a key its override denies was admitted")
			}
		}},
		{"penalty", func(t *testing.T, b *limiter.Engine) {
			mustPut(t, b, "x", limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 60_000, Penalty: 5_000})
		}, func(t *testing.T, a *limiter.Engine, got limiter.Decision) {
			if !got.OK || got.Definition.Penalty != 5_000 {
				t.Fatalf("ok=%v penalty %d, want admitted under the penalty's definition", got.OK, got.Definition.Penalty)
			}
		}},
		{"two shards", func(t *testing.T, b *limiter.Engine) {
			mustPut(t, b, "x", limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 60_000, Shards: 2})
		}, func(t *testing.T, a *limiter.Engine, got limiter.Decision) {
			if !got.OK || got.Definition.Shards != 2 {
				t.Fatalf("ok=%v shards %d, want admitted under two shards", got.OK, got.Definition.Shards)
			}
		}},
		{"a parent", func(t *testing.T, b *limiter.Engine) {
			mustPut(t, b, "p", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 3_600_000, Capacity: ptr(1.0)})
			mustPut(t, b, "x", limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 60_000, Parents: []limiter.Parent{{Name: "p", Key: "all"}}})
		}, func(t *testing.T, a *limiter.Engine, got limiter.Decision) {
			if !got.OK {
				t.Fatal("the parent's one token was refused")
			}
			if again := mustLimit(t, a, limiter.Request{Name: "x", Key: "k", Count: 1}); again.OK {
				t.Fatal("admitted past the parent, emptied by the decision before")
			}
		}},
		{"a rate too small", func(t *testing.T, b *limiter.Engine) {
			mustPut(t, b, "x", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1e-291, Period: 60_000, Capacity: ptr(1.0)})
		}, func(t *testing.T, a *limiter.Engine, got limiter.Decision) {
			if !got.OK || got.Definition.Rate != 1e-291 {
				t.Fatalf("ok=%v rate %g, want the last token taken at rate 1e-291", got.OK, got.Definition.Rate)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := twoInstances(t)
			mustPut(t, a, "x", bucket)
			mustLimit(t, a, limiter.Request{Name: "x", Key: "k", Count: 1}) // a's hint
			mustLimit(t, a, limiter.Request{Name: "x", Key: "k", Count: 1}) // one trip: the hint fits
			c.change(t, b)
			before := a.GroupStats().RoundTrips
			got := mustLimit(t, a, limiter.Request{Name: "x", Key: "k", Count: 1})
			c.check(t, a, got)
			if trips := a.GroupStats().RoundTrips - before; trips < 3 {
				t.Fatalf("%d round trips, want the one trip that decided nothing and then the general way's (at least 3)", trips)
			}
		})
	}
}

// TestTakeOneDecidesAsTheFunction: the one-statement form (pgTakeOne) and the function
// (sluice_take_tokens) with one request return the same row, every float to the bit, and leave
// the same stored row, for random definitions of every shape (fitting or not), stored states
// (missing, -0, huge, infinite, tiny, ahead of the clock, under a penalty), counts, reservations,
// consumption and known versions. Each case runs both forms in rolled-back transactions.
func TestTakeOneDecidesAsTheFunction(t *testing.T) {
	d := testkit.OpenURL(t, testkit.URL(t, db.Postgres))
	const now = int64(1_700_000_000_000)
	defs := []string{ // name, kind, rate, period, capacity, max_reserved, shards, parents, penalty, overrides_version
		`'a', 'token bucket', 7.3, 1234, NULL, NULL, 1, '', 0, 0`,
		`'b', 'token bucket', 3, 10000, 5.5, 2.25, 1, '', 0, 0`,
		`'c', 'token bucket', 0.1, 997, '-0', 0, 1, '', 0, 0`,
		`'d', 'gcra', 1e6, 86400000, 1e3, 'Infinity', 1, '', 0, 0`,
		`'e', 'token bucket', 1e-290, 316224000000, 4, 1e-3, 1, '', 0, 0`,
		`'f', 'token bucket', 9.99e-291, 1000, 4, NULL, 1, '', 0, 0`,
		`'g', 'fixed window', 5, 1000, NULL, NULL, 1, '', 0, 0`,
		`'h', 'token bucket', 5, 1000, NULL, NULL, 2, '', 0, 0`,
		`'i', 'token bucket', 5, 1000, NULL, NULL, 1, '[{"name":"a","key":"x"}]', 0, 0`,
		`'j', 'token bucket', 5, 1000, NULL, NULL, 1, '', 10, 0`,
		`'k', 'token bucket', 5, 1000, NULL, NULL, 1, '', 0, 3`,
	}
	for _, v := range defs {
		if err := d.Gorm.Exec(`INSERT INTO limit_definitions (tenant_id, name, kind, rate, period, capacity, max_reserved, shards, parents, penalty, overrides_version, created_at, updated_at)
			VALUES (?, `+v+`, now(), now())`, tenant).Error; err != nil {
			t.Fatal(err)
		}
	}
	var stored []struct {
		Name    string
		Version int64
	}
	if err := d.Gorm.Raw(`SELECT name, xmin::text::bigint AS version FROM limit_definitions WHERE tenant_id = ?`, tenant).Scan(&stored).Error; err != nil {
		t.Fatal(err)
	}
	versions := map[string]int64{}
	for _, v := range stored {
		versions[v.Name] = v.Version
	}
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "missing"}
	values := []string{"0", "-0", "0.5", "3.75", "-1", "1e308", "Infinity", "1e-300", "5", "999"}
	counts := []float64{0, 0.5, 1, 3.75, 1e-3, 10}
	// run decides one request with stmt in a transaction it rolls back, after storing row (nil:
	// none), and returns what it returned and the row it left, as text.
	run := func(stmt string, args []any, name string, row []any) string {
		t.Helper()
		ctx := context.Background()
		tx, err := d.SQL.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		if _, err := tx.ExecContext(ctx, `DELETE FROM limit_state WHERE tenant_id = $1`, tenant); err != nil {
			t.Fatal(err)
		}
		if row != nil {
			if _, err := tx.ExecContext(ctx, `INSERT INTO limit_state (tenant_id, name, key, shard, value, ts, counters, penalty_until)
				VALUES ($1, $2, 'k', 0, $3::float8, $4, '', $5)`, append([]any{tenant, name}, row...)...); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tx.ExecContext(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		got, err := tx.QueryContext(ctx, stmt, args...)
		if err != nil {
			t.Fatal(err)
		}
		_, vals := testkit.ScanRows(t, got)
		for _, v := range vals {
			fmt.Fprintf(&b, "row %v\n", v)
		}
		var left string
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(string_agg(format('%s %s %s %s %s %s', name, key, shard, value::text, ts, penalty_until), '; '), '')
			FROM limit_state WHERE tenant_id = $1`, tenant).Scan(&left); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "left %v", left)
		return b.String()
	}
	r := rand.New(rand.NewPCG(11, 17))
	for i := range 600 {
		name := names[r.IntN(len(names))]
		var row []any
		if r.IntN(4) != 0 {
			ts := now + int64(r.IntN(20_000)) - 10_000
			row = []any{values[r.IntN(len(values))], ts, []int64{0, now - 1, now, now + 1}[r.IntN(4)]}
		}
		count, reserve, consume := counts[r.IntN(len(counts))], r.IntN(2) == 0, r.IntN(5) != 0
		known := []int64{0, versions[name], 7}[r.IntN(3)]
		one := run(limiter.TakeOne, []any{now, tenant, name, "k", count, reserve, consume, known}, name, row)
		fn := run(limiter.TakeTokens, []any{now, []int64{tenant}, []string{name}, []string{"k"}, []float64{count}, []bool{reserve}, []bool{consume}, []int64{known}}, name, row)
		if one != fn {
			t.Fatalf("case %d: %s, stored %v, count %v, reserve %v, consume %v, known %d:\nthe statement:\n%s\nthe function:\n%s", i, name, row, count, reserve, consume, known, one, fn)
		}
	}
}
