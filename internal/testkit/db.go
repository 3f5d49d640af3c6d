// Package testkit is what tests (and the benchmark) share, and nothing else imports: real,
// freshly migrated databases of every dialect (Each, Open), a throwaway PostgreSQL server
// (Start, Main; the withpg command runs `make test` beside one), and the checks of DESIGN
// §3.4's bounds over admission histories observed from outside the engine (TokenBucket).
package testkit

// This file opens real databases: a SQLite file in the test's temporary directory, or a new
// database on the PostgreSQL server of TEST_DATABASE_URL.

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
)

// URL returns the URL of a fresh, empty database of dialect for t, removed when t ends.
func URL(t testing.TB, dialect db.Dialect) string {
	t.Helper()
	if dialect == db.Postgres {
		return NewDatabase(t)
	}
	return "sqlite:" + filepath.Join(t.TempDir(), "sluice.db")
}

// Open opens and migrates a fresh database of dialect, closed when t ends.
func Open(t testing.TB, dialect db.Dialect) *db.DB {
	t.Helper()
	return OpenURL(t, URL(t, dialect))
}

// OpenURL opens and migrates the database at url, closed when t ends.
func OpenURL(t testing.TB, url string) *db.DB {
	t.Helper()
	d, err := db.Open(context.Background(), url, db.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return d
}

// Dialects are the databases every store test runs against.
var Dialects = []db.Dialect{db.SQLite, db.Postgres}

// Each runs fn as a parallel subtest against a fresh database of every dialect.
func Each(t *testing.T, fn func(t *testing.T, d *db.DB)) {
	t.Helper()
	for _, dialect := range Dialects {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			fn(t, Open(t, dialect))
		})
	}
}

// EachURL runs fn as a parallel subtest with the URL of a fresh, empty database of every
// dialect, for tests that open it themselves (an application, two instances on one database).
func EachURL(t *testing.T, fn func(t *testing.T, url string)) {
	t.Helper()
	for _, dialect := range Dialects {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			fn(t, URL(t, dialect))
		})
	}
}
