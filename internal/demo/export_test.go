package demo

import (
	"crypto/hmac"
	"crypto/sha256"

	"github.com/sluice-dev/sluice/internal/tenants"
)

// LegacyKeys are the keys the builds before session 22 derived for the demo: from the root
// secret's key seed alone, whatever its tenant. Written out here, not through seed, so that a
// change to seed cannot move them with it.
func LegacyKeys(x *Demo) (pk, sk string) {
	derive := func(purpose string) []byte {
		m := hmac.New(sha256.New, x.deps.KeySeed)
		m.Write([]byte(purpose))
		return m.Sum(nil)
	}
	return tenants.DeriveKey(tenants.KindPublishable, derive("publishable")), tenants.DeriveKey(tenants.KindSecret, derive("secret"))
}
