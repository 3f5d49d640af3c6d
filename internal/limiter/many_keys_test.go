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

// manyKeys is more keys than one batch of a state drop deletes in these tests (5,000; 20,000
// in production), so that every drop below takes several transactions.
const manyKeys = 12_001

// storeSpentKeys writes n spent keys of name straight into limit_state (value 0 at ts), as n
// decisions would have, and one more under another name that no drop of name may touch.
func storeSpentKeys(t *testing.T, d *db.DB, name string, n int, ts int64) {
	t.Helper()
	rows := make([]map[string]any, 0, n+1)
	for i := range n {
		rows = append(rows, map[string]any{"tenant_id": tenant, "name": name, "key": fmt.Sprintf("k%06d", i), "shard": 0,
			"value": 0.0, "ts": ts, "counters": "", "penalty_until": 0})
	}
	rows = append(rows, map[string]any{"tenant_id": tenant, "name": name + ".other", "key": "k", "shard": 0, "value": 0.0, "ts": ts, "counters": "", "penalty_until": 0})
	if err := d.Gorm.Table("limit_state").CreateInBatches(rows, 500).Error; err != nil {
		t.Fatal(err)
	}
}

// nameRows counts name's rows in limit_state.
func nameRows(t *testing.T, d *db.DB, name string) int64 {
	t.Helper()
	var n int64
	if err := d.Gorm.Raw("SELECT COUNT(*) FROM limit_state WHERE tenant_id = ? AND name = ?", tenant, name).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDroppingTheStateOfManyKeysTakesSeveralTransactions: resetting every key and creating a
// definition over an inline config's state drop every row of a name with more keys than one
// batch takes, batch by batch (they used to delete them in one transaction, which on a limit of
// millions of keys outlasted the retry budget every time): afterwards no row of the name is left,
// every key decides as a full one, and another name's row is untouched. A refused creation drops
// nothing, and a deletion leaves such a state to the sweeper (and the next creation).
func TestDroppingTheStateOfManyKeysTakesSeveralTransactions(t *testing.T) {
	limiter.SetStateBatch(t, 5_000)
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		clock := newClock(1_700_000_000_000)
		e := newEngine(t, d, clock.opts())
		ctx := context.Background()
		def := limiter.Definition{Kind: limiter.FixedWindow, Rate: 3, Period: 3_600_000, Start: ptr(int64(0))}
		spent := func(name, key string) bool {
			t.Helper()
			got, err := e.Check(ctx, tenant, limiter.Request{Name: name, Key: key, Count: 3})
			if err != nil {
				t.Fatal(err)
			}
			return !got.OK
		}
		mustPut(t, e, "big", def)
		storeSpentKeys(t, d, "big", manyKeys, clock.Now().UnixMilli())
		if !spent("big", "k000000") || !spent("big", fmt.Sprintf("k%06d", manyKeys-1)) {
			t.Fatal("the stored keys do not read as spent")
		}
		// Between its batches, the first key (reset already) and the last (not yet) are spent
		// again: a key is reset at one moment, so the first keeps that decision and the last
		// does not.
		batches := 0
		last := fmt.Sprintf("k%06d", manyKeys-1)
		limiter.SetAfterStateBatch(e, func() {
			if batches++; batches == 1 {
				for _, key := range []string{"k000000", last} {
					if got, err := e.Limit(ctx, tenant, limiter.Request{Name: "big", Key: key, Count: 3}); err != nil || got.OK != (key == "k000000") {
						t.Errorf("between the batches, %s: ok=%v %v", key, got.OK, err)
					}
				}
			}
		})
		if err := e.Reset(ctx, tenant, "big", nil, nil); err != nil {
			t.Fatalf("reset of every key: %v", err)
		}
		limiter.SetAfterStateBatch(e, nil)
		if batches < 2 {
			t.Fatalf("the reset of %d keys took %d transaction(s) followed by another, want at least 2", manyKeys, batches)
		}
		if n := nameRows(t, d, "big"); n != 1 {
			t.Fatalf("after the reset of every key: %d rows left, want the one decided after its batch", n)
		}
		if !spent("big", "k000000") || spent("big", last) || spent("big", "k010000") || nameRows(t, d, "big.other") != 1 {
			t.Fatal("after the reset: want the key decided after its batch spent, every other key full, and another name's row kept")
		}

		storeSpentKeys(t, d, "gone", manyKeys, clock.Now().UnixMilli())
		mustPut(t, e, "gone", def) // over an inline config's state
		if n := nameRows(t, d, "gone"); n != 0 || spent("gone", "k000000") || spent("gone", fmt.Sprintf("k%06d", manyKeys-1)) {
			t.Fatalf("a creation over %d keys an inline config left: %d rows left", manyKeys, n)
		}
		// A refused creation drops nothing: its dry run refuses it before any batch (here: a
		// definition that is its own parent).
		storeSpentKeys(t, d, "inline", manyKeys, clock.Now().UnixMilli())
		bad := def
		bad.Parents = []limiter.Parent{{Name: "inline", Key: "k"}}
		if _, _, err := e.PutDefinition(ctx, tenant, "inline", bad, nil); err == nil {
			t.Fatal("a definition that is its own parent was created")
		}
		if n := nameRows(t, d, "inline"); n != manyKeys {
			t.Fatalf("a refused creation over %d keys an inline config left: %d rows left", manyKeys, n)
		}
		// Nor does one its caller's hook refuses in the creating transaction (the dashboard's
		// "this limit was deleted while you edited it", a failed audit entry).
		refuse := errors.New("refused by the hook")
		if _, _, err := e.PutDefinition(ctx, tenant, "inline", def, func(*gorm.DB, limiter.DefinitionChange) error { return refuse }); !errors.Is(err, refuse) {
			t.Fatalf("a creation its hook refuses: %v", err)
		}
		if n := nameRows(t, d, "inline"); n != manyKeys {
			t.Fatalf("a creation its hook refused over %d keys an inline config left: %d rows left", manyKeys, n)
		}

		// A deletion of a definition with more rows than one batch leaves them (an inline config
		// of the name reads them, and admits no more for it); a creation drops them.
		mustPut(t, e, "gone2", def)
		storeSpentKeys(t, d, "gone2", manyKeys, clock.Now().UnixMilli())
		if err := e.DeleteDefinition(ctx, tenant, "gone2", nil); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if n := nameRows(t, d, "gone2"); n != manyKeys {
			t.Fatalf("after the deletion: %d rows, want the %d left to be swept", n, manyKeys)
		}
		if got, err := e.Limit(ctx, tenant, limiter.Request{Name: "gone2", Key: "k000000", Count: 1, Config: &def}); err != nil || got.OK {
			t.Fatalf("an inline config on a spent key the deletion left: ok=%v, %v", got.OK, err)
		}
		mustPut(t, e, "gone2", def)
		if n := nameRows(t, d, "gone2"); n != 0 || spent("gone2", "k000000") || nameRows(t, d, "gone2.other") != 1 {
			t.Fatalf("a creation over what the deletion left: %d rows left", n)
		}
	})
}
