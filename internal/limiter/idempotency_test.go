package limiter_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// idem is an idempotency record for body under key whose answer is the decision as JSON (with
// the batch retryAfter, jitter included).
func idem(key, body string) *limiter.Idempotency {
	sum := sha256.Sum256([]byte(body))
	return &limiter.Idempotency{Key: key, Hash: sum[:], Render: func(b limiter.BatchDecision) limiter.Answer {
		out, err := json.Marshal(map[string]any{"ok": b.OK, "retryAfter": b.RetryAfter, "remaining": b.Results[0].Remaining})
		if err != nil {
			panic(err)
		}
		status := 200
		if !b.OK {
			status = 429
		}
		return limiter.Answer{Status: status, Header: map[string]string{"X-Test": "first"}, Body: out}
	}}
}

func limitIdem(t *testing.T, e *limiter.Engine, tenantID int64, req limiter.Request, id *limiter.Idempotency) limiter.IdempotentResult {
	t.Helper()
	r, err := e.LimitIdempotent(context.Background(), tenantID, []limiter.Request{req}, id)
	if err != nil {
		t.Fatalf("idempotent decision %s: %v", id.Key, err)
	}
	return r
}

func TestIdempotentDecisionReplaysTheFirstAnswerAndConsumesOnce(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000})
		req := limiter.Request{Name: "api", Key: "alice", Count: 3}
		first := limitIdem(t, e, tenant, req, idem("k1", "body"))
		if first.Replayed || first.Answer.Status != 200 || string(first.Answer.Body) != `{"ok":true,"remaining":7,"retryAfter":null}` {
			t.Fatalf("first attempt: %+v %s", first, first.Answer.Body)
		}
		for range 3 {
			again := limitIdem(t, e, tenant, req, idem("k1", "body"))
			if !again.Replayed || !reflect.DeepEqual(again.Answer, first.Answer) {
				t.Fatalf("retry: %+v, want the first answer %+v replayed", again, first)
			}
		}
		if v := value(t, e, "api", "alice"); v != 7 {
			t.Fatalf("value after 4 attempts of one request = %v, want 7 (one consumption)", v)
		}
		// The same key with another request is refused and consumes nothing.
		if _, err := e.LimitIdempotent(context.Background(), tenant, []limiter.Request{req}, idem("k1", "other body")); !errors.Is(err, limiter.ErrIdempotencyKeyReused) {
			t.Fatalf("same key, other body: %v, want ErrIdempotencyKeyReused", err)
		}
		// Keys are per tenant; a new key decides again.
		if r := limitIdem(t, e, tenant+1, limiter.Request{Name: "x", Config: &limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 1000}}, idem("k1", "other body")); r.Replayed {
			t.Fatalf("another tenant's key k1 replayed: %+v", r)
		}
		if r := limitIdem(t, e, tenant, req, idem("k2", "body")); r.Replayed || string(r.Answer.Body) != `{"ok":true,"remaining":4,"retryAfter":null}` {
			t.Fatalf("a new key: %+v %s", r, r.Answer.Body)
		}
		if v := value(t, e, "api", "alice"); v != 4 {
			t.Fatalf("value = %v, want 4", v)
		}
		// A refusal is an answer too: replayed, not decided again (after a refill it would pass).
		refused := limitIdem(t, e, tenant, limiter.Request{Name: "api", Key: "alice", Count: 9}, idem("k3", "big"))
		clock.Advance(60_000)
		again := limitIdem(t, e, tenant, limiter.Request{Name: "api", Key: "alice", Count: 9}, idem("k3", "big"))
		if refused.Answer.Status != 429 || !again.Replayed || !reflect.DeepEqual(again.Answer, refused.Answer) {
			t.Fatalf("refusal %+v, its retry %+v", refused, again)
		}
	})
}

