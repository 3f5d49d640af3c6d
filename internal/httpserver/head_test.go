package httpserver_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/httpserver"

	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestHeadIsAnsweredWhereverGetIs: through the real server, HEAD on a GET route is the GET's
// status and headers (Content-Length included) with no body on the wire, and is logged as HEAD;
// a path without GET answers HEAD as GET (405 naming its methods, 404); and a 405's Allow names
// HEAD beside GET.
func TestHeadIsAnsweredWhereverGetIs(t *testing.T) {
	var logged testkit.SyncBuffer
	r, err := httpserver.NewRouter(httpserver.Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r.GET("/hello", func(c *gin.Context) {
		c.Header("X-Test", "yes")
		c.String(http.StatusOK, "hello")
	})
	r.POST("/only-post", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	both := func(c *gin.Context) { c.String(http.StatusOK, "both") } // a route registering HEAD itself
	r.GET("/both", both)
	r.HEAD("/both", both)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- httpserver.Start(l, r).Run(ctx, 10*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("the server ended with %v", err)
		}
	})

	// What the server writes, byte for byte: a client's HEAD would not read a body if one came.
	raw := func(method, path string) string {
		t.Helper()
		conn, err := net.DialTimeout("tcp", l.Addr().String(), 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
		if _, err := io.WriteString(conn, method+" "+path+" HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(conn)
		if err != nil {
			t.Fatalf("%s %s: reading the response: %v", method, path, err)
		}
		return string(out)
	}
	head := raw(http.MethodHead, "/hello")
	if !strings.HasPrefix(head, "HTTP/1.1 200 ") || !strings.Contains(head, "X-Test: yes\r\n") ||
		!strings.Contains(head, "Content-Length: 5\r\n") || !strings.HasSuffix(head, "\r\n\r\n") {
		t.Fatalf("HEAD /hello answered %q; want GET's 200 and headers, Content-Length 5, and no body", head)
	}
	if !strings.Contains(logged.String(), "method=HEAD") {
		t.Fatalf("the access log says %q; want method=HEAD", logged.String())
	}
	for _, tc := range []struct{ method, path, status, allow string }{
		{http.MethodHead, "/only-post", "405", "Allow: POST\r\n"},
		{http.MethodPost, "/hello", "405", "Allow: GET, HEAD\r\n"},
		{http.MethodPost, "/both", "405", "Allow: GET, HEAD\r\n"}, // HEAD once
		{http.MethodHead, "/nowhere", "404", ""},
	} {
		got := raw(tc.method, tc.path)
		if !strings.HasPrefix(got, "HTTP/1.1 "+tc.status+" ") || !strings.Contains(got, tc.allow) {
			t.Fatalf("%s %s answered %q; want %s with %q", tc.method, tc.path, got, tc.status, tc.allow)
		}
		if tc.method == http.MethodHead && !strings.HasSuffix(got, "\r\n\r\n") {
			t.Fatalf("%s %s answered %q; want no body", tc.method, tc.path, got)
		}
	}
}
