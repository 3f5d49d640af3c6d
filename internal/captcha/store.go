package captcha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/loop"
)

// Store limits.
const (
	// MaxSessionTTL bounds an authorization's lifetime.
	MaxSessionTTL = 366 * 24 * time.Hour
	// DefaultListLimit and MaxListLimit bound ListSessions.
	DefaultListLimit = 100
	MaxListLimit     = 1000

	// usedGrace keeps a consumed challenge in the replay store this long after it expires, so
	// that an app instance whose clock runs behind (and so still accepts the challenge) can
	// never find its row already swept by an instance whose clock runs ahead.
	usedGrace = 10 * time.Minute

	// DefaultSweepInterval is how often Run deletes expired sessions and consumed challenges.
	// Expired rows are already ignored by every read; sweeping only bounds the tables.
	DefaultSweepInterval = 10 * time.Minute
	// sweepBatch is the most rows one sweep transaction deletes.
	sweepBatch = 1000
)

// Store records consumed challenges and authorized sessions in the database. Session IDs are
// stored only as HashSessionID. Every method takes the tenant explicitly and touches only that
// tenant's rows.
type Store struct {
	db            *db.DB
	now           func() time.Time
	log           *slog.Logger
	sweepInterval time.Duration
	swept         func(deleted int, err error) // tests only: called after each background sweep
}

// StoreOption tunes NewStore.
type StoreOption func(*Store)

// WithLogger sets where Run reports failed sweeps (nowhere by default).
func WithLogger(log *slog.Logger) StoreOption {
	return func(s *Store) {
		if log != nil {
			s.log = log
		}
	}
}

// WithSweepInterval sets how often Run sweeps (DefaultSweepInterval if d <= 0).
func WithSweepInterval(d time.Duration) StoreOption {
	return func(s *Store) {
		if d > 0 {
			s.sweepInterval = d
		}
	}
}

// SessionInfo describes an active (authorized, unrevoked, unexpired) session.
type SessionInfo struct {
	TenantID     int64
	SessionHash  string    // HashSessionID of the session ID
	AuthorizedAt time.Time // when the latest solved challenge authorized it
	ExpiresAt    time.Time
}

// sessionRow maps captcha_sessions; it never leaves the package.
type sessionRow struct {
	TenantID    int64      `gorm:"column:tenant_id"`
	SessionHash string     `gorm:"column:session_hash"`
	CreatedAt   time.Time  `gorm:"column:created_at"`
	ExpiresAt   time.Time  `gorm:"column:expires_at"`
	RevokedAt   *time.Time `gorm:"column:revoked_at"`
}

func (r sessionRow) info() SessionInfo {
	return SessionInfo{TenantID: r.TenantID, SessionHash: r.SessionHash, AuthorizedAt: r.CreatedAt.UTC(), ExpiresAt: r.ExpiresAt.UTC()}
}

