// Package migrations embeds the versioned SQL schema, one directory per dialect.
package migrations

import "embed"

// FS holds postgres/*.sql and sqlite/*.sql, applied in order by goose.
//
//go:embed postgres/*.sql sqlite/*.sql
var FS embed.FS
