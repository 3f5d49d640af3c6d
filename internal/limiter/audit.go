package limiter

import (
	"strconv"
	"strings"

	"gorm.io/gorm"
)

// AuditChange is how the audit log describes a stored definition that replaced another: the
// one before and the one after (AuditDetail each), or only the new one when there was none.
func AuditChange(before *Definition, after Definition) string {
	if before == nil {
		return AuditDetail(after)
	}
	return AuditDetail(*before) + " → " + AuditDetail(after)
}

// DefinitionChange is a definition created, replaced or deleted, as the transaction that makes
// the change sees it.
type DefinitionChange struct {
	TenantID int64
	Name     string
	Before   *Definition // nil: the change created the definition
	After    *Definition // nil: the change deleted it
	// OverridesDeleted is how many overrides a deletion deleted with the definition.
	OverridesDeleted int64
}

// Action is the audit log's name of the change: limit.create, limit.update or limit.delete.
func (ch DefinitionChange) Action() string {
	switch {
	case ch.After == nil:
		return "limit.delete"
	case ch.Before == nil:
		return "limit.create"
	default:
		return "limit.update"
	}
}

// Detail is the audit log's description of the change: the definition before and after
// (AuditChange), or for a deletion the definition deleted and how many overrides went with it
// (they are not audited one by one: a limit may have a hundred thousand).
func (ch DefinitionChange) Detail() string {
	if ch.After == nil {
		if ch.Before == nil {
			return ""
		}
		if ch.OverridesDeleted > 0 {
			return AuditDetail(*ch.Before) + "; its " + strconv.FormatInt(ch.OverridesDeleted, 10) + " override(s) deleted with it"
		}
		return AuditDetail(*ch.Before)
	}
	return AuditChange(ch.Before, *ch.After)
}

// OnDefinitionChange is what the caller of PutDefinition or DeleteDefinition has done in the
// same transaction, once the change is written: what it writes through tx (the audit entry, and
// the webhook event queued with it) commits or rolls back with the change, and its error rolls
// the change back. A retried transaction calls it again. nil does nothing.
type OnDefinitionChange func(tx *gorm.DB, ch DefinitionChange) error

// OverrideChange is how the audit log describes a stored override that replaced another: the
// one before and the one after (OverrideSummary each), or only the new one when there was none.
func OverrideChange(before *Override, after Override) string {
	if before == nil {
		return OverrideSummary(after)
	}
	return OverrideSummary(*before) + " → " + OverrideSummary(after)
}

// OverrideEdit is an override created, replaced or deleted, as the transaction that makes the
// change sees it.
type OverrideEdit struct {
	TenantID int64
	Name     string // the limit's
	Match    string
	Before   *Override // nil: the change created the override
	After    *Override // nil: the change deleted it
}

// Action is the audit log's name of the change: override.create, override.update or
// override.delete.
func (ch OverrideEdit) Action() string {
	switch {
	case ch.After == nil:
		return "override.delete"
	case ch.Before == nil:
		return "override.create"
	default:
		return "override.update"
	}
}

// Target is the audit log's name of the override: its limit and its match.
func (ch OverrideEdit) Target() string { return ch.Name + " override " + strconv.Quote(ch.Match) }

// Detail is the audit log's description of the change: the override before and after
// (OverrideChange), or "" for a deletion.
func (ch OverrideEdit) Detail() string {
	if ch.After == nil {
		return ""
	}
	return OverrideChange(ch.Before, *ch.After)
}

// OnOverrideChange is OnDefinitionChange for PutOverride, PutOverrideIf and DeleteOverride.
type OnOverrideChange func(tx *gorm.DB, ch OverrideEdit) error

// OnReset is OnDefinitionChange for Reset: called in its transaction once the state is deleted.
type OnReset func(tx *gorm.DB) error

// AuditTx writes one entry of a tenant's audit log inside another transaction
// (tenants.Service.AuditTx). Its methods make the callbacks of PutDefinition, DeleteDefinition,
// the overrides' changes and Reset that record each change by actor in the change's own
// transaction, with the before and after that transaction saw: the entry and the event it queues
// (definition.changed) commit with the change or not at all. A nil AuditTx records nothing.
type AuditTx func(tx *gorm.DB, tenantID *int64, actor, action, target, detail string) error

// DefinitionChange records a definition's change, with note after its detail.
func (audit AuditTx) DefinitionChange(actor, note string) OnDefinitionChange {
	if audit == nil {
		return nil
	}
	return func(tx *gorm.DB, ch DefinitionChange) error {
		return audit(tx, &ch.TenantID, actor, ch.Action(), ch.Name, strings.TrimSpace(ch.Detail()+" "+note))
	}
}

// OverrideChange records an override's change.
func (audit AuditTx) OverrideChange(actor string) OnOverrideChange {
	if audit == nil {
		return nil
	}
	return func(tx *gorm.DB, ch OverrideEdit) error {
		return audit(tx, &ch.TenantID, actor, ch.Action(), ch.Target(), ch.Detail())
	}
}

// Reset records tenantID's reset of key (nil: every key) of name.
func (audit AuditTx) Reset(tenantID int64, actor, name string, key *string) OnReset {
	if audit == nil {
		return nil
	}
	return func(tx *gorm.DB) error {
		return audit(tx, &tenantID, actor, "limit.reset", ResetTarget(name, key), "")
	}
}

// ResetTarget is the audit log's name of what a reset of key (nil: every key) of name resets.
func ResetTarget(name string, key *string) string {
	switch {
	case key == nil:
		return name + " (all keys)"
	case *key == "":
		return name + " (global key)"
	default:
		return name + " key " + strconv.Quote(*key)
	}
}
