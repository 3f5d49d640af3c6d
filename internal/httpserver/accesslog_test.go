package httpserver_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/httpserver"
)

// TestAccessLogPutsDashboardPollsAtDebug: an htmx poll (a GET with HX-Request that succeeds)
// every few seconds per open page is logged at DEBUG; other requests at INFO, server errors at
// ERROR, whatever asked.
func TestAccessLogPutsDashboardPollsAtDebug(t *testing.T) {
	gin.SetMode(gin.TestMode)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := gin.New()
	r.Use(httpserver.AccessLog(log))
	r.GET("/ok", func(c *gin.Context) { c.Status(http.StatusOK) })
	r.GET("/boom", func(c *gin.Context) { c.Status(http.StatusInternalServerError) })
	r.POST("/ok", func(c *gin.Context) { c.Status(http.StatusOK) })
	for _, tc := range []struct {
		method, path string
		htmx         bool
		level        string
	}{
		{http.MethodGet, "/ok", true, "DEBUG"},
		{http.MethodGet, "/ok", false, "INFO"},
		{http.MethodPost, "/ok", true, "INFO"},
		{http.MethodGet, "/boom", true, "ERROR"},
	} {
		buf.Reset()
		req := httptest.NewRequest(tc.method, tc.path, nil)
		if tc.htmx {
			req.Header.Set("HX-Request", "true")
		}
		r.ServeHTTP(httptest.NewRecorder(), req)
		if !strings.Contains(buf.String(), "level="+tc.level) {
			t.Errorf("%s %s (htmx %v): logged %q, want level %s", tc.method, tc.path, tc.htmx, buf.String(), tc.level)
		}
	}
}
