package limiter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// Overrides (issue 14): per-key changes of a stored limit, matched by an exact key or a prefix
// (algo/override.go has the rules). They are stored in limit_overrides; the decision path never
// reads that table in steady state. Each instance keeps every limit's overrides in memory,
// indexed, tagged with limit_definitions.overrides_version, a random tag each change of the
// limit's overrides replaces in the same transaction (0 when the limit has none). The decision
// transaction reads the tag with the definition, in the round trip it makes anyway; only when the
// tag differs from the one in memory does it load the overrides, inside that same serializable
// transaction. So a change applies on every instance from the first decision transaction that
// begins after the change committed (no propagation delay, no notification to lose), and it
// costs one more round trip once per change and instance. docs/performance.md has the numbers.

// Override changes one limit for the keys it matches (see algo.Override).
type Override = algo.Override

// The override actions.
const (
	ActionAllow = algo.ActionAllow
	ActionDeny  = algo.ActionDeny
	// MaxOverrides is how many overrides one limit may hold.
	MaxOverrides = algo.MaxOverrides
	// MatchRule describes what a match may be, for error messages.
	MatchRule = algo.MatchRule
)

// ValidMatch reports whether m is an acceptable override match (see algo.ValidMatch).
func ValidMatch(m string) bool { return algo.ValidMatch(m) }

// Errors of overrides. Their messages are what a client is shown.
var (
	// ErrOverrideNotFound: the limit has no override with this match.
	ErrOverrideNotFound = &apperr.Error{Code: apperr.NotFound, Field: "match", Message: "this limit has no override with this match"}
	// ErrOverrideExists: PutOverrideIf was to create an override, and one with its match exists.
	ErrOverrideExists = &apperr.Error{Code: apperr.Conflict, Field: "match", Message: "this limit has an override with this match; edit it instead"}
	// ErrTooManyOverrides: the limit already holds MaxOverrides overrides.
	ErrTooManyOverrides = &apperr.Error{Code: apperr.InvalidRequest, Field: "match",
		Message: "a limit holds at most 10000 overrides; delete some (or use a prefix match) before adding more"}
)

// StoredOverride is an override with its time stamps.
type StoredOverride struct {
	Override  Override
	CreatedAt time.Time
	UpdatedAt time.Time
}

// overrideRow is the stored form of an override (table limit_overrides).
type overrideRow struct {
	TenantID    int64  `gorm:"primaryKey"`
	Name        string `gorm:"primaryKey"`
	Pattern     string `gorm:"primaryKey"`
	Rate        *float64
	Capacity    *float64
	MaxReserved *float64
	Action      string
	ExpiresAt   *int64
	CreatedAt   time.Time `gorm:"autoCreateTime:false"`
	UpdatedAt   time.Time `gorm:"autoUpdateTime:false"`
}

func (overrideRow) TableName() string { return "limit_overrides" }

