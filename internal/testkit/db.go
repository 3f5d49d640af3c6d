// Package testkit is what tests (and the benchmark) share, and nothing else imports: real,
// freshly migrated databases of every dialect (Each, Open), a throwaway PostgreSQL server
// (Start, Main; the withpg command runs `make test` beside one), the checks of DESIGN §3.4's
// bounds over admission histories observed from outside the engine (TokenBucket), and the
// check that a background job's statement reads through an index (WholeTableReads).
package testkit

// This file opens real databases: a SQLite file in the test's temporary directory, or a new
// database on the PostgreSQL server of TEST_DATABASE_URL.

import (
	"context"
	"database/sql"
	"fmt"
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

// Cell is one stored value, as text.
type Cell struct {
	Column, Text string
}

// Rows returns every row of table as text, column by column (NULL as ""), for tests that search
// what is stored for what must not be there (a secret, a raw session ID).
func Rows(t testing.TB, d *db.DB, table string) [][]Cell {
	t.Helper()
	rows, err := d.SQL.QueryContext(context.Background(), `SELECT * FROM "`+table+`"`)
	if err != nil {
		t.Fatalf("testkit: rows of %s: %v", table, err)
	}
	cols, vals := ScanRows(t, rows)
	var out [][]Cell
	for _, r := range vals {
		row := make([]Cell, len(cols))
		for i, v := range r {
			row[i].Column = cols[i]
			switch v := v.(type) {
			case nil:
			case []byte:
				row[i].Text = string(v)
			default:
				row[i].Text = fmt.Sprint(v)
			}
		}
		out = append(out, row)
	}
	return out
}

// ScanRows reads every row of rows, each value as the driver gives it (nil for NULL), closes
// rows and fails t on an error.
func ScanRows(t testing.TB, rows *sql.Rows) (cols []string, vals [][]any) {
	t.Helper()
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		row := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range row {
			ptrs[i] = &row[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		vals = append(vals, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return cols, vals
}

// Texts is every value of every row of table, as text.
func Texts(t testing.TB, d *db.DB, table string) []string {
	t.Helper()
	var out []string
	for _, row := range Rows(t, d, table) {
		for _, c := range row {
			out = append(out, c.Text)
		}
	}
	return out
}

// Tables lists the tables of d.
func Tables(t testing.TB, d *db.DB) []string {
	t.Helper()
	q := `SELECT name FROM sqlite_master WHERE type = 'table'`
	if d.Dialect == db.Postgres {
		q = `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()`
	}
	var tables []string
	if err := d.Gorm.Raw(q).Scan(&tables).Error; err != nil {
		t.Fatal(err)
	}
	return tables
}
