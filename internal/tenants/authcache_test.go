package tenants

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// secondInstance opens another Service on the same database, as a second app process would.
func secondInstance(t *testing.T, url string, opts ...Option) *Service {
	t.Helper()
	svc := NewService(testkit.OpenURL(t, url), testPepper, nil, opts...)
	testkit.Run(t, svc.Run)
	return svc
}

// waitListening waits until svc hears revocations made through other instances.
func waitListening(t *testing.T, svc *Service) {
	t.Helper()
	select {
	case <-svc.Listening():
	case <-time.After(30 * time.Second):
		t.Fatal("waited 30 s for the Service's LISTEN connection to come up")
	}
}

// waitRefused polls until svc refuses secret, failing after limit.
func waitRefused(t *testing.T, svc *Service, secret string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		_, err := svc.Authenticate(context.Background(), secret, KindSecret)
		if errors.Is(err, ErrUnauthorized) {
			return time.Since(start)
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(start) > limit {
			t.Fatalf("revoked key still accepted after %v", limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cachedKeyEnv is a Service on url whose cache keeps entries for an hour (only an eviction ends
// one within a test), with tenant "acme" and one secret key of it.
func cachedKeyEnv(t *testing.T, url string) (e *env, tn Tenant, k APIKey, secret string) {
	t.Helper()
	e = newEnv(t, url, WithAuthCacheTTL(time.Hour))
	tn = e.tenant(t, "acme")
	k, secret, err := e.svc.CreateKey(e.ctx, tn.ID, KindSecret, "x", "test")
	if err != nil {
		t.Fatal(err)
	}
	return e, tn, k, secret
}

func TestRevocationOnAnotherInstanceReachesTheCacheThroughNotify(t *testing.T) {
	url := testkit.URL(t, db.Postgres)
	a := newEnv(t, url, WithAuthCacheTTL(time.Hour)) // only NOTIFY can evict within the test
	b := secondInstance(t, url, WithAuthCacheTTL(time.Hour))
	tn, err := a.svc.CreateTenant(a.ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	k, secret, err := a.svc.CreateKey(a.ctx, tn.ID, KindSecret, "x", "test")
	if err != nil {
		t.Fatal(err)
	}
	// LISTEN's (re)connect empties the cache, so b must be listening before it caches the key:
	// otherwise a late connect, not the NOTIFY, could be what evicts it below.
	waitListening(t, b)
	for range 2 { // the second call is served from the cache
		if _, err := b.Authenticate(a.ctx, secret, KindSecret); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := b.cachedPrincipal(b.hashKey(secret), KindSecret); !ok {
		t.Fatal("the other instance did not cache the key; only a cached key proves the NOTIFY")
	}
	if err := a.svc.RevokeKey(a.ctx, tn.ID, k.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.svc.Authenticate(a.ctx, secret, KindSecret); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("the revoking instance still accepts the key: %v", err)
	}
	took := waitRefused(t, b, secret, 3*time.Second)
	t.Logf("other instance refused the revoked key after %v", took)
}

func TestCachedKeyExpiresWithinTheTTLWithoutNotify(t *testing.T) {
	url := testkit.URL(t, db.SQLite)
	a := newEnv(t, url)
	b := secondInstance(t, url, WithAuthCacheTTL(300*time.Millisecond))
	tn, _ := a.svc.CreateTenant(a.ctx, "acme")
	k, secret, _ := a.svc.CreateKey(a.ctx, tn.ID, KindSecret, "x", "test")
	if _, err := b.Authenticate(a.ctx, secret, KindSecret); err != nil {
		t.Fatal(err)
	}
	if err := a.svc.RevokeKey(a.ctx, tn.ID, k.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if took := waitRefused(t, b, secret, time.Second); took > 500*time.Millisecond {
		t.Fatalf("took %v, more than the 300 ms TTL allows", took)
	}
}

func TestAuthCacheIsUsedForRepeatLookups(t *testing.T) {
	e := envOn(t, testkit.Open(t, db.SQLite))
	tn, _ := e.svc.CreateTenant(e.ctx, "acme")
	_, secret, _ := e.svc.CreateKey(e.ctx, tn.ID, KindSecret, "x", "test")
	if _, err := e.svc.Authenticate(e.ctx, secret, KindSecret); err != nil {
		t.Fatal(err)
	}
	// With the database closed, only the cache can still answer.
	_ = e.db.Close()
	if _, err := e.svc.Authenticate(e.ctx, secret, KindSecret); err != nil {
		t.Fatalf("repeat lookup was not served from the cache: %v", err)
	}
	if _, err := e.svc.Authenticate(e.ctx, secret, KindPublishable); err == nil {
		t.Fatal("the cache ignored the key kind")
	}
}

// TestConcurrentMissesOfOneKeyShareOneLookup: when a busy key's cache entry expires, the 32
// requests that miss it at once are served by one lookup (a few at most, when one arrives just
// as a lookup ends), not one query each: the stampede the engine issue measured at 12 lookup
// transactions a second at 32 connections.
func TestConcurrentMissesOfOneKeyShareOneLookup(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		e, tn, _, secret := cachedKeyEnv(t, url)
		if _, err := e.svc.Authenticate(e.ctx, secret, KindSecret); err != nil {
			t.Fatal(err)
		}
		hash := e.svc.hashKey(secret)
		e.svc.authMu.Lock()
		c := e.svc.authCache[hash]
		c.expires = time.Now().Add(-time.Millisecond) // expired: the next requests all miss
		e.svc.authCache[hash] = c
		e.svc.authMu.Unlock()
		before := e.svc.authLookups.Load()

		const callers = 32
		start := make(chan struct{})
		errs := make(chan error, callers)
		for range callers {
			go func() {
				<-start
				p, err := e.svc.Authenticate(e.ctx, secret, KindSecret)
				if err == nil && p.TenantID != tn.ID {
					err = errors.New("authenticated as another tenant")
				}
				errs <- err
			}()
		}
		close(start)
		for range callers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if n := e.svc.authLookups.Load() - before; n < 1 || n > 4 {
			t.Fatalf("%d concurrent requests after the entry expired made %d lookups, want 1 (a few at most)", callers, n)
		}
	})
}

// TestRevocationDuringALookupIsNotUndoneByIt: a key revoked while a lookup of it is reading
// (the lookup read the row before the revocation committed) is refused by the next request.
// The lookup must not cache what it read, or the revoked key would keep working for the
// cache's TTL on this instance, whose README promise is "at once". SQLite is the sharp case:
// on PostgreSQL the instance's own LISTEN also evicts the key, a moment later.
func TestRevocationDuringALookupIsNotUndoneByIt(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		e, tn, k, secret := cachedKeyEnv(t, url)
		revoked := false
		e.svc.afterKeyRead = func() {
			if !revoked {
				revoked = true
				if err := e.svc.RevokeKey(e.ctx, tn.ID, k.ID, "test"); err != nil {
					t.Error(err)
				}
			}
		}
		// This request's lookup read the key before the revocation: it may pass (it began first).
		if _, err := e.svc.Authenticate(e.ctx, secret, KindSecret); err != nil {
			t.Fatal(err)
		}
		if !revoked {
			t.Fatal("the lookup never reached the hook between its read and its caching")
		}
		if _, err := e.svc.Authenticate(e.ctx, secret, KindSecret); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("the request after the revocation: err %v, want ErrUnauthorized (served from a stale cache entry)", err)
		}
	})
}

// TestARequestAfterASuspensionDoesNotShareAnEarlierLookup: a request that misses the cache
// after a tenant was suspended must not take the answer of a lookup of the same key that was
// already reading before the suspension (concurrent misses share one lookup): it looks up anew
// and is refused. Request A's lookup suspends the tenant between its read and its caching,
// then starts request B and waits for B's own lookup to arrive.
func TestARequestAfterASuspensionDoesNotShareAnEarlierLookup(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		e, tn, _, secret := cachedKeyEnv(t, url)
		var lookups atomic.Int32
		bLookedUp := make(chan struct{})
		bResult := make(chan error, 1)
		e.svc.afterKeyRead = func() {
			switch lookups.Add(1) {
			case 1: // request A's lookup, which read the tenant before the suspension
				if err := e.svc.SetSuspended(e.ctx, tn.ID, true, "test"); err != nil {
					t.Error(err)
					return
				}
				go func() {
					_, err := e.svc.Authenticate(e.ctx, secret, KindSecret)
					bResult <- err
				}()
				select {
				case <-bLookedUp:
				case <-time.After(30 * time.Second):
					t.Error("waited 30 s for request B (after the suspension) to make a lookup of its own: it shared A's")
				}
			case 2: // request B's own lookup
				close(bLookedUp)
			}
		}
		if _, err := e.svc.Authenticate(e.ctx, secret, KindSecret); err != nil {
			t.Fatalf("request A, which began before the suspension: %v", err)
		}
		if err := <-bResult; !errors.Is(err, ErrTenantSuspended) {
			t.Fatalf("request B, after the suspension: err %v, want ErrTenantSuspended", err)
		}
	})
}
