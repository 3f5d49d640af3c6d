package tenants

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
)

// AuditEntry is one line of the audit log: who (Actor) did what (Action) to which object
// (Target), within a tenant or, with TenantID nil, server-wide.
type AuditEntry struct {
	ID        int64
	TenantID  *int64
	Actor     string
	Action    string
	Target    string
	Detail    string
	CreatedAt time.Time
}

const (
	defaultAuditLimit = 50
	maxAuditLimit     = 1000
	maxAuditField     = 1000 // bytes; longer actor/target/detail text is cut, never refused
)

// Audit records an entry in a transaction of its own. Methods of this package that change keys
// or log users in audit themselves; other packages call this for resets and the like, and
// AuditTx for changes made in a transaction of theirs (definitions). Never pass secrets in any
// field.
func (s *Service) Audit(ctx context.Context, tenantID *int64, actor, action, target, detail string) error {
	if strings.TrimSpace(action) == "" {
		return wrap("audit", invalid("action", "empty action"))
	}
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		return s.audit(tx, tenantID, actor, action, target, detail)
	})
	return wrap("audit", err)
}

// AuditTx records an entry inside tx, a transaction on this service's database that makes the
// change the entry describes (another package's, such as a definition change), so that the
// entry, and the webhook event it queues, exist if and only if the change was committed.
func (s *Service) AuditTx(tx *gorm.DB, tenantID *int64, actor, action, target, detail string) error {
	if strings.TrimSpace(action) == "" {
		return wrap("audit", invalid("action", "empty action"))
	}
	return wrap("audit", s.audit(tx, tenantID, actor, action, target, detail))
}

// audit writes an entry inside the caller's transaction, so the entry exists if and only if the
// change it describes was committed.
func (s *Service) audit(tx *gorm.DB, tenantID *int64, actor, action, target, detail string) error {
	err := tx.Create(&auditRow{
		TenantID:  tenantID,
		Actor:     truncate(actor),
		Action:    truncate(action),
		Target:    truncate(target),
		Detail:    truncate(detail),
		CreatedAt: s.clock(),
	}).Error
	if event, ok := auditEvents[action]; ok && err == nil && tenantID != nil && s.events != nil {
		err = s.events.Enqueue(tx, *tenantID, event, AuditEvent{Action: action, Actor: truncate(actor), Target: truncate(target), Detail: truncate(detail)})
	}
	return err
}

// auditEvents are the audited actions that are also events a tenant's webhooks may subscribe
// to, by the event's name.
var auditEvents = map[string]string{
	"key.create":   "key.created",
	"key.revoke":   "key.revoked",
	"limit.create": "definition.changed",
	"limit.update": "definition.changed",
	"limit.delete": "definition.changed",
}

// AuditEvent is the data of an event that comes from an audit entry.
type AuditEvent struct {
	Action string `json:"action"`
	Actor  string `json:"actor"`
	Target string `json:"target"`
	Detail string `json:"detail,omitempty"`
}

// AuditLog returns a tenant's most recent entries, newest first. limit <= 0 means 50; it is
// capped at 1000.
func (s *Service) AuditLog(ctx context.Context, tenantID int64, limit int) ([]AuditEntry, error) {
	return s.auditLog(ctx, "audit log", AuditQuery{Limit: min(limit, maxAuditLimit)}, func(tx *gorm.DB) *gorm.DB { return tx.Where("tenant_id = ?", tenantID) })
}

// ServerAuditLog returns the most recent server-wide entries (TenantID nil: operators' logins,
// failed logins of unknown accounts, lockouts, tenant creation), newest first. It is for
// operators only. limit <= 0 means 50; it is capped at 1000.
func (s *Service) ServerAuditLog(ctx context.Context, limit int) ([]AuditEntry, error) {
	return s.auditLog(ctx, "server audit log", AuditQuery{Limit: min(limit, maxAuditLimit)}, func(tx *gorm.DB) *gorm.DB { return tx.Where("tenant_id IS NULL") })
}