func TestIdempotentAnswerIsFinalInsideTheTransaction(t *testing.T) {
	// A refusal's retryAfter gets random jitter; the stored answer must hold the jitter the first
	// caller saw, not be rendered before it (or jittered again on replay).
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		var mu sync.Mutex
		n := 0
		e := newEngine(t, d, limiter.Options{Now: clock.Now, IntN: func(max int) int {
			mu.Lock()
			defer mu.Unlock()
			n++
			return (n * 97) % max
		}})
		mustPut(t, e, "j", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 60_000, Jitter: 10_000})
		mustLimit(t, e, limiter.Request{Name: "j", Count: 1})
		var first limiter.IdempotentResult
		for i := range 3 {
			r := limitIdem(t, e, tenant, limiter.Request{Name: "j", Count: 1}, idem("jit", "b"))
			var got struct{ RetryAfter int64 }
			if err := json.Unmarshal(r.Answer.Body, &got); err != nil || got.RetryAfter <= 60_000 {
				t.Fatalf("attempt %d: %s (%v): want the retryAfter 60000 + jitter", i, r.Answer.Body, err)
			}
			if i == 0 {
				first = r
			} else if !reflect.DeepEqual(r.Answer, first.Answer) {
				t.Fatalf("replay %s differs from the first answer %s", r.Answer.Body, first.Answer.Body)
			}
		}
	})
}

func TestIdempotencyKeysExpireAfter24HoursAndAreSwept(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		start := clock.Now().UnixMilli()
		mustPut(t, e, "day", limiter.Definition{Kind: limiter.FixedWindow, Rate: 100, Period: 365 * 86_400_000, Start: &start})
		req := limiter.Request{Name: "day", Key: "k", Count: 1}
		limitIdem(t, e, tenant, req, idem("old", "b"))
		clock.Advance(1000)
		limitIdem(t, e, tenant, req, idem("young", "b"))
		clock.Advance(limiter.IdempotencyTTL.Milliseconds() - 1001)
		if r := limitIdem(t, e, tenant, req, idem("old", "b")); !r.Replayed {
			t.Fatal("a key 1 ms short of 24 hours old was not replayed")
		}
		if n, err := e.SweepIdempotency(context.Background(), 0); err != nil || n != 0 {
			t.Fatalf("sweep before expiry deleted %d (%v)", n, err)
		}
		clock.Advance(1)
		// 24 hours on, "old" is expired: swept, and a retry decides again.
		if n, err := e.SweepIdempotency(context.Background(), 1); err != nil || n != 1 {
			t.Fatalf("sweep at 24 h deleted %d (%v), want 1 (the expired key only)", n, err)
		}
		if rows := testkit.Rows(t, d, "idempotency_keys"); len(rows) != 1 {
			t.Fatalf("after the sweep idempotency_keys holds %d rows, want 1 (young)", len(rows))
		}
		if r := limitIdem(t, e, tenant, req, idem("old", "another body is fine now")); r.Replayed {
			t.Fatal("an expired key was replayed")
		}
		if v := value(t, e, "day", "k"); v != 97 {
			t.Fatalf("value = %v, want 97 (old, young, old again)", v)
		}
		// An expired record not yet swept is replaced, not replayed.
		clock.Advance(1000)
		if r := limitIdem(t, e, tenant, req, idem("young", "b")); r.Replayed {
			t.Fatal("an expired, unswept key was replayed")
		}
		if r := limitIdem(t, e, tenant, req, idem("young", "b")); !r.Replayed {
			t.Fatal("the replaced key does not replay")
		}
		if v := value(t, e, "day", "k"); v != 96 {
			t.Fatalf("value = %v, want 96", v)
		}
	})
}

