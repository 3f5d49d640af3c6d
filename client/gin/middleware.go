// Package sluicegin is a Gin middleware that rate-limits requests with Sluice. It is the
// net/http middleware of the Go client (github.com/sluice-dev/sluice/client/go) in Gin's terms:
// the same decision, headers, refusal and fail policy, with key and count functions that take a
// *gin.Context. It is a module of its own so that the Go client stays standard-library only.
package sluicegin

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"
	sluice "github.com/sluice-dev/sluice/client/go"
)

// KeyFunc names the key a request is limited under; "" is the limit's single global key. An
// error refuses the request with 400 through the error handler.
type KeyFunc func(c *gin.Context) (string, error)

// CountFunc says how many tokens a request costs (default 1).
type CountFunc func(c *gin.Context) (float64, error)

// Option configures Middleware.
type Option func(*config)

type config struct {
	opts []sluice.MiddlewareOption
}

// WithKeyFunc sets the key of each request (default: the connection's peer address, as
// sluice.KeyByClientIP with no trusted proxy).
func WithKeyFunc(fn KeyFunc) Option {
	return func(c *config) {
		c.opts = append(c.opts, sluice.WithKeyFunc(func(r *http.Request) (string, error) { return fn(ginContext(r)) }))
	}
}

// WithCountFunc sets the cost of each request (default 1).
func WithCountFunc(fn CountFunc) Option {
	return func(c *config) {
		c.opts = append(c.opts, sluice.WithCountFunc(func(r *http.Request) (float64, error) { return fn(ginContext(r)) }))
	}
}

// WithLimitHandler replaces the refusal response (default: 429 with an application/problem+json
// body). It runs after the RateLimit and Retry-After headers are set; ResultFromContext gives
// it the refused Result. The chain is aborted after it.
func WithLimitHandler(h gin.HandlerFunc) Option {
	return func(c *config) {
		c.opts = append(c.opts, sluice.WithLimitHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h(ginContext(r))
		})))
	}
}

// WithErrorHandler replaces the response when no decision could be made (see
// sluice.WithErrorHandler: the key or count function failed, Sluice could not answer and the
// client fails closed, or Sluice answered with a problem, such as the tenant's plan refusing the
// decision, which the default answers 429 with Retry-After). The chain is aborted after it.
func WithErrorHandler(fn func(c *gin.Context, err error)) Option {
	return func(c *config) {
		c.opts = append(c.opts, sluice.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			fn(ginContext(r), err)
		}))
	}
}

// WithLogger sets where the middleware logs (default slog.Default(); nil: nowhere), as
// sluice.WithLogger.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.opts = append(c.opts, sluice.WithLogger(l)) }
}

// ResultKey is the gin key under which Middleware stores the sluice.Result of a request it
// decided (c.Get(sluicegin.ResultKey)); ResultFromContext reads it.
const ResultKey = "sluice.result"

// ResultFromContext is the decision the middleware made for the request (in the handlers after
// it, and in a limit handler).
func ResultFromContext(c *gin.Context) (sluice.Result, bool) {
	if v, ok := c.Get(ResultKey); ok {
		r, ok := v.(sluice.Result)
		return r, ok
	}
	return sluice.ResultFromContext(c.Request.Context())
}

type ginKey struct{}

// request is what Middleware puts in the request's context for the options' adapters: the gin
// context, and whether the request was passed on.
type request struct {
	c      *gin.Context
	passed bool
}

// ginContext is the *gin.Context of a request Middleware is deciding, with the request (and so
// the decision in its context) made current and the Result stored under ResultKey.
func ginContext(r *http.Request) *gin.Context {
	c := r.Context().Value(ginKey{}).(*request).c
	c.Request = r
	if res, ok := sluice.ResultFromContext(r.Context()); ok {
		c.Set(ResultKey, res)
	}
	return c
}

// Middleware limits each request with the limit name, as sluice.Middleware does: it consumes one
// token (or CountFunc's) of the request's key with Client.Limit, passes the IETF RateLimit-Policy
// and RateLimit headers Sluice answered with on to the response, and refuses with 429,
// Retry-After and a problem body (or WithLimitHandler's response), aborting the chain. When
// Sluice cannot answer, the client's FailPolicy decides: FailOpen lets the request through,
// FailClosed answers 503 (or WithErrorHandler's response).
func Middleware(client *sluice.Client, name string, opts ...Option) gin.HandlerFunc {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	limit := sluice.Middleware(client, name, cfg.opts...)(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		r.Context().Value(ginKey{}).(*request).passed = true
		ginContext(r).Next()
	}))
	return func(c *gin.Context) {
		req := &request{c: c}
		original := c.Request
		limit.ServeHTTP(c.Writer, original.WithContext(context.WithValue(original.Context(), ginKey{}, req)))
		if !req.passed {
			// Refused, or no decision could be made: the response is written; stop the chain.
			c.Request = original
			c.Abort()
		}
	}
}
