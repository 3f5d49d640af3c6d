package config

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/httpserver"
)

// TestTrustedProxiesConfigAcceptsExactlyWhatTheRouterStarts: every TRUSTED_PROXIES value
// FromEnv and Validate accept builds the router (which reads the entries with netip, and gin's
// SetTrustedProxies with net), and every value it refuses is a config error naming
// TRUSTED_PROXIES. net.ParseCIDR takes a prefix length with leading zeros ("10.0.0.0/08"),
// netip.ParsePrefix does not: such a value used to pass config and fail at start.
func TestTrustedProxiesConfigAcceptsExactlyWhatTheRouterStarts(t *testing.T) {
	for _, tc := range []struct {
		value string
		ok    bool
	}{
		{"10.0.0.0/8", true}, {"10.0.0.1", true}, {"::1", true}, {"2001:db8::/32", true}, {"::ffff:10.0.0.1", true},
		{"::ffff:10.0.0.0/104", true}, {"10.0.0.7/8", true}, {"0.0.0.0/0", true}, {"::/0", true}, {" 10.0.0.1 , 192.168.0.0/16 ,", true},
		{"10.0.0.0/08", false}, {"10.0.0.0/008", false}, {"2001:db8::/032", false}, {"10.0.0.0/+8", false}, {"10.0.0.0/", false},
		{"10.0.0.0/33", false}, {"::/129", false}, {"010.0.0.1", false}, {"fe80::1%eth0", false}, {"fe80::1%eth0/64", false},
		{"[::1]", false}, {"10.0.0.1:80", false}, {"example.com", false}, {"10.0.0.1, 10.0.0.0/08", false},
	} {
		c, err := FromEnv(env(map[string]string{"TRUSTED_PROXIES": tc.value}))
		if err == nil {
			err = c.Validate()
		}
		_, routerErr := httpserver.NewRouter(httpserver.Options{TrustedProxies: c.TrustedProxies})
		switch {
		case tc.ok && err != nil:
			t.Errorf("%q refused: %v", tc.value, err)
		case tc.ok && routerErr != nil:
			t.Errorf("%q accepted, but the router does not start: %v", tc.value, routerErr)
		case !tc.ok && err == nil:
			t.Errorf("%q accepted (the router: %v), want a TRUSTED_PROXIES error", tc.value, routerErr)
		case !tc.ok && !strings.Contains(err.Error(), "TRUSTED_PROXIES"):
			t.Errorf("%q refused without naming TRUSTED_PROXIES: %v", tc.value, err)
		}
	}
	// A configuration built in code goes through Validate (app.New calls it) the same way.
	c := Default()
	c.TrustedProxies = []string{"10.0.0.0/8", "10.0.0.0/08"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `TRUSTED_PROXIES: "10.0.0.0/08"`) {
		t.Errorf("Validate of %q: %v, want a TRUSTED_PROXIES error naming the entry", c.TrustedProxies, err)
	}
}

// acceptedProxiesParse fails t unless every entry of an accepted TRUSTED_PROXIES parses as the
// router reads it (netip), so that the server starts.
func acceptedProxiesParse(t *testing.T, proxies []string) {
	t.Helper()
	for _, p := range proxies {
		var err error
		if strings.Contains(p, "/") {
			_, err = netip.ParsePrefix(p)
		} else {
			_, err = netip.ParseAddr(p)
		}
		if err != nil {
			t.Fatalf("TRUSTED_PROXIES entry %q accepted, but the router cannot read it: %v", p, err)
		}
	}
	if _, err := httpserver.NewRouter(httpserver.Options{TrustedProxies: proxies}); err != nil {
		t.Fatalf("TRUSTED_PROXIES %q accepted, but the router does not start: %v", proxies, err)
	}
}
