package tenants

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestDeleteTenantDoesNotHoldUpOtherTenantsDecisions deletes a tenant with many state rows while
// another tenant's decisions run through the engine's group commit: every one of those decisions
// succeeds (the bucket never runs out) and no transaction is retried or gives up. On SQLite and
// PostgreSQL.
func TestDeleteTenantDoesNotHoldUpOtherTenantsDecisions(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		doomed, kept := e.tenant(t, "doomed"), e.tenant(t, "kept")
		seedTenant(t, e, doomed.ID, 5*deleteBatch)
		engine := limiter.NewEngine(e.db, limiter.Options{})
		testkit.Run(t, engine.Run)
		capacity := 1e9 // never runs out: every decision must be allowed
		if _, _, err := engine.PutDefinition(e.ctx, kept.ID, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 1000, Capacity: &capacity}, nil); err != nil {
			t.Fatal(err)
		}
		givenUp, retried := e.db.GiveUps(), e.db.Retries()
		first := make(chan struct{})
		done := make(chan struct{})
		var decided, failed atomic.Int64
		var errs sync.Map
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					d, err := engine.Limit(context.Background(), kept.ID, limiter.Request{Name: "api", Key: fmt.Sprintf("k%d-%d", w, i%50), Count: 1})
					if err != nil || !d.OK {
						failed.Add(1)
						errs.Store(fmt.Sprint(err), true)
					}
					if decided.Add(1) == 1 {
						close(first)
					}
					select {
					case <-done:
						return
					default:
					}
				}
			})
		}
		<-first // decisions are under way
		must(t, e.svc.DeleteTenant(e.ctx, doomed.ID, "tester"))
		during := decided.Load()
		close(done)
		wg.Wait()
		if failed.Load() != 0 {
			var seen []string
			errs.Range(func(k, _ any) bool { seen = append(seen, k.(string)); return true })
			t.Fatalf("%d of %d decisions of the other tenant failed during the deletion: %v", failed.Load(), decided.Load(), seen)
		}
		if g := e.db.GiveUps() - givenUp; g != 0 {
			t.Fatalf("%d transactions gave up during the deletion", g)
		}
		// The deletion's batches run outside serializable isolation, so they cannot make the
		// decisions' transactions (or their own) fail with serialization conflicts and retry.
		if r := e.db.Retries() - retried; r != 0 {
			t.Errorf("%d transactions were retried during the deletion", r)
		}
		if n := tenantRowCounts(t, e, doomed.ID)["limit_state"]; n != 0 {
			t.Fatalf("%d state rows of the deleted tenant left", n)
		}
		t.Logf("%d decisions of the other tenant ran while the deletion ran", during)
	})
}
