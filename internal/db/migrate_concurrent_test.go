package db_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestConcurrentMigrateBothSucceed: instances started together with MIGRATE=auto (or the server
// and a CLI command opening a new SQLite file at once) each run Migrate on the same database.
// Every one of them must succeed and leave the schema at the latest version, both when only the
// newest migration is pending (an upgrade) and from an empty database. Each case runs a few
// rounds: one lost race is enough to fail.
func TestConcurrentMigrateBothSucceed(t *testing.T) {
	const rounds = 3
	for _, dialect := range testkit.Dialects {
		for _, tc := range []struct {
			name string
			from int64 // 0: an empty database
		}{{"upgrade", 19}, {"empty", 0}} {
			t.Run(fmt.Sprintf("%s/%s", dialect, tc.name), func(t *testing.T) {
				t.Parallel()
				for round := range rounds {
					url := testkit.URL(t, dialect)
					if tc.from > 0 {
						seed := openURL(t, url)
						if _, err := migrator(t, seed, dialect).UpTo(context.Background(), tc.from); err != nil {
							t.Fatalf("migrate to version %d: %v", tc.from, err)
						}
					}
					instances := []*db.DB{openURL(t, url), openURL(t, url)}
					start := make(chan struct{})
					errs := make([]error, len(instances))
					var wg sync.WaitGroup
					for i, d := range instances {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							errs[i] = d.Migrate(context.Background())
						}()
					}
					close(start)
					wg.Wait()
					for i, err := range errs {
						if err != nil {
							t.Errorf("round %d: instance %d: Migrate: %v", round, i, err)
						}
					}
					for i, d := range instances {
						if err := d.CheckSchema(context.Background()); err != nil {
							t.Errorf("round %d: instance %d after the concurrent migration: %v", round, i, err)
						}
					}
					if t.Failed() {
						return
					}
				}
			})
		}
	}
}

// openURL opens the database at url without migrating it, closed when t ends.
func openURL(t *testing.T, url string) *db.DB {
	t.Helper()
	d, err := db.Open(context.Background(), url, db.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}
