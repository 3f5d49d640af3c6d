package httpserver_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

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
