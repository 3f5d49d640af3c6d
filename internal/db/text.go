package db

import (
	"strings"
	"unicode/utf8"
)

// ComparableText reports whether s can be a text value in a query on both databases: valid
// UTF-8 without NUL bytes. PostgreSQL refuses anything else with an error (where a lookup
// should find no row), so a lookup of such a value is answered as not found without asking.
func ComparableText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }
