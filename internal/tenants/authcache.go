package tenants

import (
	"context"
	"errors"
	"strconv"
	"time"

	"golang.org/x/sync/singleflight"
	"gorm.io/gorm"
)

// DefaultAuthCacheTTL bounds how long a key revoked where this instance cannot hear of it (the
// CLI against SQLite with the server running, or a lost LISTEN connection) keeps working.
const DefaultAuthCacheTTL = 2 * time.Second

// revocationChannel carries the hashes of revoked keys between instances (PostgreSQL NOTIFY).
const revocationChannel = "sluice_key_revoked"

// maxCachedKeys bounds the cache; past it the cache starts over rather than grow without limit.
const maxCachedKeys = 100_000

type cachedKey struct {
	principal Principal
	kind      KeyKind
	suspended bool // the key's tenant is suspended: the key is refused
	expires   time.Time
}

// cachedPrincipal returns a fresh cached lookup of hash, saving a query per API request.
func (s *Service) cachedPrincipal(hash string, kind KeyKind) (cachedKey, bool) {
	if s.authCacheTTL <= 0 {
		return cachedKey{}, false
	}
	s.authMu.RLock()
	c, ok := s.authCache[hash]
	s.authMu.RUnlock()
	if !ok || c.kind != kind || !time.Now().Before(c.expires) {
		return cachedKey{}, false
	}
	return c, true
}

// authGeneration is the number of evictions so far (authGen).
func (s *Service) authGeneration() uint64 {
	s.authMu.RLock()
	defer s.authMu.RUnlock()
	return s.authGen
}

// cachePrincipal caches what a lookup that began at eviction count gen read, unless a key was
// evicted since: the eviction may be a revocation the lookup's read did not see.
func (s *Service) cachePrincipal(gen uint64, hash string, kind KeyKind, p Principal, suspended bool) {
	if s.authCacheTTL <= 0 {
		return
	}
	s.authMu.Lock()
	defer s.authMu.Unlock()
	if s.authGen != gen {
		return
	}
	if len(s.authCache) >= maxCachedKeys {
		s.authCache = make(map[string]cachedKey)
	}
	s.authCache[hash] = cachedKey{principal: p, kind: kind, suspended: suspended, expires: time.Now().Add(s.authCacheTTL)}
}

// forgetKey evicts one key hash, or everything when hash is "" (after a LISTEN reconnect, when
// notifications may have been missed).
func (s *Service) forgetKey(hash string) {
	s.authMu.Lock()
	s.authGen++ // the lookups reading now must not cache what they read (cachePrincipal)
	if hash == "" {
		s.authCache = make(map[string]cachedKey)
	} else {
		delete(s.authCache, hash)
	}
	s.authMu.Unlock()
}

// keyLookup is what the database says of a key hash: its row and whether its tenant is suspended.
type keyLookup struct {
	row       apiKeyRow
	suspended bool
}

// lookupShared is lookupKey, with the concurrent misses of the same hash sharing one lookup
// (shared): when a busy key's entry expires, every request in flight misses at once, and one
// query serves them all instead of one each. Only lookups that began after the same eviction are
// shared (the flight's key carries the eviction count): a request that arrives after a revocation
// or a suspension never takes the answer of a lookup that may have read before it.
func (s *Service) lookupShared(ctx context.Context, hash string) (keyLookup, error) {
	gen := s.authGeneration()
	return shared(ctx, &s.authFlight, strconv.FormatUint(gen, 10)+":"+hash, func(ctx context.Context) (keyLookup, error) {
		return s.lookupKey(ctx, gen, hash)
	})
}

// shared runs read once for the concurrent callers with the same key, with the first caller's
// context. A caller whose own context is fine does not inherit the cancellation of the caller
// whose context the shared read ran with: it reads on its own.
func shared[T any](ctx context.Context, g *singleflight.Group, key string, read func(context.Context) (T, error)) (T, error) {
	ch := g.DoChan(key, func() (any, error) { return read(ctx) })
	select {
	case r := <-ch:
		if r.Err != nil && r.Shared && ctx.Err() == nil && (errors.Is(r.Err, context.Canceled) || errors.Is(r.Err, context.DeadlineExceeded)) {
			return read(ctx)
		}
		v, _ := r.Val.(T)
		return v, r.Err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// lookupKey reads hash's key and tenant, and caches the principal of a key that is not revoked
// unless a key was evicted since gen, the eviction count read before the lookup began (an
// eviction after that may be a revocation or suspension its read missed).
func (s *Service) lookupKey(ctx context.Context, gen uint64, hash string) (keyLookup, error) {
	s.authLookups.Add(1)
	var k keyLookup
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		// The only lookup not filtered by tenant: the key is what tells us the tenant.
		if err := first(tx, &k.row, "hash = ?", hash); err != nil {
			return err
		}
		var t tenantRow
		if err := first(tx, &t, "id = ?", k.row.TenantID); err != nil {
			return err
		}
		// A tenant being deleted is suspended by its deletion's first step; should a release that
		// does not know the mark have resumed it (a rolling upgrade), its keys stay refused.
		k.suspended = t.SuspendedAt != nil || t.DeletingAt != nil
		return nil
	})
	if s.afterKeyRead != nil {
		s.afterKeyRead()
	}
	if err == nil && k.row.RevokedAt == nil {
		s.cachePrincipal(gen, hash, KeyKind(k.row.Kind), Principal{TenantID: k.row.TenantID, KeyID: k.row.ID}, k.suspended)
	}
	return k, err
}
