package tenants

import (
	"errors"
	"testing"

	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestARevokedKeyStaysRefusedOnEveryLaterRequest: after a revocation the key's next lookup reads
// the revoked row and refuses it. That lookup must not cache the key: the cache stores only who a
// key authenticates as, not that it is revoked, so a cached entry would let every later request
// through for the cache's TTL (an hour here). Not just the first request after the revocation,
// each one is refused. On PostgreSQL the instance's own LISTEN evicts the key once more, a moment
// after the revocation; with three requests, at least one still follows a lookup that would have
// cached the key, wherever that eviction lands.
func TestARevokedKeyStaysRefusedOnEveryLaterRequest(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		e, tn, k, secret := cachedKeyEnv(t, url)
		if _, err := e.svc.Authenticate(e.ctx, secret, KindSecret); err != nil {
			t.Fatal(err) // cached before the revocation, as a key in use is
		}
		if err := e.svc.RevokeKey(e.ctx, tn.ID, k.ID, "test"); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 3; i++ {
			if _, err := e.svc.Authenticate(e.ctx, secret, KindSecret); !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("request %d after the revocation: err %v, want ErrUnauthorized", i, err)
			}
		}
	})
}
