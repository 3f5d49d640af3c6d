package tenants

import "time"

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

func (s *Service) cachePrincipal(hash string, kind KeyKind, p Principal, suspended bool) {
	if s.authCacheTTL <= 0 {
		return
	}
	s.authMu.Lock()
	if len(s.authCache) >= maxCachedKeys {
		s.authCache = make(map[string]cachedKey)
	}
	s.authCache[hash] = cachedKey{principal: p, kind: kind, suspended: suspended, expires: time.Now().Add(s.authCacheTTL)}
	s.authMu.Unlock()
}

// forgetKey evicts one key hash, or everything when hash is "" (after a LISTEN reconnect, when
// notifications may have been missed).
func (s *Service) forgetKey(hash string) {
	s.authMu.Lock()
	if hash == "" {
		s.authCache = make(map[string]cachedKey)
	} else {
		delete(s.authCache, hash)
	}
	s.authMu.Unlock()
}