// AuditQuery narrows and pages an audit log: entries of one actor (exact, a user under either
// of its spellings: actorSpellings) and one action (exact; "" for any), created in
// [Since, Until) (zero for open ends), older than the entry Before (0: from the newest), at most
// Limit of them (<= 0: 50; capped at 1000).
type AuditQuery struct {
	Actor, Action string
	Since, Until  time.Time
	Before        int64
	Limit         int
}

// AuditPage is a tenant's audit log (tenantID not nil) or the server's (nil, for operators), as
// q narrows it, newest first; next is the Before of the following page, 0 when there is none.
func (s *Service) AuditPage(ctx context.Context, tenantID *int64, q AuditQuery) (entries []AuditEntry, next int64, err error) {
	limit := q.Limit
	if limit <= 0 {
		limit = defaultAuditLimit
	}
	limit = min(limit, maxAuditLimit)
	q.Limit = limit + 1 // one more tells whether there is a next page
	entries, err = s.auditLog(ctx, "audit page", q, func(tx *gorm.DB) *gorm.DB {
		if tenantID == nil {
			return tx.Where("tenant_id IS NULL")
		}
		return tx.Where("tenant_id = ?", *tenantID)
	})
	if err != nil || len(entries) <= limit {
		return entries, 0, err
	}
	entries = entries[:limit]
	return entries, entries[limit-1].ID, nil
}

// actorSpellings are the ways the log names actor: a user is "user:EMAIL" for what it does in
// the dashboard and "EMAIL" for its own logins, failures, lockouts and password changes (the
// account as typed at the login form), so that filtering by either finds both.
func actorSpellings(actor string) []string {
	if email, ok := strings.CutPrefix(actor, "user:"); ok && strings.Contains(email, "@") {
		return []string{actor, email}
	}
	if strings.Contains(actor, "@") && !strings.Contains(actor, ":") {
		return []string{actor, "user:" + actor}
	}
	return []string{actor}
}

func (s *Service) auditLog(ctx context.Context, op string, q AuditQuery, scope func(*gorm.DB) *gorm.DB) ([]AuditEntry, error) {
	if !db.ComparableText(q.Actor) || !db.ComparableText(q.Action) {
		return nil, nil // no entry holds a NUL or invalid UTF-8 (truncate), and PostgreSQL refuses to compare them
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultAuditLimit
	}
	limit = min(limit, maxAuditLimit+1)
	var rows []auditRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		tx = scope(tx)
		if q.Actor != "" {
			tx = tx.Where("actor IN ?", actorSpellings(q.Actor))
		}
		if q.Action != "" {
			tx = tx.Where("action = ?", q.Action)
		}
		if !q.Since.IsZero() {
			tx = tx.Where("created_at >= ?", q.Since.UTC())
		}
		if !q.Until.IsZero() {
			tx = tx.Where("created_at < ?", q.Until.UTC())
		}
		if q.Before > 0 {
			tx = tx.Where("id < ?", q.Before)
		}
		return tx.Order("id DESC").Limit(limit).Find(&rows).Error
	})
	if err != nil {
		return nil, wrap(op, err)
	}
	out := make([]AuditEntry, 0, len(rows))
	for _, r := range rows {
		out = append(out, AuditEntry{
			ID: r.ID, TenantID: r.TenantID, Actor: r.Actor, Action: r.Action,
			Target: r.Target, Detail: r.Detail, CreatedAt: utc(r.CreatedAt),
		})
	}
	return out, nil
}

// truncate cuts s to maxAuditField bytes on a rune boundary, drops NUL bytes and makes it valid
// UTF-8, because PostgreSQL TEXT refuses both and an audit entry must never fail on its text.
func truncate(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) <= maxAuditField {
		return s
	}
	s = s[:maxAuditField]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
