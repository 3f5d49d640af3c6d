package limiter

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"strings"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// Concurrency leases. A concurrency limit's slots are the lease expiries in its key's state row
// (algo/concurrency.go), so a decision on it reads and writes exactly what any other decision
// does; the lease row (table leases) is only the handle a client releases or extends its slot
// with. Acquiring happens in the deciding group transaction (afterDecisions inserts the row of
// each slot taken); releasing and extending are serializable transactions of their own that
// change the state row and the lease row together. Expired leases need nothing to free their
// slots (only unexpired ones are counted); SweepLeases deletes their rows.

// Errors of holds and leases.
var (
	// ErrLeaseNotFound: no lease of the tenant has that id (released, swept, or never existed).
	ErrLeaseNotFound = &apperr.Error{Code: apperr.NotFound, Message: "no such lease"}
	// ErrLeaseClosed: the lease has expired (its slot is free again); acquire a new one.
	ErrLeaseClosed = &apperr.Error{Code: apperr.LeaseClosed, Message: "the lease has expired and its slot is free again; acquire a new one"}
)

// stmt is one statement a job adds to its group's transaction: portable SQL with ? placeholders.
type stmt struct {
	sql  string
	args []any
}

// pg is the statement with PostgreSQL's numbered placeholders ($1, $2, ...).
func (s stmt) pg() string {
	var b strings.Builder
	n := 0
	for _, r := range s.sql {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func execStmts(tx *gorm.DB, ss []stmt) error {
	for _, s := range ss {
		if err := tx.Exec(s.sql, s.args...).Error; err != nil {
			return err
		}
	}
	return nil
}

// afterDecisions is the first of the group commit's two steps after the decisions: the rows of
// the leases the jobs' admitted concurrency decisions took, and each job's step (a hold's row).
// The second, beforeCommit (idempotency.go), renders and stores idempotent answers, which carry
// those leases and holds. Both run in the group's transaction before commit, on both paths (the
// PostgreSQL path sends the statements in its write round trip). Jobs with neither add nothing,
// so a group without leases or holds sends exactly what it always sends.
func afterDecisions(jobs []*job, now int64) []stmt {
	var out []stmt
	for _, j := range jobs {
		if j.err != nil || !j.consume || !j.out.OK {
			continue
		}
		for i := range j.out.Results {
			d := &j.out.Results[i]
			if !d.leaseSlot {
				continue
			}
			d.LeaseID, d.LeaseExpiresAt = newID("lease_"), algo.LeaseExpiry(d.Definition, now)
			out = append(out, stmt{sqlInsertLease, []any{j.tenantID, d.LeaseID, d.Name, d.Key, now, d.LeaseExpiresAt}})
		}
		if j.step != nil {
			out = append(out, j.step(j, now)...)
		}
	}
	return out
}

// newID is a handle that cannot be guessed: prefix and 128 random bits.
func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return prefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// concurrencyMisuse refuses a concurrency limit in a refund or a hold: its slots are given back
// by releasing their leases.
func concurrencyMisuse(def Definition, req Request) error {
	if def.Kind != Concurrency || (!req.Refund && !req.hold) {
		return nil
	}
	what := "refunded"
	if req.hold {
		what = "held"
	}
	return fromAlgo(&algo.ValidationError{Code: algo.CodeInvalidConfig, Fields: []FieldError{{Field: "name",
		Message: fmt.Sprintf("limit %q is a concurrency limit: it cannot be %s (acquire a lease with a limit decision and release it)", req.Name, what)}}})
}

// concurrencyParent refuses a concurrency limit as a parent (PutDefinition refuses storing one;
// a decision refuses one stored before it did): a lease is one limit's, not a family's.
func concurrencyParent(name string) error {
	return fromAlgo(&algo.ValidationError{Code: algo.CodeInvalidConfig, Fields: []FieldError{{Field: "parents",
		Message: fmt.Sprintf("parent %q is a concurrency limit, which cannot be a parent: put it in the same batch instead", name)}}})
}

// The statements on leases (portable SQL).
const (
	sqlInsertLease      = "INSERT INTO leases (tenant_id, id, name, key, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)"
	sqlSelectLease      = "SELECT name, key, expires_at FROM leases WHERE tenant_id = ? AND id = ?"
	sqlDeleteLease      = "DELETE FROM leases WHERE tenant_id = ? AND id = ?"
	sqlExtendLease      = "UPDATE leases SET expires_at = ? WHERE tenant_id = ? AND id = ?"
	sqlDeleteNameLeases = "DELETE FROM leases WHERE tenant_id = ? AND name = ?"
	sqlDeleteKeyLeases  = "DELETE FROM leases WHERE tenant_id = ? AND name = ? AND key = ?"
	// The leases of a key range of a name, as dropStateBatch deletes its state.
	sqlDeleteLeasesFrom  = "DELETE FROM leases WHERE tenant_id = ? AND name = ? AND key >= ?"
	sqlDeleteLeasesAfter = "DELETE FROM leases WHERE tenant_id = ? AND name = ? AND key > ?"
	sqlSweepLeases       = "DELETE FROM leases WHERE (tenant_id, id) IN (SELECT tenant_id, id FROM leases WHERE expires_at <= ? LIMIT ?)"
	sqlOpenLeases        = `SELECT id, key, created_at, expires_at FROM leases WHERE tenant_id = ? AND name = ? AND expires_at > ?
		ORDER BY created_at, id LIMIT ?`
	sqlLeaseStats = "SELECT COUNT(*) AS n, MIN(created_at) AS oldest, COALESCE(SUM(CASE WHEN expires_at <= ? THEN 1 ELSE 0 END), 0) AS soon FROM leases WHERE tenant_id = ? AND name = ? AND expires_at > ?"
)

func deleteLeases(tx *gorm.DB, tenantID int64, name string, key *string) error {
	if key == nil {
		return tx.Exec(sqlDeleteNameLeases, tenantID, name).Error
	}
	return tx.Exec(sqlDeleteKeyLeases, tenantID, name, *key).Error
}

type leaseRow struct {
	Name, Key string
	ExpiresAt int64
}

// Lease is one lease handed out, for the dashboard.
type Lease struct {
	ID, Key              string
	CreatedAt, ExpiresAt int64 // ms since the epoch
}

// ReleaseLease ends a lease of the tenant: its slot is free for the next decision.
// ErrLeaseNotFound when there is no such lease (another tenant's included), ErrLeaseClosed when
// it has expired already.
func (e *Engine) ReleaseLease(ctx context.Context, tenantID int64, id string) error {
	_, err := e.changeLease(ctx, tenantID, id, false)
	if err != nil {
		return fmt.Errorf("limiter: release lease: %w", err)
	}
	return nil
}

// LeaseLimitName returns the name of the concurrency limit a lease of the tenant holds a slot of
// (expired or not, until it is released or swept). A lease's limit never changes, so the answer
// stays true for its release. ErrLeaseNotFound when the tenant has no such lease.
func (e *Engine) LeaseLimitName(ctx context.Context, tenantID int64, id string) (string, error) {
	if !validHandle(id, "lease_") {
		return "", ErrLeaseNotFound
	}
	var rows []leaseRow
	err := e.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		return tx.Raw(sqlSelectLease, tenantID, id).Scan(&rows).Error
	})
	if err != nil {
		return "", fmt.Errorf("limiter: lease limit: %w", err)
	}
	if len(rows) == 0 {
		return "", ErrLeaseNotFound
	}
	return rows[0].Name, nil
}