// TestABulkRetryLeavesItsKeysExpiryAlone: a bulk request's key expires 24 hours after its
// first decision; a retry that replays it does not keep the key from every other request for
// another 24 hours.
func TestABulkRetryLeavesItsKeysExpiryAlone(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		mustPut(t, e, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000})
		ctx := context.Background()
		bulk := func(body string) limiter.Outcome {
			t.Helper()
			it := idem("K", body)
			if err := e.ClaimIdempotencyKey(ctx, tenant, "K", it.Hash); err != nil {
				t.Fatalf("claim for %q: %v", body, err)
			}
			return e.EachIdempotent(ctx, tenant, []limiter.Request{{Name: "api", Key: "a", Count: 1}}, nil, []*limiter.Idempotency{it})[0]
		}
		if o := bulk("bulk one"); o.Err != nil || o.Replayed {
			t.Fatalf("first attempt: %+v", o)
		}
		clock.Advance((23 * time.Hour).Milliseconds())
		if o := bulk("bulk one"); o.Err != nil || !o.Replayed {
			t.Fatalf("the retry 23 hours on did not replay: %+v", o)
		}
		clock.Advance((time.Hour).Milliseconds()) // 24 hours after the only decision
		if _, err := e.LimitIdempotent(ctx, tenant, []limiter.Request{{Name: "api", Key: "b", Count: 1}}, idem("K", "single")); err != nil {
			t.Fatalf("24 hours after the bulk request's decision, a single decision under its key: %v", err)
		}
	})
}

// concurrentRetries sends n copies of one idempotent request at once, spread over engines, and
// checks that exactly one decided, every answer is the first one, and the limit counted one.
func concurrentRetries(t *testing.T, engines []*limiter.Engine, n int, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := limiter.Request{Name: "once", Key: key, Count: 1}
	results := make([]limiter.IdempotentResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = engines[i%len(engines)].LimitIdempotent(ctx, tenant, []limiter.Request{req}, idem("retry-"+key, "b"))
		}()
	}
	close(start)
	wg.Wait()
	decided := 0
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("attempt %d: %v", i, errs[i])
		}
		if !r.Replayed {
			decided++
		}
		if string(r.Answer.Body) != `{"ok":true,"remaining":99,"retryAfter":null}` {
			t.Fatalf("attempt %d answered %s, want the first decision's answer (remaining 99)", i, r.Answer.Body)
		}
	}
	if decided != 1 {
		t.Fatalf("%d of %d concurrent retries decided, want exactly 1", decided, n)
	}
	if v := value(t, engines[0], "once", key); v != 99 {
		t.Fatalf("stored value after %d concurrent retries = %v, want 99 (one consumption)", n, v)
	}
}

// mustPutOnce defines "once": 100 per hour in a window that began a second ago (nothing refills
// during the test, so the value counts consumptions exactly).
func mustPutOnce(t *testing.T, e *limiter.Engine) {
	t.Helper()
	start := time.Now().UnixMilli() - 1000
	mustPut(t, e, "once", limiter.Definition{Kind: limiter.FixedWindow, Rate: 100, Period: 3_600_000, Start: &start})
}

func TestConcurrentIdempotentRetriesConsumeOnce(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := newEngine(t, d, limiter.Options{})
		mustPutOnce(t, e)
		for round := range 3 {
			concurrentRetries(t, []*limiter.Engine{e}, 32, fmt.Sprint("k", round))
		}
	})
}

