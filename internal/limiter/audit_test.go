package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestDefinitionChangeHookRunsInTheChangesTransaction: PutDefinition and DeleteDefinition call
// their hook inside their transaction, after the write (it reads the new row through tx), with
// the definition before and after as that transaction saw them; the hook's error rolls the
// change back. On both dialects.
func TestDefinitionChangeHookRunsInTheChangesTransaction(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		e := newEngine(t, d, limiter.Options{})
		errHook := errors.New("the hook failed")
		var seen []string // each call: the action, its detail and the rate the transaction holds
		hook := func(fail bool) limiter.OnDefinitionChange {
			return func(tx *gorm.DB, ch limiter.DefinitionChange) error {
				var rates []float64
				if err := tx.Raw("SELECT rate FROM limit_definitions WHERE tenant_id = ? AND name = ?", ch.TenantID, ch.Name).Scan(&rates).Error; err != nil {
					return err
				}
				seen = append(seen, ch.Action()+" "+ch.Detail()+" | stored "+fmt.Sprint(rates))
				if fail {
					return errHook
				}
				return nil
			}
		}
		bucket := func(rate float64) limiter.Definition {
			return limiter.Definition{Kind: limiter.TokenBucket, Rate: rate, Period: 1000}
		}
		if _, _, err := e.PutDefinition(ctx, tenant, "api", bucket(10), hook(false)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.PutDefinition(ctx, tenant, "api", bucket(20), hook(true)); !errors.Is(err, errHook) {
			t.Fatalf("a replacement whose hook failed: %v, want the hook's error", err)
		}
		if err := e.DeleteDefinition(ctx, tenant, "api", hook(true)); !errors.Is(err, errHook) {
			t.Fatalf("a deletion whose hook failed: %v, want the hook's error", err)
		}
		if got, err := e.GetDefinition(ctx, tenant, "api"); err != nil || got.Definition.Rate != 10 {
			t.Fatalf("after the failed hooks: %+v %v, want the first definition (rate 10)", got, err)
		}
		if err := e.DeleteDefinition(ctx, tenant, "api", hook(false)); err != nil {
			t.Fatal(err)
		}
		if _, err := e.GetDefinition(ctx, tenant, "api"); !limiter.IsNotFound(err) {
			t.Fatalf("after the deletion: %v, want not found", err)
		}
		want := []string{
			"limit.create token bucket rate=10 period=1000 | stored [10]",
			"limit.update token bucket rate=10 period=1000 → token bucket rate=20 period=1000 | stored [20]",
			"limit.delete token bucket rate=10 period=1000 | stored []",
			"limit.delete token bucket rate=10 period=1000 | stored []",
		}
		if len(seen) != len(want) {
			t.Fatalf("the hook saw %q, want %q", seen, want)
		}
		for i := range want {
			if seen[i] != want[i] {
				t.Errorf("call %d: the hook saw %q, want %q", i, seen[i], want[i])
			}
		}
	})
}
