// Package tenants stores Sluice's tenants, their API keys (secret and publishable), dashboard
// users and admin sessions, server-wide settings and the audit log.
//
// Every method that touches a tenant-owned row takes the tenant ID as an explicit argument and
// filters on it, so a caller holding tenant A's principal can never reach tenant B's rows by
// passing B's row IDs. GORM models (models.go) never leave the package: methods return the
// plain domain types declared next to them.
package tenants

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/loop"
)

// Sentinel errors; callers check them with errors.Is. Each carries its problem code and a
// client-safe message (apperr), so a surface renders them without knowing this package.
var (
	// ErrNotFound means the row does not exist, or belongs to another tenant.
	ErrNotFound = apperr.New(apperr.NotFound, "not found")
	// ErrConflict means a unique name (tenant name, user email) is already taken.
	ErrConflict = apperr.New(apperr.Conflict, "conflict")
	// ErrInvalid means an argument failed validation. The package returns copies of it whose
	// Message says what is wrong and whose Field names the argument; errors.Is still matches.
	ErrInvalid = apperr.New(apperr.InvalidRequest, "invalid input")
	// ErrUnauthorized means a credential (API key, password, admin session) was not accepted.
	// It deliberately does not say why.
	ErrUnauthorized = apperr.New(apperr.Unauthorized, "the credentials were not accepted")
	// ErrTenantSuspended means the key is valid but an operator has suspended its tenant, or is
	// deleting it (which suspends it first).
	ErrTenantSuspended = apperr.New(apperr.TenantSuspended, "this tenant is suspended (its data is kept until an operator resumes it) or being deleted; its keys are refused")
	// ErrTenantBeingDeleted refuses a change in a tenant whose deletion has begun (changeableTenant).
	ErrTenantBeingDeleted = apperr.New(apperr.Conflict, "the tenant is being deleted: nothing can be changed in it, and it cannot be resumed; "+
		"a deletion cut short is finished by deleting it again")
)

// DefaultFlushInterval is how often recorded key usage is written to the database. Writing
// last_used_at on every request would turn every authenticated read into a write.
const DefaultFlushInterval = 10 * time.Second

// finalFlushTimeout bounds the flush Run makes on the way out, after ctx has ended.
const finalFlushTimeout = 10 * time.Second

// Service is the tenants store. It is safe for concurrent use. Its background work (writing
// last-used times, hearing other instances' key revocations) runs in Run, which the owner starts
// once and stops by ending its context.
type Service struct {
	db     *db.DB
	pepper []byte
	macs   sync.Pool // HMAC-SHA256 keyed with pepper: Reset reuses the keyed state, New re-derives it
	now    func() time.Time

	flushInterval time.Duration
	flushed       chan struct{} // tests only: receives (non-blocking) after each background flush

	mu      sync.Mutex
	pending map[string]keyUse // key ID -> latest use not yet written

	// The authentication cache (authcache.go): key hash -> principal, for authCacheTTL.
	authCacheTTL time.Duration
	authMu       sync.RWMutex
	authCache    map[string]cachedKey
	// authGen counts the evictions (forgetKey), under authMu. A lookup caches what it read only
	// if no eviction happened since it began, and only lookups begun after the same eviction
	// share an answer (lookupShared), so a revocation or suspension that commits while a lookup
	// is reading is neither cached back nor handed to a later request by that lookup.
	authGen uint64
	// afterKeyRead, when set (tests), runs in each lookup between its read and its caching.
	afterKeyRead func()
	// authFlight makes the concurrent misses of one key share one lookup (authcache.go), and
	// authLookups counts the lookups (tests).
	authFlight    singleflight.Group
	authLookups   atomic.Int64
	listening     chan struct{} // closed once revocations from other instances are heard
	listeningOnce sync.Once

	events EventSink // nil: events go nowhere

	defaultPlan Plan // plans.go: the plan of tenants without one of their own
	planMu      sync.RWMutex
	planCache   map[int64]cachedPlan
	// planGen counts the plan changes made here, under planMu. A read caches what it read only
	// if none was made meanwhile (the change may have committed after the read's snapshot).
	planGen uint64
	// planFlight makes the concurrent misses of one tenant's plan share one read (PlanOf).
	planFlight singleflight.Group
	rateNear   map[int64]time.Time // when each tenant was last told it is near its plan's rate

	dummyOnce sync.Once
	dummyHash string // password hash verified when a login names an unknown email
}