func (r overrideRow) toDomain() StoredOverride {
	return StoredOverride{Override: r.override(), CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

func (r overrideRow) override() Override {
	return Override{Match: r.Pattern, Rate: r.Rate, Capacity: r.Capacity, MaxReserved: r.MaxReserved,
		Action: algo.Action(r.Action), ExpiresAt: r.ExpiresAt}
}

// newVersionTag is a fresh non-zero tag for a limit's overrides or numbers. Random rather than a
// counter: a limit deleted and created again starts from 0, and a counter restarting there could
// repeat a tag an instance (or an open hold) still holds for the old ones.
func newVersionTag() int64 {
	for {
		if v := rand.Int64(); v != 0 {
			return v
		}
	}
}

// PutOverride creates or replaces the override of name whose match is o.Match. before is the
// override it replaced, as its transaction read it, or nil when it created one. The limit must
// have a stored definition; o is validated against it at the decision clock (expiresAt must lie
// ahead of it). then, when not nil, is called in the same transaction once the override is
// written.
func (e *Engine) PutOverride(ctx context.Context, tenantID int64, name string, o Override, then OnOverrideChange) (stored StoredOverride, before *Override, err error) {
	return e.putOverride(ctx, tenantID, name, o, nil, then)
}

// PutOverrideIf is PutOverride for a caller that knows whether the override exists (a form to
// add one, or to edit one): with exists it only replaces an override (ErrOverrideNotFound when
// there is none: deleted meanwhile), without it only creates one (ErrOverrideExists), as its
// writing transaction reads them.
func (e *Engine) PutOverrideIf(ctx context.Context, tenantID int64, name string, o Override, exists bool, then OnOverrideChange) (StoredOverride, *Override, error) {
	return e.putOverride(ctx, tenantID, name, o, &exists, then)
}

func (e *Engine) putOverride(ctx context.Context, tenantID int64, name string, o Override, exists *bool, then OnOverrideChange) (stored StoredOverride, before *Override, err error) {
	if !ValidName(name) {
		return StoredOverride{}, nil, ErrLimitNotFound
	}
	maxOverrides, err := e.quotaMax(ctx, tenantID, "overrides")
	if err != nil {
		return StoredOverride{}, nil, fmt.Errorf("limiter: put override: %w", err)
	}
	err = e.db.Serializable(ctx, func(tx *gorm.DB) error {
		now, err := e.nowIn(tx)
		if err != nil {
			return err
		}
		def, ok, err := loadDefinition(tx, tenantID, name)
		if err != nil {
			return err
		}
		if !ok {
			return ErrLimitNotFound
		}
		if err := o.Validate(def.Definition, now); err != nil {
			return fromAlgo(err)
		}
		old, err := findOverride(tx, tenantID, name, o.Match)
		if err != nil {
			return err
		}
		switch {
		case exists != nil && *exists && old == nil:
			return ErrOverrideNotFound
		case exists != nil && !*exists && old != nil:
			return ErrOverrideExists
		}
		before = nil // each attempt of a retried transaction reads it again
		if old != nil {
			prev := old.override()
			before = &prev
		}
		wall := e.wallClock().UTC().Truncate(time.Microsecond)
		row := overrideRow{TenantID: tenantID, Name: name, Pattern: o.Match, Rate: o.Rate, Capacity: o.Capacity,
			MaxReserved: o.MaxReserved, Action: string(o.Action), ExpiresAt: o.ExpiresAt, CreatedAt: wall, UpdatedAt: wall}
		if before == nil {
			var n int64
			if err := tx.Model(&overrideRow{}).Where("tenant_id = ? AND name = ?", tenantID, name).Count(&n).Error; err != nil {
				return err
			}
			if n >= MaxOverrides {
				return ErrTooManyOverrides
			}
			after, err := e.countQuota(tx, tenantID, "overrides", "overrides", maxOverrides, func() (n int64, err error) {
				return n, countOverrides(tx, tenantID, &n)
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
		} else {
			row.CreatedAt = old.CreatedAt
			if err := tx.Select("*").Where(overrideByMatch, tenantID, name, o.Match).Updates(&row).Error; err != nil {
				return err
			}
		}
		stored = row.toDomain()
		if o.Action == algo.ActionNone || (before != nil && before.Action == algo.ActionNone) {
			// Numbers set or taken away: open holds give nothing back to the limit. An allow or
			// deny changes no numbers (it writes nothing, on every key alike).
			if err := newNumbersVersion(tx, tenantID, name); err != nil {
				return err
			}
		}
		if err := setOverridesVersion(tx, tenantID, name, newVersionTag()); err != nil {
			return err
		}
		if then == nil {
			return nil
		}
		after := stored.Override
		return then(tx, OverrideEdit{TenantID: tenantID, Name: name, Match: o.Match, Before: before, After: &after})
	})
	if err != nil {
		return StoredOverride{}, nil, fmt.Errorf("limiter: put override: %w", err)
	}
	return stored, before, nil
}

// DeleteOverride deletes the override of name whose match is match: ErrLimitNotFound without a
// stored definition, ErrOverrideNotFound without such an override. then, when not nil, is called
// in the same transaction once the override is deleted.
func (e *Engine) DeleteOverride(ctx context.Context, tenantID int64, name, match string, then OnOverrideChange) error {
	if !ValidName(name) {
		return ErrLimitNotFound
	}
	err := e.db.Serializable(ctx, func(tx *gorm.DB) error {
		if _, ok, err := loadDefinition(tx, tenantID, name); err != nil || !ok {
			if err == nil {
				err = ErrLimitNotFound
			}
			return err
		}
		if !ValidMatch(match) {
			// PutOverride stores no such match, and PostgreSQL refuses NUL bytes and invalid
			// UTF-8 in a query (an error, where there is only no such row).
			return ErrOverrideNotFound
		}
		old, err := findOverride(tx, tenantID, name, match)
		if err != nil {
			return err
		}
		if old == nil {
			return ErrOverrideNotFound
		}
		if err := tx.Where(overrideByMatch, tenantID, name, match).Delete(&overrideRow{}).Error; err != nil {
			return err
		}
		if algo.Action(old.Action) == algo.ActionNone {
			if err := newNumbersVersion(tx, tenantID, name); err != nil { // as PutOverride
				return err
			}
		}
		var n int64
		if err := tx.Model(&overrideRow{}).Where("tenant_id = ? AND name = ?", tenantID, name).Count(&n).Error; err != nil {
			return err
		}
		v := int64(0)
		if n > 0 {
			v = newVersionTag()
		}
		if err := setOverridesVersion(tx, tenantID, name, v); err != nil {
			return err
		}
		if then == nil {
			return nil
		}
		before := old.override()
		return then(tx, OverrideEdit{TenantID: tenantID, Name: name, Match: match, Before: &before})
	})
	if err != nil {
		return fmt.Errorf("limiter: delete override: %w", err)
	}
	return nil
}

// GetOverride reads the override of name whose match is match: ErrLimitNotFound without a stored
// definition, ErrOverrideNotFound without such an override.
func (e *Engine) GetOverride(ctx context.Context, tenantID int64, name, match string) (StoredOverride, error) {
	if !ValidName(name) {
		return StoredOverride{}, ErrLimitNotFound
	}
	var row *overrideRow
	err := e.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		if _, ok, err := loadDefinition(tx, tenantID, name); err != nil || !ok {
			if err == nil {
				err = ErrLimitNotFound
			}
			return err
		}
		var err error
		row, err = findOverride(tx, tenantID, name, match)
		return err
	})
	if err != nil {
		return StoredOverride{}, fmt.Errorf("limiter: get override: %w", err)
	}
	if row == nil {
		return StoredOverride{}, fmt.Errorf("limiter: get override: %w", ErrOverrideNotFound)
	}
	return row.toDomain(), nil
}

// overrideByMatch selects the override of a limit whose match is the third argument.
const overrideByMatch = "tenant_id = ? AND name = ? AND pattern = ?"

// findOverride reads the override of name whose match is match in tx; nil when there is none.
func findOverride(tx *gorm.DB, tenantID int64, name, match string) (*overrideRow, error) {
	var rows []overrideRow
	if err := tx.Where(overrideByMatch, tenantID, name, match).Limit(1).Find(&rows).Error; err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return &rows[0], nil
}

// MaxOverridesPage bounds one page of ListOverrides.
const MaxOverridesPage = 1000

// ListOverrides returns up to limit overrides of name ordered by match, starting after the match
// after ("" from the first), and the match to continue after when more follow ("" when none do).
func (e *Engine) ListOverrides(ctx context.Context, tenantID int64, name, after string, limit int) ([]StoredOverride, string, error) {
	if !ValidName(name) {
		return nil, "", ErrLimitNotFound
	}
	if after != "" && !ValidMatch(after) { // never a page's next, and PostgreSQL may refuse to compare it
		return nil, "", invalidRequest("after", "must be the next of a previous page: a valid match")
	}
	limit = min(max(limit, 1), MaxOverridesPage)
	var rows []overrideRow
	err := e.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		if _, ok, err := loadDefinition(tx, tenantID, name); err != nil || !ok {
			if err == nil {
				err = ErrLimitNotFound
			}
			return err
		}
		return tx.Where("tenant_id = ? AND name = ? AND pattern > ?", tenantID, name, after).
			Order("pattern").Limit(limit + 1).Find(&rows).Error
	})
	if err != nil {
		return nil, "", fmt.Errorf("limiter: list overrides: %w", err)
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		next = rows[limit-1].Pattern
	}
	out := make([]StoredOverride, len(rows))
	for i, r := range rows {
		out[i] = r.toDomain()
	}
	return out, next, nil
}