func TestConcurrentIdempotentRetriesOnTwoInstancesConsumeOnce(t *testing.T) {
	url := testkit.NewDatabase(t)
	ctx := context.Background()
	var engines []*limiter.Engine
	var dbs []*db.DB
	for i := range 2 {
		d, err := db.Open(ctx, url, db.Options{MaxOpenConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		dbs = append(dbs, d)
		if i == 0 {
			if err := d.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// MaxGroup 1: every retry is its own transaction, so that first attempts really race in
		// the database (not only as twins in one group).
		engines = append(engines, newEngine(t, d, limiter.Options{MaxGroup: 1 + i*63}))
	}
	mustPutOnce(t, engines[0])
	for round := range 5 {
		concurrentRetries(t, engines, 32, fmt.Sprint("k", round))
	}
	// The retries are the first attempts that raced in the database and lost (then replayed).
	t.Logf("serialization retries of the two instances: %d and %d", dbs[0].Retries(), dbs[1].Retries())
}

func TestIdempotentRetriesInOneGroupDecideOnce(t *testing.T) {
	// The worker starts only once every attempt is queued, so all of them share one group
	// transaction: the first decides, the others replay its answer; the same key with another
	// body in the same group is refused.
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		e := limiter.NewEngine(d, limiter.Options{})
		start := time.Now().UnixMilli() - 1000
		if _, _, err := e.PutDefinition(context.Background(), tenant, "once", limiter.Definition{Kind: limiter.FixedWindow, Rate: 100, Period: 3_600_000, Start: &start}, nil); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const n = 32
		req := limiter.Request{Name: "once", Key: "group", Count: 1}
		results := make([]limiter.IdempotentResult, n+1)
		errs := make([]error, n+1)
		var wg sync.WaitGroup
		send := func(i int, body string) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = e.LimitIdempotent(ctx, tenant, []limiter.Request{req}, idem("same", body))
			}()
		}
		queued := func(want int) {
			for e.Queued() < want {
				if ctx.Err() != nil {
					t.Fatalf("waited a minute for %d attempts to queue; %d did", want, e.Queued())
				}
				runtime.Gosched()
			}
		}
		for i := range n {
			send(i, "b")
		}
		queued(n)
		send(n, "another body") // last in the group: the key is taken by then
		queued(n + 1)
		testkit.Run(t, e.Run)
		wg.Wait()
		decided, replayed, reused := 0, 0, 0
		for i, r := range results {
			switch {
			case errors.Is(errs[i], limiter.ErrIdempotencyKeyReused):
				reused++
			case errs[i] != nil:
				t.Fatalf("attempt %d: %v", i, errs[i])
			case r.Replayed:
				replayed++
			default:
				decided++
			}
			if errs[i] == nil && string(r.Answer.Body) != `{"ok":true,"remaining":99,"retryAfter":null}` {
				t.Fatalf("attempt %d answered %s, want the first decision's answer", i, r.Answer.Body)
			}
		}
		if decided != 1 || replayed != n-1 || reused != 1 {
			t.Fatalf("decided %d, replayed %d, refused as reused %d; want 1, %d, 1", decided, replayed, reused, n-1)
		}
		if v := value(t, e, "once", "group"); v != 99 {
			t.Fatalf("value = %v, want 99 (one consumption)", v)
		}
		if st := e.GroupStats(); st.Groups != 1 || st.Jobs != n+1 {
			t.Fatalf("%d groups carried %d decisions; want all %d in one group", st.Groups, st.Jobs, n+1)
		}
	})
}

func TestFirstAttemptsRacingOnTwoInstancesDecideOnce(t *testing.T) {
	// Two instances each take the same request as a first attempt and hold their transactions
	// open until both have read (no stored answer) and decided. Only one may commit: the other's
	// transaction conflicts, is retried, reads the stored answer and replays it.
	url := testkit.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	decided := []chan struct{}{make(chan struct{}), make(chan struct{})}
	var engines []*limiter.Engine
	var dbs []*db.DB
	for i := range 2 {
		d, err := db.Open(ctx, url, db.Options{MaxOpenConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if i == 0 {
			if err := d.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
		}
		e := newEngine(t, d, limiter.Options{})
		var once sync.Once
		limiter.SetAfterDecide(e, func() {
			once.Do(func() { close(decided[i]) })
			select {
			case <-decided[1-i]:
			case <-ctx.Done():
			}
		})
		engines, dbs = append(engines, e), append(dbs, d)
	}
	mustPutOnce(t, engines[0])
	req := limiter.Request{Name: "once", Key: "raced", Count: 1}
	results := make([]limiter.IdempotentResult, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, e := range engines {
		wg.Go(func() {
			results[i], errs[i] = e.LimitIdempotent(ctx, tenant, []limiter.Request{req}, idem("race", "b"))
		})
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("attempts: %v, %v", errs[0], errs[1])
	}
	if results[0].Replayed == results[1].Replayed || !reflect.DeepEqual(results[0].Answer, results[1].Answer) {
		t.Fatalf("results %+v and %+v: want one decided and the other replaying its answer", results[0], results[1])
	}
	if v := value(t, engines[0], "once", "raced"); v != 99 {
		t.Fatalf("value = %v, want 99 (one consumption)", v)
	}
	if r := dbs[0].Retries() + dbs[1].Retries(); r == 0 {
		t.Fatal("no transaction was retried: the two first attempts did not conflict in the database")
	}
}
