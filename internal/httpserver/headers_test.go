package httpserver_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/httpserver"
)

// X-Forwarded-Proto turns HSTS on only when it comes from a trusted proxy: a client talking to
// Sluice directly over plain HTTP cannot make it claim HTTPS.
func TestHSTSBelievesForwardedProtoOnlyFromTrustedProxies(t *testing.T) {
	get := func(t *testing.T, srv *httptest.Server, forwardedProto string) http.Header {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/healthz", nil)
		if forwardedProto != "" {
			req.Header.Set("X-Forwarded-Proto", forwardedProto)
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET /healthz: status %d", res.StatusCode)
		}
		return res.Header
	}
	const hsts = "Strict-Transport-Security"
	for _, tc := range []struct {
		name    string
		proxies []string
		proto   string
		tls     bool
		want    bool
	}{
		{"plain HTTP", nil, "", false, false},
		{"forged header, no proxies trusted", nil, "https", false, false},
		{"forged header, another proxy trusted", []string{"10.0.0.0/8"}, "https", false, false},
		{"trusted proxy says https", []string{"127.0.0.1"}, "https", false, true},
		{"trusted proxy range says https", []string{"127.0.0.0/8", "::1"}, "https", false, true},
		{"trusted proxy says http", []string{"127.0.0.1"}, "http", false, false},
		{"TLS", nil, "", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newRouter(t, httpserver.Options{TrustedProxies: tc.proxies})
			srv := httptest.NewUnstartedServer(h)
			if tc.tls {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			got := get(t, srv, tc.proto)
			if (got.Get(hsts) != "") != tc.want {
				t.Fatalf("%s = %q, want it set: %v", hsts, got.Get(hsts), tc.want)
			}
			if csp := got.Get("Content-Security-Policy"); csp == "" || got.Get("X-Content-Type-Options") != "nosniff" {
				t.Fatalf("security headers missing: %v", got)
			}
		})
	}
}

// The client's address is the peer's, or X-Forwarded-For's when the peer is a trusted proxy;
// never X-Real-IP, which a proxy that only appends X-Forwarded-For passes on from the client.
func TestClientIPBelievesOnlyXForwardedForFromTrustedProxies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		proxies []string
		header  []string
		want    string
	}{
		{"no header", []string{"192.0.2.1"}, nil, "192.0.2.1"},
		{"trusted proxy's X-Forwarded-For", []string{"192.0.2.1"}, []string{"X-Forwarded-For", "203.0.113.7"}, "203.0.113.7"},
		{"trusted proxy passes a client's X-Real-IP", []string{"192.0.2.1"}, []string{"X-Real-IP", "203.0.113.7"}, "192.0.2.1"},
		{"untrusted peer's X-Forwarded-For", []string{"10.0.0.0/8"}, []string{"X-Forwarded-For", "203.0.113.7"}, "192.0.2.1"},
		{"no proxies trusted", nil, []string{"X-Forwarded-For", "203.0.113.7"}, "192.0.2.1"},
		// Entries as some proxies write them: with brackets, a port, or IPv4-mapped. gin alone
		// reads them as no address and answers the proxy's, one address for every client.
		{"bracketed IPv6", []string{"192.0.2.1"}, []string{"X-Forwarded-For", "[2001:db8::1]"}, "2001:db8::1"},
		{"IPv4 with a port", []string{"192.0.2.1"}, []string{"X-Forwarded-For", "203.0.113.7:41234"}, "203.0.113.7"},
		{"bracketed IPv6 with a port", []string{"192.0.2.1"}, []string{"X-Forwarded-For", "[2001:db8::1]:443"}, "2001:db8::1"},
		{"IPv4-mapped", []string{"192.0.2.1"}, []string{"X-Forwarded-For", "::ffff:203.0.113.9"}, "203.0.113.9"},
		{"a chain through a second trusted proxy with a port", []string{"192.0.2.1", "10.0.0.0/8"}, []string{"X-Forwarded-For", "198.51.100.4:80, 10.1.2.3:8080"}, "198.51.100.4"},
		{"garbage still falls back to the proxy", []string{"192.0.2.1"}, []string{"X-Forwarded-For", "not-an-address:80"}, "192.0.2.1"},
		{"an untrusted peer's bracketed entry", []string{"10.0.0.0/8"}, []string{"X-Forwarded-For", "[2001:db8::1]"}, "192.0.2.1"},
		// The same list read by gin and by HSTS's check: an IPv4-mapped entry is the IPv4 peer.
		{"an IPv4-mapped trusted proxy", []string{"::ffff:192.0.2.1"}, []string{"X-Forwarded-For", "203.0.113.7"}, "203.0.113.7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := httpserver.NewRouter(httpserver.Options{TrustedProxies: tc.proxies})
			if err != nil {
				t.Fatal(err)
			}
			r.GET("/ip", func(c *gin.Context) { c.String(http.StatusOK, c.ClientIP()) })
			rec := do(r, http.MethodGet, "/ip", nil, tc.header...) // from httptest's 192.0.2.1
			if got := rec.Body.String(); got != tc.want {
				t.Fatalf("client IP %q, want %q", got, tc.want)
			}
		})
	}
}