// NewStore returns a Store on d reading time from now (time.Now when nil). It starts nothing:
// Run sweeps expired rows in the background.
func NewStore(d *db.DB, now func() time.Time, opts ...StoreOption) *Store {
	if now == nil {
		now = time.Now
	}
	s := &Store{db: d, now: now, log: slog.New(slog.DiscardHandler), sweepInterval: DefaultSweepInterval}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Run deletes expired sessions and consumed challenges (SweepExpired, at the Store's clock)
// every sweep interval until ctx ends, and returns nil once a sweep in progress has stopped.
// A failed sweep is logged and simply repeated at the next interval. Call it once.
func (s *Store) Run(ctx context.Context) error {
	loop.Every(ctx, s.sweepInterval, 0, s.sweep)
	return nil
}

func (s *Store) sweep(ctx context.Context) {
	n, err := s.SweepExpired(ctx, s.now(), sweepBatch)
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.Warn("captcha sweep failed", "err", err)
	case err == nil:
		s.log.Debug("captcha sweep done", "deleted", n)
	}
	if s.swept != nil {
		s.swept(n, err)
	}
}

// dbTime is the form in which times go to the database: UTC, because SQLite compares the
// stored text and only one zone keeps that order chronological, and microseconds, because
// that is PostgreSQL's resolution and values must read back as they were written.
func dbTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// Authorize consumes the solved challenge and authorizes sessionID of tenantID until now+ttl,
// in one serializable transaction: of any number of concurrent calls with one challenge, on
// any number of app instances, exactly one succeeds and the others get ErrReplay. Authorizing
// an already authorized, expired or revoked session renews it: revocation ends the current
// authorization, and a new solved challenge is a new proof of work.
func (s *Store) Authorize(ctx context.Context, tenantID int64, sessionID string, solved Solved, ttl time.Duration) (time.Time, error) {
	if err := ValidateSessionID(sessionID); err != nil {
		return time.Time{}, err
	}
	hash := HashSessionID(sessionID)
	// Verify bound the challenge to this tenant and session already; checking again here keeps
	// a caller that mixes up its arguments from authorizing the wrong session.
	if solved.TenantID != tenantID {
		return time.Time{}, fmt.Errorf("captcha: authorize: %w", ErrWrongTenant)
	}
	if solved.SessionHash != hash {
		return time.Time{}, fmt.Errorf("captcha: authorize: %w", ErrWrongSession)
	}
	if solved.ID == "" {
		return time.Time{}, fmt.Errorf("captcha: authorize: empty challenge ID: %w", ErrMalformedPayload)
	}
	if ttl <= 0 || ttl > MaxSessionTTL {
		return time.Time{}, fmt.Errorf("captcha: authorize: ttl %s outside (0, %s]", ttl, MaxSessionTTL)
	}
	var expiresAt time.Time
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		now := dbTime(s.now()) // one clock reading per attempt
		if !now.Before(solved.ExpiresAt) {
			return ErrExpired
		}
		expiresAt = dbTime(now.Add(ttl))
		// ON CONFLICT DO NOTHING is portable (PostgreSQL, SQLite, CockroachDB). A concurrent
		// first use either conflicts here (no row inserted: a replay) or, on PostgreSQL, fails
		// serialization and is retried by db.Serializable, and then conflicts.
		res := tx.Exec(`INSERT INTO captcha_used (tenant_id, challenge, expires_at) VALUES (?, ?, ?)
			ON CONFLICT (tenant_id, challenge) DO NOTHING`,
			tenantID, solved.ID, dbTime(solved.ExpiresAt.Add(usedGrace)))
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return ErrReplay
		}
		return tx.Exec(`INSERT INTO captcha_sessions (tenant_id, session_hash, created_at, expires_at, revoked_at)
			VALUES (?, ?, ?, ?, NULL)
			ON CONFLICT (tenant_id, session_hash) DO UPDATE
			SET created_at = excluded.created_at, expires_at = excluded.expires_at, revoked_at = NULL`,
			tenantID, hash, now, expiresAt).Error
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("captcha: authorize: %w", err)
	}
	return expiresAt, nil
}

// Session returns sessionID's active authorization. It returns ErrNotFound when the session
// was never authorized, was revoked or has expired: to a caller deciding whether to trust a
// session, those are the same answer, and the API maps it to one 404.
func (s *Store) Session(ctx context.Context, tenantID int64, sessionID string) (SessionInfo, error) {
	if err := ValidateSessionID(sessionID); err != nil {
		return SessionInfo{}, err
	}
	var rows []sessionRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		rows = rows[:0]
		return tx.Raw(`SELECT tenant_id, session_hash, created_at, expires_at, revoked_at FROM captcha_sessions
			WHERE tenant_id = ? AND session_hash = ? AND revoked_at IS NULL AND expires_at > ?`,
			tenantID, HashSessionID(sessionID), dbTime(s.now())).Scan(&rows).Error
	})
	if err != nil {
		return SessionInfo{}, fmt.Errorf("captcha: session: %w", err)
	}
	if len(rows) == 0 {
		return SessionInfo{}, fmt.Errorf("captcha: session: %w", ErrNotFound)
	}
	return rows[0].info(), nil
}

// IsAuthorized reports whether sessionID currently holds an active authorization of tenantID.
// Unlike Session it answers false rather than ErrNotFound, for the decision hot path.
func (s *Store) IsAuthorized(ctx context.Context, tenantID int64, sessionID string) (bool, error) {
	_, err := s.Session(ctx, tenantID, sessionID)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotFound):
		return false, nil
	default:
		return false, err
	}
}

