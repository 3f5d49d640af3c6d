package httpserver_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/httpserver"
	"github.com/sluice-dev/sluice/internal/metrics"
)

// fakeSurface registers routes shaped like the API's and the dashboard's, and renders the errors
// of /v1 paths as the API does (problem+json), so the router must hand them to it.
type fakeSurface struct{}

func (fakeSurface) Owns(path string) bool   { return strings.HasPrefix(path, "/v1/") }
func (fakeSurface) NotFound(c *gin.Context) { problem(c, http.StatusNotFound, "not_found") }
func (fakeSurface) MethodNotAllowed(c *gin.Context) {
	problem(c, http.StatusMethodNotAllowed, "method_not_allowed")
}
func (fakeSurface) InternalError(c *gin.Context) {
	problem(c, http.StatusInternalServerError, "internal")
}
func (fakeSurface) TooLarge(c *gin.Context) {
	problem(c, http.StatusRequestEntityTooLarge, "payload_too_large")
}

func problem(c *gin.Context, status int, code string) {
	c.Header("Content-Type", "application/problem+json")
	c.AbortWithStatusJSON(status, gin.H{"code": code})
}

func (fakeSurface) Register(r *gin.Engine) {
	r.POST("/v1/limit", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"ok": true}) })
	r.POST("/form", func(c *gin.Context) {
		if _, err := io.ReadAll(c.Request.Body); err != nil {
			c.String(http.StatusRequestEntityTooLarge, "too large")
			return
		}
		c.String(http.StatusOK, "read")
	})
	r.GET("/slow", func(c *gin.Context) {
		<-c.Request.Context().Done()
		c.String(http.StatusServiceUnavailable, "deadline")
	})
}

func newRouter(t *testing.T, o httpserver.Options) http.Handler {
	t.Helper()
	o.Surfaces = append(o.Surfaces, fakeSurface{})
	r, err := httpserver.NewRouter(o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func do(h http.Handler, method, path string, body io.Reader, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, body)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestHealthAndReadiness(t *testing.T) {
	var readyErr error
	h := newRouter(t, httpserver.Options{Ready: func(context.Context) error { return readyErr }})
	if rec := do(h, "GET", "/healthz", nil); rec.Code != 200 || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("healthz: %d %v", rec.Code, rec.Header())
	}
	if rec := do(h, "GET", "/readyz", nil); rec.Code != 200 {
		t.Fatalf("readyz when ready: %d", rec.Code)
	}
	readyErr = errors.New("schema behind")
	if rec := do(h, "GET", "/readyz", nil); rec.Code != 503 || strings.Contains(rec.Body.String(), "schema") {
		t.Fatalf("readyz when not ready: %d %s (must be 503 and not leak the cause)", rec.Code, rec.Body)
	}
}

func TestMetricsAreMountedAndTimeDecisionRoutes(t *testing.T) {
	m := metrics.New(metrics.Options{})
	h := newRouter(t, httpserver.Options{Metrics: m, DecisionRoutes: []string{"/v1/limit"}})
	for range 3 {
		if rec := do(h, "POST", "/v1/limit", strings.NewReader("{}")); rec.Code != 200 {
			t.Fatal(rec.Code)
		}
	}
	do(h, "GET", "/healthz", nil) // not a decision route: not timed
	rec := do(httpserver.MetricsHandler(m, ""), "GET", "/metrics", nil)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `sluice_decision_duration_seconds_count{route="/v1/limit",status="2xx"} 3`) {
		t.Fatalf("metrics: %d\n%s", rec.Code, rec.Body)
	}
	if strings.Contains(rec.Body.String(), `route="/healthz"`) {
		t.Fatal("non-decision routes are timed as decisions")
	}
}

// TestMetricsAreNotOnThePublicListenerWithoutAToken: they name every tenant's limits.
func TestMetricsAreNotOnThePublicListenerWithoutAToken(t *testing.T) {
	h := newRouter(t, httpserver.Options{Metrics: metrics.New(metrics.Options{})})
	if rec := do(h, "GET", "/metrics", nil); rec.Code != 404 {
		t.Fatalf("GET /metrics on the public router without METRICS_TOKEN: %d, want 404", rec.Code)
	}
}

