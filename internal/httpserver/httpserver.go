// Package httpserver assembles the one HTTP server Sluice runs out of the surfaces it is given
// (the API, the dashboard, the demo): shared middleware, trusted proxies, the operations routes
// (health, readiness, metrics), body and time limits, and hardened timeouts. It imports no
// surface: a surface that renders its own errors for its paths says so through ErrorRenderer.
package httpserver

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// Surface is a part of the site that registers its own routes (the API, the dashboard, ...).
type Surface interface {
	Register(r *gin.Engine)
}

// ErrorRenderer is implemented by a surface that answers its own paths' errors in its own format
// (the API's problem+json): unknown routes, known routes with another method (the Allow header
// is already set), panics and bodies over the limit.
type ErrorRenderer interface {
	Owns(path string) bool
	NotFound(c *gin.Context)
	MethodNotAllowed(c *gin.Context)
	InternalError(c *gin.Context)
	TooLarge(c *gin.Context)
}

// Options configure the router.
type Options struct {
	Logger         *slog.Logger
	TrustedProxies []string // nil or empty: X-Forwarded-For is never believed
	// Surfaces register their routes in order; those that are ErrorRenderers render the errors
	// of the paths they own.
	Surfaces []Surface
	Ready    func(ctx context.Context) error // readiness: database reachable, schema current
	// NotFound renders unknown non-API paths; default a plain 404.
	NotFound gin.HandlerFunc
	// Metrics, when set, is served at /metrics and observes the latency of DecisionRoutes.
	Metrics Metrics
	// DecisionRoutes are the route patterns whose latency is a decision's latency.
	DecisionRoutes []string
	// MetricsToken, when set, serves /metrics on this router behind that bearer token
	// (Authorization: Bearer ...). Unset, /metrics is not served here: tenants' limit names and
	// traffic are not for the public port (see MetricsHandler for the scraper's own listener).
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
	r.HandleMethodNotAllowed = true // 405 with Allow for a known path and another method
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	// Trust no proxy unless the operator names them: otherwise any client could choose its IP.
	// gin and fromProxy read the same list, parsed once (an IPv4-mapped entry as its IPv4).
	proxies, err := parseProxies(o.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("httpserver: trusted proxies: %w", err)
	}
	ginProxies := make([]string, len(proxies))
	for i, p := range proxies {
		ginProxies[i] = p.String()
		if p.Bits() == 0 { // 0.0.0.0/0, ::/0, or the IPv4-mapped ::ffff:0:0/96 read as the first
			o.Logger.Warn("TRUSTED_PROXIES trusts every address: any client can name its own address in X-Forwarded-For, "+
				"which the ip: keys, the captcha's IP budget and the login limits then believe; list your proxies instead", "entry", o.TrustedProxies[i])
		}
	}
	if err := r.SetTrustedProxies(ginProxies); err != nil {
		return nil, fmt.Errorf("httpserver: trusted proxies: %w", err)
	}
	if len(o.TrustedProxies) == 0 {
		r.ForwardedByClientIP = false
	}
	// From a trusted proxy, only X-Forwarded-For (gin would also believe X-Real-IP, which a
	// proxy that only appends X-Forwarded-For passes through from the client untouched).
	r.RemoteIPHeaders = []string{"X-Forwarded-For"}
	var renderers []ErrorRenderer
	for _, s := range o.Surfaces {
		if er, ok := s.(ErrorRenderer); ok {
			renderers = append(renderers, er)
		}
	}
	owner := func(c *gin.Context) ErrorRenderer {
		for _, er := range renderers {
			if er.Owns(c.Request.URL.Path) {
				return er
			}
		}
		return nil
	}
	// The access log and the decisions' latency wrap Recover, so that a request answered 500
	// after a panic has its line and its sample like any other.
	r.Use(plainForwardedFor(proxies), RequestID(), AccessLog(o.Logger))
	if o.Metrics != nil {
		r.Use(observeDecisions(o.Metrics, o.DecisionRoutes))
	}
	r.Use(Recover(o.Logger, func(c *gin.Context) {
		if er := owner(c); er != nil {
			er.InternalError(c)
			return
		}
		c.String(http.StatusInternalServerError, "internal error (request %s)", c.GetString(RequestIDKey))
	}), SecurityHeaders(proxies), limitBody(o.MaxBodyBytes, owner), limitTime(o.RequestTimeout))
	// gin matches an empty segment ("/v1/limits//limit") as an empty :param, so such a path
	// reached a handler (or a 405 naming its methods); it names no route of a surface's.
	r.Use(func(c *gin.Context) {
		if strings.Contains(c.Request.URL.Path, "//") {
			if er := owner(c); er != nil {
				er.NotFound(c)
				c.Abort()
			}
		}
	})

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
	if o.Metrics != nil && o.MetricsToken != "" {
		r.GET("/metrics", metricsHandler(o.Metrics.Handler(), o.MetricsToken))
	}
	for _, s := range o.Surfaces {
		s.Register(r)
	}
	r.NoMethod(func(c *gin.Context) {
		// headAsGet answers HEAD wherever GET is; a route that registers HEAD itself lists it already.
		if allow := strings.Split(c.Writer.Header().Get("Allow"), ", "); slices.Contains(allow, http.MethodGet) && !slices.Contains(allow, http.MethodHead) {
			c.Header("Allow", strings.Join(append(allow, http.MethodHead), ", "))
		}
		if er := owner(c); er != nil {
			er.MethodNotAllowed(c)
			return
		}
		c.String(http.StatusMethodNotAllowed, "405 method not allowed")
	})
	r.NoRoute(func(c *gin.Context) {
		if er := owner(c); er != nil {
			er.NotFound(c)
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

// MetricsHandler serves /metrics alone (behind token when set), for the metrics listener.
func MetricsHandler(m Metrics, token string) http.Handler {
	r := gin.New()
	r.GET("/metrics", metricsHandler(m.Handler(), token))
	return r
}
