package demo

import "github.com/sluice-dev/sluice/internal/tenants"

// LegacyKeys are the keys the builds before session 22 derived for the demo from the root secret
// alone, whatever its tenant.
func LegacyKeys(x *Demo) (pk, sk string) {
	return tenants.DeriveKey(tenants.KindPublishable, x.seed("publishable")), tenants.DeriveKey(tenants.KindSecret, x.seed("secret"))
}
