//go:build sluice_gorm_groups

package limiter

// forceGormGroups is set by the sluice_gorm_groups build tag, for the benchmark only
// (docs/performance.md): PostgreSQL decisions then take the GORM path that SQLite uses.
const forceGormGroups = true