// overrideCache holds each limit's overrides, indexed, under the version they were read at.
type overrideCache struct {
	mu sync.Mutex
	m  map[defKey]overrideSnapshot
}

type overrideSnapshot struct {
	version int64
	index   *algo.OverrideIndex
}

// indexes returns the override index of every limit in versions whose version is not 0, from
// memory when the version matches, else through load (inside the caller's transaction), which
// refreshes memory. Limits without overrides are absent from the result.
func (c *overrideCache) indexes(versions map[defKey]int64, load func(k defKey) ([]Override, error)) (map[defKey]*algo.OverrideIndex, error) {
	var out map[defKey]*algo.OverrideIndex
	for k, v := range versions {
		if v == 0 {
			continue
		}
		ix, err := c.index(k, v, load)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = map[defKey]*algo.OverrideIndex{}
		}
		out[k] = ix
	}
	return out, nil
}

func (c *overrideCache) index(k defKey, version int64, load func(k defKey) ([]Override, error)) (*algo.OverrideIndex, error) {
	c.mu.Lock()
	s, ok := c.m[k]
	c.mu.Unlock()
	if ok && s.version == version {
		return s.index, nil
	}
	os, err := load(k)
	if err != nil {
		return nil, fmt.Errorf("load overrides of %s: %w", strconv.Quote(k.name), err)
	}
	ix := algo.NewOverrideIndex(os)
	c.mu.Lock()
	if c.m == nil || len(c.m) > 100_000 {
		c.m = map[defKey]overrideSnapshot{}
	}
	c.m[k] = overrideSnapshot{version: version, index: ix}
	c.mu.Unlock()
	return ix, nil
}

