package testkit

// This file reads query plans: a statement that a background job runs every second or minute
// must not read a whole table, which grows with the service's history (an audit of 2026-11-28
// found five that did, one of them JIT-compiled on every sweep).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
)

// Look is a statement a background job runs, with its arguments.
type Look struct {
	SQL  string
	Args []any
	// WholeIndexes are the partial indexes the statement may read whole: what their WHERE keeps
	// is what it looks for (the waiting deliveries, say), however large the table grows.
	WholeIndexes []string
}

// WholeTableReads returns the parts of look's plan that read a whole table, or a whole index of
// one, rather than a range of an index; none when each table is searched.
//
// On PostgreSQL the statement is planned as a large table would have it, whatever the fresh
// database's sizes: with sequential scans, hash joins and merge joins off, an index that can
// serve it is taken, and a nested loop looks the rows of a batch up one by one. A sequential
// scan left in the plan, an index scan without a condition on the index's first column, or a
// JIT line is reported. On SQLite a SCAN of a table, or of an index, is reported.
func WholeTableReads(t testing.TB, d *db.DB, look Look) []string {
	t.Helper()
	var whole []string
	err := d.Gorm.Transaction(func(tx *gorm.DB) error {
		if d.Dialect == db.SQLite {
			var rows []struct{ Detail string }
			if err := tx.Raw("EXPLAIN QUERY PLAN "+look.SQL, look.Args...).Scan(&rows).Error; err != nil {
				return err
			}
			var plan []string
			for _, r := range rows {
				plan = append(plan, r.Detail)
			}
			for _, line := range plan {
				if sqliteScansATable(t, d, line, plan, look.WholeIndexes) {
					whole = append(whole, line)
				}
			}
			if len(whole) > 0 {
				whole = append(whole, "(the whole plan: "+strings.Join(plan, " | ")+")")
			}
			return nil
		}
		for _, setting := range []string{"enable_seqscan", "enable_hashjoin", "enable_mergejoin"} {
			if err := tx.Exec("SET LOCAL " + setting + " = off").Error; err != nil {
				return err
			}
		}
		var doc string
		if err := tx.Raw("EXPLAIN (FORMAT JSON) "+look.SQL, look.Args...).Row().Scan(&doc); err != nil {
			return err
		}
		var plans []struct {
			Plan pgPlanNode
			JIT  any `json:"JIT"`
		}
		if err := json.Unmarshal([]byte(doc), &plans); err != nil {
			return err
		}
		for _, p := range plans {
			whole = append(whole, pgWholeReads(t, tx, p.Plan, look.WholeIndexes)...)
			if p.JIT != nil {
				whole = append(whole, "JIT compiled")
			}
		}
		if len(whole) > 0 {
			var compact bytes.Buffer
			_ = json.Compact(&compact, []byte(doc))
			whole = append(whole, "(the whole plan: "+compact.String()+")")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("plan %q: %v", look.SQL, err)
	}
	return whole
}

// pgPlanNode is a node of PostgreSQL's JSON plan, with the fields read here.
type pgPlanNode struct {
	NodeType  string       `json:"Node Type"`
	Relation  string       `json:"Relation Name"`
	Index     string       `json:"Index Name"`
	IndexCond string       `json:"Index Cond"`
	Plans     []pgPlanNode `json:"Plans"`
}

// pgWholeReads lists the nodes of the plan under n that read a whole table or index.
func pgWholeReads(t testing.TB, tx *gorm.DB, n pgPlanNode, wholeIndexes []string) []string {
	t.Helper()
	var whole []string
	switch n.NodeType {
	case "Seq Scan":
		whole = append(whole, "Seq Scan on "+n.Relation)
	case "Index Scan", "Index Only Scan", "Bitmap Index Scan":
		if !slices.Contains(wholeIndexes, n.Index) && !conditionOn(n.IndexCond, pgFirstColumn(t, tx, n.Index)) {
			whole = append(whole, fmt.Sprintf("%s using %s with the condition %q", n.NodeType, n.Index, n.IndexCond))
		}
	}
	for _, c := range n.Plans {
		whole = append(whole, pgWholeReads(t, tx, c, wholeIndexes)...)
	}
	return whole
}

// pgFirstColumn is the name of the first column of a PostgreSQL index ("" for an expression).
func pgFirstColumn(t testing.TB, tx *gorm.DB, index string) string {
	t.Helper()
	var column string
	err := tx.Raw(`SELECT a.attname FROM pg_index i
		JOIN pg_class c ON c.oid = i.indexrelid
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE c.relname = ?`, index).Scan(&column).Error
	if err != nil {
		t.Fatalf("the first column of the index %s: %v", index, err)
	}
	return column
}

// conditionOn reports whether an index condition constrains column (an expression index's
// empty name: any condition), so that the index is read for a range rather than whole.
func conditionOn(cond, column string) bool {
	if cond == "" {
		return false
	}
	return column == "" || regexp.MustCompile(`(^|[^a-z0-9_."])`+regexp.QuoteMeta(column)+`([^a-z0-9_"]|$)`).MatchString(cond)
}

// sqliteScansATable reports whether a line of SQLite's query plan scans a table ("SCAN t",
// "SCAN t USING [COVERING] INDEX i", unless i is one of wholeIndexes) rather than a subquery's
// rows. A plan names a table by its alias, which is no table's name: a scanned name that is
// neither a table nor a subquery the plan builds fails the test, so that an alias cannot hide
// a scan.
func sqliteScansATable(t testing.TB, d *db.DB, line string, plan, wholeIndexes []string) bool {
	t.Helper()
	fields := strings.Fields(line)
	if len(fields) < 2 || fields[0] != "SCAN" {
		return false
	}
	name := fields[1]
	var kind string
	if err := d.Gorm.Raw("SELECT type FROM sqlite_master WHERE name = ?", name).Scan(&kind).Error; err != nil {
		t.Fatal(err)
	}
	if kind != "table" {
		for _, l := range plan {
			if l == "CO-ROUTINE "+name || l == "MATERIALIZE "+name || strings.HasPrefix(name, "(subquery-") {
				return false // a subquery's or a common table expression's rows
			}
		}
		t.Fatalf("the plan scans %q, which is neither a table nor a subquery of the plan (an alias?): %s", name, strings.Join(plan, " | "))
	}
	_, index, ok := strings.Cut(line, " INDEX ")
	return !ok || !slices.Contains(wholeIndexes, strings.Fields(index)[0])
}