// ExtendLease renews a lease: it now expires the limit's leaseTtl after the engine's clock.
// It returns the new expiry (ms since the epoch). Errors as ReleaseLease's.
func (e *Engine) ExtendLease(ctx context.Context, tenantID int64, id string) (int64, error) {
	exp, err := e.changeLease(ctx, tenantID, id, true)
	if err != nil {
		return 0, fmt.Errorf("limiter: extend lease: %w", err)
	}
	return exp, nil
}

// changeLease releases (extend false) or extends a lease in one serializable transaction.
func (e *Engine) changeLease(ctx context.Context, tenantID int64, id string, extend bool) (int64, error) {
	if !validHandle(id, "lease_") {
		return 0, ErrLeaseNotFound
	}
	var newExp int64
	err := e.closeJob(ctx, tenantID, func(tx *gorm.DB, _ *job) error {
		now, err := e.nowIn(tx)
		if err != nil {
			return err
		}
		var rows []leaseRow
		if err := tx.Raw(sqlSelectLease, tenantID, id).Scan(&rows).Error; err != nil {
			return err
		}
		if len(rows) == 0 {
			return ErrLeaseNotFound
		}
		l := rows[0]
		if l.ExpiresAt <= now {
			return ErrLeaseClosed
		}
		stored, ok, err := loadDefinition(tx, tenantID, l.Name)
		if err != nil {
			return err
		}
		if !ok || stored.Definition.Kind != Concurrency { // the limit went (with its state): nothing holds the slot
			if err := tx.Exec(sqlDeleteLease, tenantID, id).Error; err != nil {
				return err
			}
			if extend {
				return ErrLeaseClosed
			}
			return nil
		}
		def := stored.Definition
		k := rowKey{tenantID, l.Name, l.Key, 0}
		st, err := loadRows(tx, []rowKey{k})
		if err != nil {
			return err
		}
		if extend {
			newExp = algo.LeaseExpiry(def, now)
		}
		next, found := algo.ExtendLease(def, st[k].state(def), l.ExpiresAt, newExp, now)
		if !found { // its slot went with a reset in between: nothing to release or extend
			if err := tx.Exec(sqlDeleteLease, tenantID, id).Error; err != nil {
				return err
			}
			if extend {
				return ErrLeaseClosed
			}
			return nil
		}
		if err := saveRows(tx, map[rowKey]algo.State{k: next}); err != nil {
			return err
		}
		if extend {
			return tx.Exec(sqlExtendLease, newExp, tenantID, id).Error
		}
		return tx.Exec(sqlDeleteLease, tenantID, id).Error
	}, func() any {
		if extend {
			return newExp
		}
		return nil
	})
	return newExp, err
}

