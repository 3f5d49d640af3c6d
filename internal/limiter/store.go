package limiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// definitionRow is the stored form of a definition (table limit_definitions).
type definitionRow struct {
	TenantID    int64  `gorm:"primaryKey"`
	Name        string `gorm:"primaryKey"`
	Kind        string
	Rate        float64
	Period      int64
	Capacity    *float64
	MaxReserved *float64
	Shards      int
	Start       *int64 `gorm:"column:start"`
	Resolution  *int
	Jitter      int64
	IPFallback  bool `gorm:"column:ip_fallback"`
	Mode        string
	Penalty     int64
	CreatedAt   time.Time `gorm:"autoCreateTime:false"`
	UpdatedAt   time.Time `gorm:"autoUpdateTime:false"`
	Calendar    *string
	TimeZone    *string `gorm:"column:time_zone"`
	AnchorDay   *int
	Parents     string // JSON [{"name", "key"}], '' for none
	// OverridesVersion tags the limit's overrides (overrides.go); only override changes write it.
	OverridesVersion int64 `gorm:"column:overrides_version"`
	LeaseTTL         int64 `gorm:"column:lease_ttl"` // concurrency only, else 0
}

// parentJSON is the stored form of one parent.
type parentJSON struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

func encodeParents(ps []algo.Parent) string {
	if len(ps) == 0 {
		return ""
	}
	out := make([]parentJSON, len(ps))
	for i, p := range ps {
		out[i] = parentJSON(p)
	}
	b, _ := json.Marshal(out) // strings only: cannot fail
	return string(b)
}

// decodeParents reads the parents column. A column that cannot be read (never written so by this
// code) yields a parent that no limit can be called, so decisions on the child fail closed with
// limit_not_found instead of dropping a budget.
func decodeParents(s string) []algo.Parent {
	if s == "" {
		return nil
	}
	var ps []parentJSON
	if err := json.Unmarshal([]byte(s), &ps); err != nil {
		return []algo.Parent{{Name: "(unreadable parents)", Key: "-"}}
	}
	out := make([]algo.Parent, len(ps))
	for i, p := range ps {
		out[i] = algo.Parent(p)
	}
	return out
}

func (definitionRow) TableName() string { return "limit_definitions" }

// StoredDefinition is a definition with its name and timestamps.
type StoredDefinition struct {
	Name       string
	Definition Definition
	CreatedAt  time.Time
	UpdatedAt  time.Time
	// OverridesVersion is the version of the limit's overrides; 0 when it has none.
	OverridesVersion int64
}

func (r definitionRow) toDomain() StoredDefinition {
	d := Definition{
		Kind: Kind(r.Kind), Rate: r.Rate, Period: r.Period, Capacity: r.Capacity, MaxReserved: r.MaxReserved,
		Shards: r.Shards, Start: r.Start, Jitter: r.Jitter, IPFallback: r.IPFallback,
		Mode: algo.Mode(r.Mode), Penalty: r.Penalty, LeaseTTL: r.LeaseTTL,
	}
	if r.Resolution != nil {
		d.Resolution = *r.Resolution
	}
	if r.Calendar != nil {
		d.Calendar = algo.Calendar(*r.Calendar)
	}
	if r.TimeZone != nil {
		d.TimeZone = *r.TimeZone
	}
	if r.AnchorDay != nil {
		d.AnchorDay = *r.AnchorDay
	}
	d.Parents = decodeParents(r.Parents)
	return StoredDefinition{Name: r.Name, Definition: d.Normalized(), CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		OverridesVersion: r.OverridesVersion}
}

