package httpserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Server is an HTTP server that answers on its listener from the moment it is started, before
// the handler it exists for can be built: until Ready hands that handler over, it gives the
// starting answers (Starting). A start that waits minutes for the database (another instance's
// migration holds the lock) is then a live process that is not ready, not one whose health
// check hangs until a container runtime or an orchestrator kills it.
type Server struct {
	srv     *http.Server
	handler atomic.Pointer[http.Handler]
	errc    chan error // Serve's result: a failure to accept, or http.ErrServerClosed
}

// Start serves l at once with h (Starting, until Ready hands over another), in the hardened
// server's timeouts.
func Start(l net.Listener, h http.Handler) *Server {
	s := &Server{errc: make(chan error, 1)}
	s.Ready(h)
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	go func() { s.errc <- s.srv.Serve(l) }()
	return s
}

// ServeHTTP answers with the handler of the moment.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.handler.Load()).ServeHTTP(w, r)
}

// Ready hands every request from now on to h (HEAD answered wherever GET is: headAsGet).
func (s *Server) Ready(h http.Handler) {
	h = headAsGet(h)
	s.handler.Store(&h)
}

// Run waits until ctx ends, then shuts down gracefully: it stops accepting, lets in-flight
// requests finish (up to grace) and only then returns, so callers may close the database
// afterwards. It returns early with the error if the server stops accepting by itself.
func (s *Server) Run(ctx context.Context, grace time.Duration) error {
	select {
	case err := <-s.errc:
		return fmt.Errorf("httpserver: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := s.srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("httpserver: shutdown: %w", err)
	}
	return nil
}

// Close stops a server that will not Run (its start failed): the listener and every connection
// close at once.
func (s *Server) Close() error {
	if err := s.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// StartingRetryAfter is the Retry-After, in seconds, of the starting answers.
const StartingRetryAfter = "5"

// Starting is what a server answers before its handler is ready: /healthz 200 (the process is
// alive), /readyz 503, and everything else 503 (problem+json, code unavailable, Retry-After),
// each saying the server is starting, with the security headers every answer carries
// (SecurityHeaders; the router's middleware is not there yet).
func Starting() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
		h.Set("X-Frame-Options", "DENY")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/healthz":
			h.Set("Content-Type", "application/json; charset=utf-8")
			_, _ = w.Write([]byte(`{"status":"starting"}`))
		case r.Method == http.MethodGet && r.URL.Path == "/readyz":
			h.Set("Content-Type", "application/json; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"starting"}`))
		default:
			h.Set("Content-Type", "application/problem+json")
			h.Set("Retry-After", StartingRetryAfter)
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"type":"urn:sluice:problem:unavailable","title":"Service unavailable","status":503,` +
				`"detail":"Sluice is starting (opening or migrating its database); retry shortly","code":"unavailable"}`))
		}
	})
}
