package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// Requests to receivers must not reach what only Sluice's network can reach (SSRF): the
// database, the metrics listener, a cloud's metadata service, the operator's private network.
// Names are resolved by the dialer and every address it is about to connect to is checked there
// (after DNS, so a public name that resolves to 10.0.0.1 or 127.0.0.1 is refused too); redirects
// are not followed and no proxy is used. WEBHOOK_ALLOW_PRIVATE lifts the address check for
// operators whose receivers live on their own network.

// errPrivateAddress is why a delivery to a non-public address was refused.
var errPrivateAddress = errors.New("the receiver's address is not public (set WEBHOOK_ALLOW_PRIVATE=true to allow private receivers)")

// Limits of one delivery request.
const (
	requestTimeout  = 10 * time.Second
	maxResponseBody = 64 << 10 // read (and ignored) at most this much of a receiver's answer
)

// globalUnicast6 is where every public IPv6 address is (RFC 4291): outside it, everything is
// reserved, discard-only (100::/64), SRv6 (5f00::/16), NAT64 (64:ff9b::/96, 64:ff9b:1::/48),
// unique-local, the deprecated site-local (fec0::/10), link-local or multicast.
var globalUnicast6 = netip.MustParsePrefix("2000::/3")

// nonPublic are ranges that netip's predicates do not name: shared address space (carrier-grade
// NAT), IETF protocol assignments, documentation, benchmarking, reserved and the 6to4 relays.
// Like the documentation ranges, each is refused whole, though a few addresses in the IETF
// blocks (anycast services such as TURN or AS112) are reachable: none is a webhook receiver.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("192.88.99.0/24"), // 6to4 relay anycast (deprecated)
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("2001::/23"), // IETF protocol assignments: Teredo, benchmarking, ORCHID...
	netip.MustParsePrefix("2001:db8::/32"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("3fff::/20"), // documentation (RFC 9637)
}

// publicAddr reports whether ip is a public unicast address.
func publicAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() || (ip.Is6() && !globalUnicast6.Contains(ip)) {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// newClient is the HTTP client of deliveries.
func newClient(allowPrivate bool) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	if !allowPrivate {
		dialer.Control = func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("webhooks: dial %s: %w", address, err)
			}
			if !publicAddr(ap.Addr()) {
				return fmt.Errorf("webhooks: dial %s: %w", address, errPrivateAddress)
			}
			return nil
		}
	}
	transport := &http.Transport{
		Proxy: nil, // a proxy would connect on our behalf, past the address check
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, addr)
		},
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: requestTimeout,
		MaxIdleConns:          16,
		IdleConnTimeout:       30 * time.Second,
	}
	return &http.Client{
		Transport: transport,
		Timeout:   requestTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a redirect is the receiver's answer, not a new target
		},
	}
}
