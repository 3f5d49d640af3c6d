package sluicegin

import (
	"github.com/gin-gonic/gin"
	sluice "github.com/sluice-dev/sluice/client/go"
)

// KeyByClientIP keys requests by the client's address exactly as sluice.KeyByClientIP does: the
// connection's peer, or, when the peer is one of trustedProxies (addresses or CIDR prefixes),
// the right-most address of X-Forwarded-For that is not a trusted proxy; IPv6 by its /64. It does
// not use gin's ClientIP, whose trusted proxies are the engine's (all of them unless
// SetTrustedProxies was called).
func KeyByClientIP(trustedProxies ...string) (KeyFunc, error) {
	fn, err := sluice.KeyByClientIP(trustedProxies...)
	if err != nil {
		return nil, err
	}
	return func(c *gin.Context) (string, error) { return fn(c.Request) }, nil
}

// KeyByHeader keys requests by the value of a header; a request without it is refused (400).
func KeyByHeader(name string) KeyFunc {
	fn := sluice.KeyByHeader(name)
	return func(c *gin.Context) (string, error) { return fn(c.Request) }
}

// KeyByContextValue keys requests by what an earlier handler stored with c.Set(key, user): the
// authenticated user, so this middleware goes after the authentication. The value may be a
// string, a fmt.Stringer or an integer, also of a named type (sluice.KeyFromValue); a request
// without it (or with an empty one, or a nil pointer or interface) is refused (400), so
// unauthenticated requests never share a key.
func KeyByContextValue(key any) KeyFunc {
	return func(c *gin.Context) (string, error) {
		v, _ := c.Get(key)
		return sluice.KeyFromValue(v, key)
	}
}
