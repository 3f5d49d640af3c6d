package httpserver

import (
	"context"
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// DefaultMaxBodyBytes caps request bodies on every route. The API enforces its own, lower cap
// with a problem response; this one protects the dashboard, the demo and any
// route that forgets to.
const DefaultMaxBodyBytes = 1 << 20

// DefaultRequestTimeout bounds every handler's context. It is below the server's WriteTimeout so
// that a handler whose database work is cut short can still write its 503, and below serve's
// shutdown grace so that every request has ended before the database closes.
const DefaultRequestTimeout = 15 * time.Second

// Metrics is what the router needs from the metrics package.
type Metrics interface {
	Handler() http.Handler
	ObserveDecision(route string, status int, d time.Duration)
	DecisionInFlight(delta float64)
}

// observeDecisions times the routes named. gin matches the route before running the global
// middleware, so FullPath is already the pattern (a bounded label), never the raw path.
func observeDecisions(m Metrics, routes []string) gin.HandlerFunc {
	decisionRoutes := map[string]bool{}
	for _, r := range routes {
		decisionRoutes[r] = true
	}
	return func(c *gin.Context) {
		route := c.FullPath()
		if !decisionRoutes[route] {
			c.Next()
			return
		}
		start := time.Now()
		m.DecisionInFlight(1)
		defer m.DecisionInFlight(-1)
		c.Next()
		m.ObserveDecision(route, c.Writer.Status(), time.Since(start))
	}
}

// limitBody rejects bodies declared larger than max at once and cuts off undeclared (chunked)
// ones when they pass it.
func limitBody(max int64, owner func(c *gin.Context) ErrorRenderer) gin.HandlerFunc {
	if max <= 0 {
		max = DefaultMaxBodyBytes
	}
	return func(c *gin.Context) {
		if c.Request.ContentLength > max {
			tooLarge(c, owner(c))
			return
		}
		if c.Request.Body != nil && c.Request.Body != http.NoBody {
			// On a copy of the request: net/http keeps its own, whose body it wrapped to send
			// "100 Continue" only once the handler reads it; with that body replaced it took a
			// refusal's unread body for one to drain, and waited for the bytes a client honouring
			// Expect: 100-continue holds back, until the read timeout, before answering.
			r := c.Request.WithContext(c.Request.Context())
			r.Body = http.MaxBytesReader(c.Writer, c.Request.Body, max)
			c.Request = r
		}
		c.Next()
	}
}

// TooLarge answers a body over the server's limit on a path no ErrorRenderer owns (the
// dashboard's, whose forms find out while they are read): 413 in plain text.
func TooLarge(c *gin.Context) { tooLarge(c, nil) }

// tooLarge answers a body over the limit as er renders it (plain text when er is nil) and closes
// the connection: the rest of the body is not read.
func tooLarge(c *gin.Context, er ErrorRenderer) {
	c.Header("Connection", "close")
	if er != nil {
		er.TooLarge(c)
	} else {
		c.String(http.StatusRequestEntityTooLarge, "request body too large")
	}
	c.Abort()
}

// limitTime gives every handler a deadline through its request context, so a stuck database
// call ends (and fails closed) instead of holding the connection until the write timeout.
func limitTime(d time.Duration) gin.HandlerFunc {
	if d <= 0 {
		d = DefaultRequestTimeout
	}
	return func(c *gin.Context) {
		ctx, cancel := context.WithTimeout(c.Request.Context(), d)
		defer cancel()
		c.Request = c.Request.WithContext(ctx)
		c.Next()
	}
}

// metricsHandler serves h, behind a bearer token when one is configured.
func metricsHandler(h http.Handler, token string) gin.HandlerFunc {
	return func(c *gin.Context) {
		if token != "" {
			// The scheme in any case and the token with the spaces around it trimmed, as the API
			// takes them (RFC 9110: schemes are case-insensitive; several spaces may follow one).
			// Exactly one Authorization header, as the API requires.
			hs := c.Request.Header["Authorization"]
			var scheme, got string
			if len(hs) == 1 {
				scheme, got, _ = strings.Cut(hs[0], " ")
			}
			got = strings.TrimSpace(got)
			if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				c.Header("WWW-Authenticate", `Bearer realm="metrics"`)
				c.String(http.StatusUnauthorized, "unauthorized")
				c.Abort()
				return
			}
		}
		h.ServeHTTP(c.Writer, c.Request)
	}
}