type keyUse struct {
	tenantID int64
	at       time.Time
}

// Option tunes NewService.
type Option func(*Service)

// EventSink receives the events of changes to a tenant's keys and limits, inside the
// transaction that records them, so that an event exists if and only if its change does
// (the webhooks' outbox).
type EventSink interface {
	Enqueue(tx *gorm.DB, tenantID int64, event string, data any) error
}

// WithEvents sends events to sink.
func WithEvents(sink EventSink) Option {
	return func(s *Service) { s.events = sink }
}

// WithFlushInterval sets how often last-used times are written (DefaultFlushInterval if d <= 0).
func WithFlushInterval(d time.Duration) Option {
	return func(s *Service) {
		if d > 0 {
			s.flushInterval = d
		}
	}
}

// WithAuthCacheTTL sets how long a successful key lookup is reused (DefaultAuthCacheTTL; 0
// disables the cache). Revocation through this Service takes effect at once; through another
// instance at once on PostgreSQL (LISTEN/NOTIFY, while Run runs), and within the TTL at worst.
func WithAuthCacheTTL(d time.Duration) Option {
	return func(s *Service) { s.authCacheTTL = max(d, 0) }
}

// NewService returns a Service over d. pepper is the server secret that API key secrets are
// HMAC-ed with before storage; now is the clock (time.Now if nil). It starts nothing: Run does
// the background work.
func NewService(d *db.DB, pepper []byte, now func() time.Time, opts ...Option) *Service {
	if now == nil {
		now = time.Now
	}
	s := &Service{
		db:            d,
		pepper:        append([]byte(nil), pepper...),
		now:           now,
		flushInterval: DefaultFlushInterval,
		pending:       make(map[string]keyUse),
		authCacheTTL:  DefaultAuthCacheTTL,
		authCache:     make(map[string]cachedKey),
		listening:     make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Run does the Service's background work until ctx ends: it writes recorded last-used times
// every flush interval, and on PostgreSQL listens for keys revoked by other instances (evicting
// them from the authentication cache). When ctx ends it waits for both to stop, flushes the
// last-used times once more (with a fresh deadline of its own, since ctx is over) and returns
// that flush's error, or nil. Call it once.
func (s *Service) Run(ctx context.Context) error {
	if s.db.Dialect != db.Postgres {
		s.markListening() // one process per SQLite file: there is nobody else to hear
	}
	var wg sync.WaitGroup
	wg.Go(func() { loop.Every(ctx, s.flushInterval, 0, s.backgroundFlush) })
	wg.Go(func() { s.db.Listen(ctx, revocationChannel, s.revoked) })
	wg.Wait()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalFlushTimeout)
	defer cancel()
	return s.Flush(fctx)
}

// Listening is closed once the Service hears revocations made through other instances: on
// PostgreSQL when Run's LISTEN connection is first established, on SQLite when Run starts. A
// principal cached before then may have been evicted by the connect (see db.Listen), not by a
// notification.
func (s *Service) Listening() <-chan struct{} { return s.listening }

func (s *Service) markListening() { s.listeningOnce.Do(func() { close(s.listening) }) }

// revoked is the LISTEN callback: payload is a revoked key's hash, or "" after a (re)connect.
func (s *Service) revoked(payload string) {
	s.forgetKey(payload)
	if payload == "" {
		s.markListening()
	}
}

// clock returns the current time in the form stored: UTC, at PostgreSQL's microsecond precision,
// so that both dialects round-trip the same value.
func (s *Service) clock() time.Time {
	return s.now().UTC().Truncate(time.Microsecond)
}

// first loads one row into dst, turning "no row" into ErrNotFound.
func first(tx *gorm.DB, dst any, query string, args ...any) error {
	err := tx.Where(query, args...).Take(dst).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return ErrNotFound
	}
	return err
}

// wrap adds the package and operation to err, leaving sentinels reachable through errors.Is.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("tenants: %s: %w", op, err)
}

// invalid returns a copy of ErrInvalid about field whose message is a human-readable reason,
// safe to show to the caller.
func invalid(field, format string, args ...any) error {
	e := ErrInvalid.WithField(field)
	e.Message = fmt.Sprintf(format, args...)
	return e
}
