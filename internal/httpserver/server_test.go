package httpserver_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/httpserver"
)

// TestAServerGivesTheStartingAnswersUntilItIsReady: a Server started with Starting answers at once
// (/healthz 200, /readyz and every other route 503 with Retry-After, HEAD as GET without a body,
// the security headers on each), then, once Ready hands it a handler, only that handler; Run
// stops it when its context ends.
func TestAServerGivesTheStartingAnswersUntilItIsReady(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := httpserver.Start(l, httpserver.Starting())
	base := "http://" + l.Addr().String()
	do := func(method, path string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, nil)
		res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	for _, c := range []struct {
		method, path string
		status       int
		body         string
	}{
		{"GET", "/healthz", 200, `"starting"`},
		{"HEAD", "/healthz", 200, ""},
		{"GET", "/readyz", 503, `"starting"`},
		{"GET", "/v1/limits", 503, `"code":"unavailable"`},
		{"POST", "/v1/limit", 503, `"code":"unavailable"`},
		{"HEAD", "/tenants", 503, ""},
	} {
		res, body := do(c.method, c.path)
		if res.StatusCode != c.status || (c.body == "" && body != "") || !strings.Contains(body, c.body) {
			t.Errorf("%s %s while starting: %d %q; want %d with %q", c.method, c.path, res.StatusCode, body, c.status, c.body)
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s %s while starting: headers %v lack the security headers", c.method, c.path, res.Header)
		}
		if c.status == 503 && c.path != "/readyz" && res.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s while starting: 503 without Retry-After", c.method, c.path)
		}
	}
	s.Ready(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ready") }))
	if res, body := do("GET", "/v1/limits"); res.StatusCode != 200 || body != "ready" {
		t.Fatalf("after Ready: %d %q; want the handler's answer", res.StatusCode, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, 5*time.Second) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of its context ending")
	}
	if _, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second); err == nil {
		t.Fatal("the listener still accepts after Run returned")
	}
}