// PutDefinition creates or replaces the definition called name. created tells which. then, when
// not nil, is called in the same transaction once the definition is written.
func (e *Engine) PutDefinition(ctx context.Context, tenantID int64, name string, def Definition, then OnDefinitionChange) (StoredDefinition, bool, error) {
	if !ValidName(name) {
		return StoredDefinition{}, false, invalidRequest("name", "must match ^[A-Za-z0-9_.:-]{1,128}$")
	}
	if err := def.Validate(); err != nil {
		return StoredDefinition{}, false, fromAlgo(err)
	}
	def = def.Normalized()
	maxLimits, err := e.quotaMax(ctx, tenantID, "limits")
	if err != nil {
		return StoredDefinition{}, false, fmt.Errorf("limiter: put definition: %w", err)
	}
	var out StoredDefinition
	var created bool
	for {
		err = e.db.Serializable(ctx, func(tx *gorm.DB) error {
			if err := e.decisionSettings(tx, false); err != nil {
				return err
			}
			now := e.wallClock().UTC().Truncate(time.Microsecond) // PostgreSQL's precision, on both dialects
			old, found, err := loadDefinition(tx, tenantID, name)
			if err != nil {
				return err
			}
			created = !found
			return e.writeDefinition(tx, tenantID, name, def, old, found, now, maxLimits, then, &out)
		})
		if !errors.Is(err, errManyOrphans) {
			break
		}
		// The creation would be made, but the state it drops is more than one transaction
		// should delete: most of it goes in batches first, then the creation again.
		if err := e.dropOrphanState(ctx, tenantID, name); err != nil {
			return StoredDefinition{}, false, fmt.Errorf("limiter: put definition: %w", err)
		}
	}
	if err != nil {
		return StoredDefinition{}, false, fmt.Errorf("limiter: put definition: %w", err)
	}
	return out, created, nil
}

// errManyOrphans rolls back a creation that passed every check (its caller's hook included) but
// would drop more state rows than one batch of dropStateBatch in its own transaction: what an
// inline config or a deleted definition left under the name. Only then are they dropped in
// batches (a refused creation must not drop an inline config's state; one refused by what
// changes between the batches and the next try has dropped it all the same).
var errManyOrphans = errors.New("limiter: the name's state is too large for the creating transaction")

