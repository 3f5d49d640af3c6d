package limiter_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestChangesBesideAHammeredKeyAreNotStarved: while two instances decide on one key as fast as
// they can, a third changes the limit's kind (which drops its state), settles and releases holds
// on the key, resets the key and the whole limit, and deletes and re-creates the limit. Each of
// those reads the key's row and then writes or deletes it in later statements; a decision
// committed in between made every attempt a serialization failure, so a busy key could starve
// them until the retry budget gave up (503). The third attempt now takes the state table's
// writers' lock first, so it cannot lose again: with three attempts allowed (the default is 40),
// every change succeeds. (Without the lock, the first change failed in every run.)
func TestChangesBesideAHammeredKeyAreNotStarved(t *testing.T) {
	url := testkit.NewDatabase(t) // PostgreSQL: SQLite has one writer, nothing to starve
	ctx := context.Background()
	clock := newClock(1_700_000_000_000)
	engines := twoEngines(t, url, clock)
	adminDB, err := db.Open(ctx, url, db.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adminDB.Close() })
	adminDB.Retry.MaxAttempts = 3
	admin := newEngine(t, adminDB, clock.opts())

	bucket := limiter.Definition{Kind: limiter.TokenBucket, Rate: 1e9, Period: 60_000}
	window := limiter.Definition{Kind: limiter.FixedWindow, Rate: 1e9, Period: 60_000}
	mustPut(t, engines[0], "hot", bucket)

	stop := make(chan struct{})
	decided := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer func() { // before the engines stop: a decision cut off by that is not this test's failure
		close(stop)
		wg.Wait()
	}()
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := engines[i%2]
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := e.Limit(ctx, tenant, limiter.Request{Name: "hot", Key: "k", Count: 1})
				if err != nil && !errors.Is(err, limiter.ErrLimitNotFound) {
					t.Errorf("a decision on the hammered key: %v", err)
					return
				}
				select {
				case decided <- struct{}{}:
				default:
				}
			}
		}()
	}
	// Each change waits until decisions have been made since the last one, so every change
	// meets a key that is being written.
	waitForDecisions := func(what string) {
		t.Helper()
		deadline := time.After(time.Minute)
		for range 20 {
			select {
			case <-decided:
			case <-deadline:
				t.Fatalf("waited a minute for 20 decisions on the hammered key before %s", what)
			}
		}
	}
	key := "k"
	for round := range 6 {
		waitForDecisions("a kind change")
		def := window
		if round%2 == 1 {
			def = bucket
		}
		if _, _, err := admin.PutDefinition(ctx, tenant, "hot", def, nil); err != nil {
			t.Fatalf("round %d: changing the kind: %v", round, err)
		}
		waitForDecisions("a hold")
		h := mustHold(t, engines[0], 60_000, limiter.HoldLimit{Name: "hot", Key: key, Count: 5})
		waitForDecisions("settling the hold")
		if _, err := admin.SettleHold(ctx, tenant, h.ID, []float64{2}); err != nil {
			t.Fatalf("round %d: settling a hold: %v", round, err)
		}
		waitForDecisions("a hold to release")
		h = mustHold(t, engines[0], 60_000, limiter.HoldLimit{Name: "hot", Key: key, Count: 5})
		waitForDecisions("releasing the hold")
		if err := admin.ReleaseHold(ctx, tenant, h.ID); err != nil {
			t.Fatalf("round %d: releasing a hold: %v", round, err)
		}
		waitForDecisions("a reset of the key")
		if err := admin.Reset(ctx, tenant, "hot", &key, nil); err != nil {
			t.Fatalf("round %d: resetting the key: %v", round, err)
		}
		waitForDecisions("a reset of the limit")
		if err := admin.Reset(ctx, tenant, "hot", nil, nil); err != nil {
			t.Fatalf("round %d: resetting the limit: %v", round, err)
		}
		waitForDecisions("deleting the limit")
		if err := admin.DeleteDefinition(ctx, tenant, "hot", nil); err != nil {
			t.Fatalf("round %d: deleting the limit: %v", round, err)
		}
		if _, _, err := admin.PutDefinition(ctx, tenant, "hot", bucket, nil); err != nil {
			t.Fatalf("round %d: re-creating the limit: %v", round, err)
		}
	}
}