func TestMetricsTokenIsRequiredWhenSet(t *testing.T) {
	h := newRouter(t, httpserver.Options{Metrics: metrics.New(metrics.Options{}), MetricsToken: "s3cret-s3cret-s3cret"})
	if rec := do(h, "GET", "/metrics", nil); rec.Code != 401 {
		t.Fatalf("without token: %d", rec.Code)
	}
	if rec := do(h, "GET", "/metrics", nil, "Authorization", "Bearer wrong"); rec.Code != 401 {
		t.Fatalf("wrong token: %d", rec.Code)
	}
	if rec := do(h, "GET", "/metrics", nil, "Authorization", "bearer s3cret-s3cret-s3cret"); rec.Code != 200 {
		t.Fatalf("GET /metrics with the scheme in lower case: %d, want 200 (schemes are case-insensitive)", rec.Code)
	}
	if rec := do(h, "GET", "/metrics", nil, "Authorization", "Bearer   s3cret-s3cret-s3cret"); rec.Code != 200 {
		t.Fatalf("GET /metrics with spaces before the token: %d, want 200 (as the API takes it)", rec.Code)
	}
	if rec := do(h, "GET", "/metrics", nil, "Authorization", "Basic s3cret-s3cret-s3cret"); rec.Code != 401 {
		t.Fatalf("GET /metrics with the token under another scheme: %d, want 401", rec.Code)
	}
	if rec := do(h, "GET", "/metrics", nil, "Authorization", "Bearer s3cret-s3cret-s3cret", "Authorization", "Bearer wrong"); rec.Code != 401 {
		t.Fatalf("GET /metrics with two Authorization headers: %d, want 401 (one, as the API takes it)", rec.Code)
	}
	rec := do(h, "GET", "/metrics", nil, "Authorization", "Bearer s3cret-s3cret-s3cret")
	if rec.Code != 200 {
		t.Fatalf("right token: %d", rec.Code)
	}
	if rec.Header().Get("X-Frame-Options") != "DENY" {
		t.Fatal("security headers missing on /metrics")
	}
}

func TestEveryRouteHasABodyLimit(t *testing.T) {
	h := newRouter(t, httpserver.Options{MaxBodyBytes: 1024})
	big := strings.Repeat("x", 2048)
	if rec := do(h, "POST", "/form", strings.NewReader(big)); rec.Code != 413 {
		t.Fatalf("declared oversized body on a dashboard route: %d", rec.Code)
	}
	// Undeclared length (chunked): cut off while reading.
	req := httptest.NewRequest("POST", "/form", io.MultiReader(strings.NewReader(big)))
	req.ContentLength = -1
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 413 {
		t.Fatalf("undeclared oversized body: %d", rec.Code)
	}
	if rec := do(h, "POST", "/form", strings.NewReader("small")); rec.Code != 200 {
		t.Fatalf("small body: %d", rec.Code)
	}
	rec = do(h, "POST", "/v1/limit", strings.NewReader(big))
	if rec.Code != 413 || rec.Header().Get("Content-Type") != "application/problem+json" || !strings.Contains(rec.Body.String(), `"payload_too_large"`) {
		t.Fatalf("oversized API body: %d %s %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
}

func TestEveryHandlerHasADeadline(t *testing.T) {
	h := newRouter(t, httpserver.Options{RequestTimeout: 50 * time.Millisecond})
	start := time.Now()
	rec := do(h, "GET", "/slow", nil)
	if rec.Code != 503 || time.Since(start) > 2*time.Second {
		t.Fatalf("slow handler: %d after %v", rec.Code, time.Since(start))
	}
}

// panicSurface has a decision route whose handler panics.
type panicSurface struct{}

func (panicSurface) Register(r *gin.Engine) {
	r.POST("/v1/panics", func(*gin.Context) { panic("boom") })
}

// TestAPanickedRequestIsLoggedAndTimedLikeAnyOther: a request recovered from a panic and
// answered 500 has its access-log line (at ERROR, with its status) and, on a decision route,
// its latency sample under 5xx: the panic must not unwind past the access log and the metrics.
func TestAPanickedRequestIsLoggedAndTimedLikeAnyOther(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := metrics.New(metrics.Options{})
	h := newRouter(t, httpserver.Options{Logger: log, Metrics: m, DecisionRoutes: []string{"/v1/panics"}, Surfaces: []httpserver.Surface{panicSurface{}}})
	if rec := do(h, "POST", "/v1/panics", strings.NewReader("{}")); rec.Code != http.StatusInternalServerError {
		t.Fatalf("a handler that panics: %d, want 500", rec.Code)
	}
	if !strings.Contains(buf.String(), `level=ERROR msg=request`) || !strings.Contains(buf.String(), "status=500") {
		t.Errorf("no access-log line with status 500 for the panicked request; the log: %s", buf.String())
	}
	rec := do(httpserver.MetricsHandler(m, ""), "GET", "/metrics", nil)
	if !strings.Contains(rec.Body.String(), `sluice_decision_duration_seconds_count{route="/v1/panics",status="5xx"} 1`) {
		t.Errorf("the panicked decision is not timed under 5xx:\n%s", rec.Body)
	}
}

// TestARefusalIsAnsweredAtOnceToAClientWaitingFor100Continue: a client that sends
// "Expect: 100-continue" holds its body back until the server asks for it; a route that refuses
// without reading the body (here an unknown one) answers at once. (With the body limit replacing
// net/http's own request body, the server took the unread body for one to drain and waited for
// it until its read timeout: 15 s in production, the test's 60 s here.)
func TestARefusalIsAnsweredAtOnceToAClientWaitingFor100Continue(t *testing.T) {
	srv := httptest.NewUnstartedServer(newRouter(t, httpserver.Options{}))
	srv.Config.ReadTimeout = time.Minute
	srv.Start()
	t.Cleanup(srv.Close)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /nope HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("waited 20 s for the answer to a refused request whose client waits for 100 Continue: %v", err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("POST /nope: %d, want 404", res.StatusCode)
	}
}