// writeDefinition is PutDefinition's transaction once the stored definition (old, when found)
// is read: it checks the change, writes it, drops the state it makes meaningless and calls then.
// A creation over more state than one batch returns errManyOrphans last of all.
func (e *Engine) writeDefinition(tx *gorm.DB, tenantID int64, name string, def Definition, old StoredDefinition, found bool, now time.Time,
	maxLimits int64, then OnDefinitionChange, out *StoredDefinition) error {
	created, many := !found, false
	row := definitionRow{
		TenantID: tenantID, Name: name, Kind: string(def.Kind), Rate: def.Rate, Period: def.Period,
		Capacity: def.Capacity, MaxReserved: def.MaxReserved, Shards: def.Shards, Start: def.Start,
		Jitter: def.Jitter, IPFallback: def.IPFallback, Mode: string(def.Mode), Penalty: def.Penalty,
		LeaseTTL: def.LeaseTTL, CreatedAt: now, UpdatedAt: now,
	}
	if def.Kind == SlidingWindow {
		row.Resolution = &def.Resolution
	}
	if def.Kind == Quota {
		cal, zone := string(def.Calendar), def.TimeZone
		row.Calendar, row.TimeZone = &cal, &zone
		if def.Calendar == algo.Month {
			row.AnchorDay = &def.AnchorDay
		}
	}
	row.Parents = encodeParents(def.Parents)
	if len(def.Parents) > 0 {
		if err := checkParentGraph(tx, tenantID, name, def.Parents); err != nil {
			return err
		}
	}
	if err := checkConcurrencyFamily(tx, tenantID, name, def); err != nil {
		return err
	}
	if created {
		after, err := e.countQuota(tx, tenantID, "limits", "limits", maxLimits, func() (n int64, err error) {
			return n, countDefinitions(tx, tenantID, &n)
		})
		if err != nil {
			return err
		}
		if err := tx.Create(&row).Error; err != nil {
			return err
		}
		if err := after(); err != nil {
			return err
		}
		// Every key of a new definition starts full: rows an inline config left under this
		// name (24 hours at most) hold its numbers and its clock, not this definition's (a
		// fixed window would roll at their ts instead of start, admitting twice its rate).
		if many, err = manyState(tx, tenantID, name); err != nil {
			return err
		}
		if !many { // else errManyOrphans, below
			if err := deleteState(tx, tenantID, name, nil); err != nil {
				return err
			}
		}
		// A fresh tag: a hold on a limit of this name deleted before kept the old one's.
		if err := newNumbersVersion(tx, tenantID, name); err != nil {
			return err
		}
	} else {
		row.CreatedAt, row.OverridesVersion = old.CreatedAt, old.OverridesVersion
		// The sweeper takes updated_at for the definition's version (pgDeleteUnchanged):
		// every change moves it forward, even on a clock that stands still or runs behind
		// the last writer's.
		if !row.UpdatedAt.After(old.UpdatedAt) {
			row.UpdatedAt = old.UpdatedAt.Add(time.Microsecond)
		}
		if old.OverridesVersion != 0 {
			if err := checkOverridesFit(tx, tenantID, name, def); err != nil {
				return err
			}
		}
		// Only override changes write overrides_version (the instances' tag of them).
		if err := tx.Select("*").Omit("overrides_version").Where("tenant_id = ? AND name = ?", tenantID, name).Updates(&row).Error; err != nil {
			return err
		}
		if algo.StateShapeChanged(old.Definition, def) {
			if err := deleteState(tx, tenantID, name, nil); err != nil {
				return err
			}
		}
		if algo.NumbersChanged(old.Definition, def) {
			if err := newNumbersVersion(tx, tenantID, name); err != nil {
				return err
			}
		}
	}
	*out = row.toDomain()
	if then != nil {
		ch := DefinitionChange{TenantID: tenantID, Name: name, After: &out.Definition}
		if !created {
			ch.Before = &old.Definition
		}
		if err := then(tx, ch); err != nil {
			return err
		}
	}
	if many {
		return errManyOrphans // everything written rolls back
	}
	return nil
}

// checkParentGraph refuses parents that would make a limit its own ancestor or put more than
// algo.MaxParentDepth generations above a limit, in the tenant's graph with name's parents
// replaced. Only a definition with parents can add an edge, so only those need the check; it
// reads the graph in the same serializable transaction, so two concurrent changes cannot each
// pass and together form a cycle.
func checkParentGraph(tx *gorm.DB, tenantID int64, name string, parents []algo.Parent) error {
	edges, err := parentEdges(tx, tenantID)
	if err != nil {
		return err
	}
	edges[name] = nil
	for _, p := range parents {
		edges[name] = append(edges[name], p.Name)
	}
	return fromAlgo(algo.CheckParentGraph(edges, name))
}

// checkConcurrencyFamily refuses, when a definition is stored, a concurrency limit in a family
// of nested budgets (a lease is one limit's, not a family's): a parent that is a stored
// concurrency limit, and a concurrency limit that a stored definition names as a parent. (A
// decision still refuses either, for definitions stored before this check.)
func checkConcurrencyFamily(tx *gorm.DB, tenantID int64, name string, def Definition) error {
	if len(def.Parents) > 0 {
		names := make([]string, len(def.Parents))
		for i, p := range def.Parents {
			names[i] = p.Name
		}
		var concurrent []string
		if err := tx.Raw(sqlSelectKindAmong, tenantID, string(Concurrency), names).Scan(&concurrent).Error; err != nil {
			return err
		}
		if len(concurrent) > 0 {
			return concurrencyParent(concurrent[0])
		}
	}
	if def.Kind != Concurrency {
		return nil
	}
	edges, err := parentEdges(tx, tenantID)
	if err != nil {
		return err
	}
	for _, child := range slices.Sorted(maps.Keys(edges)) { // the first by name: the same answer every time
		if child != name && slices.Contains(edges[child], name) {
			return fromAlgo(&algo.ValidationError{Code: algo.CodeInvalidConfig, Fields: []FieldError{{Field: "kind",
				Message: fmt.Sprintf("limit %q names this limit as a parent, which a concurrency limit cannot be: remove it from %q's parents first", child, child)}}})
		}
	}
	return nil
}