// validHandle reports whether id looks like a handle newID made, so that nothing else reaches SQL.
func validHandle(id, prefix string) bool {
	if !strings.HasPrefix(id, prefix) || len(id) != len(prefix)+26 {
		return false
	}
	for _, r := range id[len(prefix):] {
		if (r < 'a' || r > 'z') && (r < '2' || r > '7') {
			return false
		}
	}
	return true
}

// SweepLeases deletes the rows of up to batch leases that expired by the engine's clock (their
// slots are free already: decisions count only unexpired leases) and returns how many.
func (e *Engine) SweepLeases(ctx context.Context, batch int) (int64, error) {
	if batch <= 0 {
		batch = DefaultSweepBatch
	}
	var n int64
	err := e.closeJob(db.WithPurpose(ctx, db.PurposeSweep), SystemTenant, func(tx *gorm.DB, _ *job) error { // every tenant's
		now, err := e.nowIn(tx)
		if err != nil {
			return err
		}
		res := tx.Exec(sqlSweepLeases, now, batch)
		n = res.RowsAffected
		return res.Error
	}, nil) // a sweep has no answer to store
	if err != nil {
		return 0, fmt.Errorf("limiter: sweep leases: %w", err)
	}
	return n, nil
}

// LeaseStats summarises the unexpired leases of a limit at the engine's clock: how many, when the
// oldest was acquired (ms since the epoch, 0 when none) and how many expire within soonMs.
type LeaseStats struct {
	Open, ExpiringSoon int64
	Oldest             int64
	Now                int64
}

// OpenLeases summarises a limit's unexpired leases and lists up to n of them, oldest first.
func (e *Engine) OpenLeases(ctx context.Context, tenantID int64, name string, soonMs int64, n int) (LeaseStats, []Lease, error) {
	var stats LeaseStats
	var out []Lease
	err := e.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		now, err := e.nowIn(tx)
		if err != nil {
			return err
		}
		var s struct {
			N      int64
			Oldest *int64
			Soon   int64
		}
		if err := tx.Raw(sqlLeaseStats, now+soonMs, tenantID, name, now).Scan(&s).Error; err != nil {
			return err
		}
		stats = LeaseStats{Open: s.N, ExpiringSoon: s.Soon, Now: now}
		if s.Oldest != nil {
			stats.Oldest = *s.Oldest
		}
		return tx.Raw(sqlOpenLeases, tenantID, name, now, n).Scan(&out).Error
	})
	if err != nil {
		return LeaseStats{}, nil, fmt.Errorf("limiter: open leases: %w", err)
	}
	return stats, out, nil
}
