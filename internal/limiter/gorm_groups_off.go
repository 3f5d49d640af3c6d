//go:build !sluice_gorm_groups

package limiter

// forceGormGroups: see gorm_groups_on.go.
const forceGormGroups = false
