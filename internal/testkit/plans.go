package testkit

// This file reads query plans: a statement that a background job runs every second or minute
// must not read a whole table, which grows with the service's history (an audit of 2026-11-28
// found five that did, one of them JIT-compiled on every sweep).

import (
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
)

// WholeTableReads returns the lines of statement's plan (run with args) that read a whole table,
// or a whole index of one, rather than a range of an index; none when each table is searched.
//
// On PostgreSQL the statement is planned with sequential scans off, so that an index that can
// serve it is taken whatever the tables' sizes (a fresh database's are empty), and a sequential
// scan left in the plan means that no index can; a JIT line is reported too. On SQLite, a SCAN
// of a table, or of an index that is not partial, is a whole-table read; a SCAN of a partial
// index reads the rows its WHERE keeps, which is what such an index is for.
func WholeTableReads(t testing.TB, d *db.DB, statement string, args ...any) []string {
	t.Helper()
	var plan []string
	err := d.Gorm.Transaction(func(tx *gorm.DB) error {
		if d.Dialect == db.SQLite {
			var rows []struct{ Detail string }
			if err := tx.Raw("EXPLAIN QUERY PLAN "+statement, args...).Scan(&rows).Error; err != nil {
				return err
			}
			for _, r := range rows {
				plan = append(plan, r.Detail)
			}
			return nil
		}
		if err := tx.Exec("SET LOCAL enable_seqscan = off").Error; err != nil {
			return err
		}
		return tx.Raw("EXPLAIN "+statement, args...).Scan(&plan).Error
	})
	if err != nil {
		t.Fatalf("plan %q: %v", statement, err)
	}
	var whole []string
	for _, line := range plan {
		if d.Dialect == db.Postgres {
			if strings.Contains(line, "Seq Scan") || strings.HasPrefix(strings.TrimSpace(line), "JIT") {
				whole = append(whole, line)
			}
			continue
		}
		if sqliteReadsAWholeTable(t, d, line) {
			whole = append(whole, line)
		}
	}
	if len(whole) > 0 {
		whole = append(whole, "(the whole plan: "+strings.Join(plan, " | ")+")")
	}
	return whole
}

// sqliteReadsAWholeTable reports whether a line of SQLite's query plan scans a table ("SCAN t",
// "SCAN t USING [COVERING] INDEX i") rather than a subquery's rows, unless i is partial. A plan
// names a table by its alias: the statements checked give their tables none.
func sqliteReadsAWholeTable(t testing.TB, d *db.DB, line string) bool {
	t.Helper()
	fields := strings.Fields(line)
	if len(fields) < 2 || fields[0] != "SCAN" {
		return false
	}
	var kind string
	if err := d.Gorm.Raw("SELECT type FROM sqlite_master WHERE name = ?", fields[1]).Scan(&kind).Error; err != nil {
		t.Fatal(err)
	}
	if kind != "table" {
		return false // a subquery's or a common table expression's rows
	}
	_, index, ok := strings.Cut(line, " INDEX ")
	if !ok {
		return true
	}
	var definition *string // NULL for the index of a primary key or UNIQUE constraint
	if err := d.Gorm.Raw("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?", strings.Fields(index)[0]).Scan(&definition).Error; err != nil {
		t.Fatal(err)
	}
	return definition == nil || !strings.Contains(strings.ToUpper(*definition), " WHERE ")
}