// overrideLoader loads a limit's overrides within tx (GORM: SQLite, and PostgreSQL off the hot path).
func overrideLoader(tx *gorm.DB) func(k defKey) ([]Override, error) {
	return func(k defKey) ([]Override, error) { return selectOverrides(tx, k) }
}

// overridesOf is the override index of one limit read in tx (nil when it has none).
func (e *Engine) overridesOf(tx *gorm.DB, k defKey, version int64) (*algo.OverrideIndex, error) {
	if version == 0 {
		return nil, nil
	}
	return e.overrides.index(k, version, overrideLoader(tx))
}

// checkOverridesFit refuses a replacement definition that one of the limit's overrides would
// make invalid (a capacity override on a limit turned into a sliding window).
func checkOverridesFit(tx *gorm.DB, tenantID int64, name string, def Definition) error {
	os, err := selectOverrides(tx, defKey{tenantID, name})
	if err != nil {
		return err
	}
	for _, o := range os {
		if err := o.CheckDefinition(def); err != nil {
			return fromAlgo(err)
		}
	}
	return nil
}

// Action is what an override does instead of changing numbers (see algo.Action).
type Action = algo.Action

// OverrideSummary describes an override in a line, for the audit log (the API's and the dashboard's).
func OverrideSummary(o Override) string {
	var parts []string
	if o.Action != "" {
		parts = append(parts, "action="+string(o.Action))
	}
	for _, n := range []struct {
		name string
		v    *float64
	}{{"rate", o.Rate}, {"capacity", o.Capacity}, {"maxReserved", o.MaxReserved}} {
		if n.v != nil {
			parts = append(parts, n.name+"="+strconv.FormatFloat(*n.v, 'g', -1, 64))
		}
	}
	if o.ExpiresAt != nil {
		parts = append(parts, "expiresAt="+time.UnixMilli(*o.ExpiresAt).UTC().Format(time.RFC3339Nano))
	}
	return strings.Join(parts, " ")
}
