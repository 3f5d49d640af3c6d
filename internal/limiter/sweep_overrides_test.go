package limiter

import (
	"context"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestTheSweepCachesOverridesUnderTheirOwnVersion: an override change that commits between the
// sweeper's read of a definition and its read of the overrides must not leave the new overrides
// in the engine's cache under the old version, where a decision whose snapshot still reads the
// old version would take them (numbers the limit did not have yet at its serialization point).
func TestTheSweepCachesOverridesUnderTheirOwnVersion(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		const tenantID = int64(1)
		e := newEngine(t, d, Options{})
		if _, _, err := e.PutDefinition(ctx, tenantID, "api", Definition{Kind: TokenBucket, Rate: 10, Period: 60_000}, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.PutOverride(ctx, tenantID, "api", Override{Match: "k", Rate: ptr(1.0)}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Limit(ctx, tenantID, Request{Name: "api", Key: "k", Count: 1}); err != nil {
			t.Fatal(err)
		}
		before, _, err := loadDefinition(d.Gorm, tenantID, "api")
		if err != nil {
			t.Fatal(err)
		}
		// The decision cached version V's overrides; another instance's sweeper would not have.
		e.overrides.mu.Lock()
		e.overrides.m = nil
		e.overrides.mu.Unlock()
		changed := false
		e.betweenDefinitionAndOverrides = func() {
			if !changed {
				changed = true
				if _, _, err := e.PutOverride(ctx, tenantID, "api", Override{Match: "k", Rate: ptr(5.0)}, nil); err != nil {
					t.Error(err)
				}
			}
		}
		if _, err := e.Sweep(ctx, 100); err != nil {
			t.Fatal(err)
		}
		if !changed {
			t.Fatal("the sweep read no definition: the test proves nothing")
		}
		e.overrides.mu.Lock()
		snap, ok := e.overrides.m[defKey{tenantID, "api"}]
		e.overrides.mu.Unlock()
		if !ok {
			t.Fatal("the sweep cached no overrides: the test proves nothing")
		}
		want := 5.0
		if snap.version == before.OverridesVersion {
			want = 1.0
		}
		if o := snap.index.Lookup("k", 0); o == nil || o.Rate == nil || *o.Rate != want {
			t.Fatalf("the cache holds overrides version %d (before the change: %d) with the override %+v, want rate %v",
				snap.version, before.OverridesVersion, o, want)
		}
	})
}