// GetDefinition returns the stored definition called name, or ErrLimitNotFound.
func (e *Engine) GetDefinition(ctx context.Context, tenantID int64, name string) (StoredDefinition, error) {
	var out StoredDefinition
	err := e.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		row, ok, err := loadDefinition(tx, tenantID, name)
		if err != nil {
			return err
		}
		if !ok {
			return ErrLimitNotFound
		}
		out = row
		return nil
	})
	if err != nil {
		return StoredDefinition{}, fmt.Errorf("limiter: get definition: %w", err)
	}
	return out, nil
}

// ListDefinitions returns the tenant's definitions ordered by name.
func (e *Engine) ListDefinitions(ctx context.Context, tenantID int64) ([]StoredDefinition, error) {
	var rows []definitionRow
	err := e.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		return tx.Where("tenant_id = ?", tenantID).Order("name").Find(&rows).Error
	})
	if err != nil {
		return nil, fmt.Errorf("limiter: list definitions: %w", err)
	}
	out := make([]StoredDefinition, len(rows))
	for i, r := range rows {
		out[i] = r.toDomain()
	}
	return out, nil
}

// DeleteDefinition removes a definition with its overrides and all of its state, or returns
// ErrLimitNotFound. then, when not nil, is called in the same transaction once it is removed.
// A state of more rows than one batch of dropStateBatch (a limit of millions of keys could not
// drop them in one transaction) is left behind, its leases and what open holds took from it
// deleted: decisions read it as an inline config's (it admits nothing more), the sweeper deletes
// it InlineStateTTL after its last write, and a creation of the name drops it first. (Deleting
// it in batches after the deletion could delete what an inline config of the name decided
// meanwhile.)
func (e *Engine) DeleteDefinition(ctx context.Context, tenantID int64, name string, then OnDefinitionChange) error {
	err := e.db.Serializable(ctx, func(tx *gorm.DB) error {
		if err := e.decisionSettings(tx, false); err != nil {
			return err
		}
		old, found, err := loadDefinition(tx, tenantID, name)
		if err != nil {
			return err
		}
		if !found {
			return ErrLimitNotFound
		}
		if err := tx.Where("tenant_id = ? AND name = ?", tenantID, name).Delete(&definitionRow{}).Error; err != nil {
			return err
		}
		overrides, err := deleteOverrides(tx, tenantID, name)
		if err != nil {
			return err
		}
		many, err := manyState(tx, tenantID, name)
		if err != nil {
			return err
		}
		if !many {
			err = deleteState(tx, tenantID, name, nil)
		} else if err = deleteLeases(tx, tenantID, name, nil); err == nil {
			err = voidCharges(tx, tenantID, name, nil)
		}
		if err != nil {
			return err
		}
		if then == nil {
			return nil
		}
		return then(tx, DefinitionChange{TenantID: tenantID, Name: name, Before: &old.Definition, OverridesDeleted: overrides})
	})
	if err != nil {
		return fmt.Errorf("limiter: delete definition: %w", err)
	}
	return nil
}

// dropOrphanState deletes name's state in batches (dropStateInBatches) while name has no stored
// definition: what a deleted definition left, or an inline config's. It stops when a definition
// of name exists (its creation dropped what was left then, in its own transaction) and at the
// first error.
func (e *Engine) dropOrphanState(ctx context.Context, tenantID int64, name string) error {
	return e.dropStateInBatches(ctx, tenantID, name, func(tx *gorm.DB, _ bool) (bool, error) {
		_, found, err := loadDefinition(tx, tenantID, name)
		return found, err
	})
}
