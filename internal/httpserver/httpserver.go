// Package httpserver assembles the one HTTP server Sluice runs: shared middleware, trusted
// proxies, the API, the dashboard, static files and health endpoints, with hardened timeouts.
package httpserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/httpx"
)

// Surface is a part of the site that registers its own routes (the dashboard, the demo, ...).
type Surface interface {
	Register(r *gin.Engine)
}

// Options configure the router.
type Options struct {
	Logger         *slog.Logger
	TrustedProxies []string // nil or empty: X-Forwarded-For is never believed
	API            *api.Server
	Surfaces       []Surface
	Ready          func(ctx context.Context) error // readiness: database reachable, schema current
	// NotFound renders unknown non-API paths; default a plain 404.
	NotFound gin.HandlerFunc
	// Metrics, when set, is served at /metrics and observes the latency of /v1 decisions.
	Metrics Metrics
	// MetricsToken, when set, is the bearer token /metrics requires (Authorization: Bearer ...).
	// Unset, /metrics is open like any Prometheus target: expose the port only to the scraper.
	MetricsToken string
	// MaxBodyBytes caps every request body (the API caps its own lower); DefaultMaxBodyBytes when 0.
	MaxBodyBytes int64
	// RequestTimeout bounds every handler through its request context; DefaultRequestTimeout when 0.
	RequestTimeout time.Duration
}

func init() { gin.SetMode(gin.ReleaseMode) }

// NewRouter builds the gin engine with explicit middleware (never gin.Default).
func NewRouter(o Options) (*gin.Engine, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	r := gin.New()
	r.HandleMethodNotAllowed = false
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	// Trust no proxy unless the operator names them: otherwise any client could choose its IP.
	if err := r.SetTrustedProxies(o.TrustedProxies); err != nil {
		return nil, fmt.Errorf("httpserver: trusted proxies: %w", err)
	}
	if len(o.TrustedProxies) == 0 {
		r.ForwardedByClientIP = false
	}
	r.Use(httpx.RequestID(), httpx.Recover(o.Logger, func(c *gin.Context) {
		if api.IsAPIPath(c.Request.URL.Path) {
			api.InternalError(c)
			return
		}
		c.String(http.StatusInternalServerError, "internal error (request %s)", c.GetString(httpx.RequestIDKey))
	}), httpx.AccessLog(o.Logger), httpx.SecurityHeaders(), limitBody(o.MaxBodyBytes), limitTime(o.RequestTimeout))
	if o.Metrics != nil {
		r.Use(observeDecisions(o.Metrics))
	}

	r.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	r.GET("/readyz", func(c *gin.Context) {
		ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
		defer cancel()
		if o.Ready != nil {
			if err := o.Ready(ctx); err != nil {
				o.Logger.Warn("not ready", "err", err)
				c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unavailable"})
				return
			}
		}
		c.JSON(http.StatusOK, gin.H{"status": "ready"})
	})
	if o.Metrics != nil {
		r.GET("/metrics", metricsHandler(o.Metrics.Handler(), o.MetricsToken))
	}
	if o.API != nil {
		o.API.Register(r)
	}
	for _, s := range o.Surfaces {
		s.Register(r)
	}
	r.NoRoute(func(c *gin.Context) {
		if api.IsAPIPath(c.Request.URL.Path) && o.API != nil {
			o.API.NotFound(c)
			return
		}
		if o.NotFound != nil {
			o.NotFound(c)
			return
		}
		c.String(http.StatusNotFound, "404 page not found")
	})
	return r, nil
}

// Serve runs h on l until ctx ends, then shuts down gracefully: it stops accepting, lets
// in-flight requests finish (up to grace) and only then returns, so callers may close the
// database afterwards.
func Serve(ctx context.Context, l net.Listener, h http.Handler, grace time.Duration) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("httpserver: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("httpserver: shutdown: %w", err)
	}
	return nil
}