// Revoke ends sessionID's active authorization. It returns ErrNotFound when there is none
// (unknown, already revoked or expired). The row stays until it expires, so that the
// dashboard's audit of it is not lost early; SweepExpired removes it.
func (s *Store) Revoke(ctx context.Context, tenantID int64, sessionID string) error {
	if err := ValidateSessionID(sessionID); err != nil {
		return err
	}
	return s.revokeHash(ctx, tenantID, HashSessionID(sessionID), "revoke")
}

// RevokeHash is Revoke for a caller that knows only the session's hash (HashSessionID), such as
// the dashboard, which lists sessions by hash because the raw ID is never stored. A string that
// is not a session hash matches nothing, so it is ErrNotFound like any other inactive session.
func (s *Store) RevokeHash(ctx context.Context, tenantID int64, sessionHash string) error {
	if !validSessionHash(sessionHash) {
		return fmt.Errorf("captcha: revoke hash: %w", ErrNotFound)
	}
	return s.revokeHash(ctx, tenantID, sessionHash, "revoke hash")
}

// validSessionHash reports whether h has the form of HashSessionID: 64 lowercase hex digits.
func validSessionHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func (s *Store) revokeHash(ctx context.Context, tenantID int64, hash, op string) error {
	var n int64
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		now := dbTime(s.now())
		res := tx.Exec(`UPDATE captcha_sessions SET revoked_at = ?
			WHERE tenant_id = ? AND session_hash = ? AND revoked_at IS NULL AND expires_at > ?`,
			now, tenantID, hash, now)
		n = res.RowsAffected
		return res.Error
	})
	if err != nil {
		return fmt.Errorf("captcha: %s: %w", op, err)
	}
	if n == 0 {
		return fmt.Errorf("captcha: %s: %w", op, ErrNotFound)
	}
	return nil
}

// ListSessions returns up to limit of tenantID's active sessions, most recently authorized
// first (limit <= 0 means DefaultListLimit; it is capped at MaxListLimit).
func (s *Store) ListSessions(ctx context.Context, tenantID int64, limit int) ([]SessionInfo, error) {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	var rows []sessionRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		rows = rows[:0]
		return tx.Raw(`SELECT tenant_id, session_hash, created_at, expires_at, revoked_at FROM captcha_sessions
			WHERE tenant_id = ? AND revoked_at IS NULL AND expires_at > ?
			ORDER BY created_at DESC, session_hash LIMIT ?`,
			tenantID, dbTime(s.now()), limit).Scan(&rows).Error
	})
	if err != nil {
		return nil, fmt.Errorf("captcha: list sessions: %w", err)
	}
	out := make([]SessionInfo, len(rows))
	for i, r := range rows {
		out[i] = r.info()
	}
	return out, nil
}

// The sweep's statements: up to ? (the second argument) consumed challenges, or sessions, that
// expired before ?. Row-value IN with a LIMITed subquery is the portable batched delete:
// PostgreSQL and CockroachDB have no DELETE ... LIMIT, SQLite only with a compile-time option.
const (
	sqlSweepUsed = `DELETE FROM captcha_used WHERE (tenant_id, challenge) IN
		(SELECT tenant_id, challenge FROM captcha_used WHERE expires_at < ? LIMIT ?)`
	sqlSweepSessions = `DELETE FROM captcha_sessions WHERE (tenant_id, session_hash) IN
		(SELECT tenant_id, session_hash FROM captcha_sessions WHERE expires_at < ? LIMIT ?)`
)

// SweepExpired deletes consumed challenges and sessions (revoked or not) that expired before
// now, across all tenants, in transactions of at most batch rows each (batch <= 0 means 1000)
// so that a large backlog never holds locks for long. It returns how many rows it deleted.
// Consumed challenges stay usedGrace past their expiry (see Authorize).
func (s *Store) SweepExpired(ctx context.Context, now time.Time, batch int) (int, error) {
	if batch <= 0 {
		batch = sweepBatch
	}
	cutoff := dbTime(now)
	total := 0
	for _, q := range []string{sqlSweepUsed, sqlSweepSessions} {
		for {
			if err := ctx.Err(); err != nil {
				return total, fmt.Errorf("captcha: sweep: %w", err)
			}
			var n int64
			err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
				res := tx.Exec(q, cutoff, batch)
				n = res.RowsAffected
				return res.Error
			})
			if err != nil {
				return total, fmt.Errorf("captcha: sweep: %w", err)
			}
			total += int(n)
			if n < int64(batch) {
				break
			}
		}
	}
	return total, nil
}
