package httpserver

// The middleware every surface shares: request IDs, access logs, panic recovery and security
// headers. Surfaces import this package only for RequestIDKey.

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// RequestIDKey is the gin context key holding the request ID.
const RequestIDKey = "request_id"

// RequestID gives every request an ID, echoed in X-Request-ID and in logs and problem bodies.
// A client-supplied ID is not trusted (it could forge log lines); a new one is always minted.
func RequestID() gin.HandlerFunc {
	return func(c *gin.Context) {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id := hex.EncodeToString(b[:])
		c.Set(RequestIDKey, id)
		c.Header("X-Request-ID", id)
		c.Next()
	}
}

// AccessLog writes one structured line per request.
func AccessLog(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		status := c.Writer.Status()
		level := slog.LevelInfo
		switch {
		case status >= 500:
			level = slog.LevelError
		case c.Request.Method == http.MethodGet && c.GetHeader("HX-Request") == "true" && status < 400:
			level = slog.LevelDebug // the dashboard's polls (every few seconds per open page)
		}
		if !log.Enabled(c.Request.Context(), level) {
			return // spare the attributes (ClientIP parses headers) when the line is not wanted
		}
		log.LogAttrs(c.Request.Context(), level, "request",
			slog.String("request_id", c.GetString(RequestIDKey)),
			slog.String("method", method(c.Request)),
			slog.String("route", c.FullPath()),
			slog.Int("status", status),
			slog.Duration("duration", time.Since(start)),
			slog.String("client_ip", c.ClientIP()))
	}
}

// Recover turns a panic into a logged 500 written by render, never a crashed process or a
// leaked stack trace.
func Recover(log *slog.Logger, render func(c *gin.Context)) gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				log.Error("panic", "request_id", c.GetString(RequestIDKey), "panic", r, "stack", string(debug.Stack()))
				if !c.Writer.Written() {
					render(c)
				}
				c.Abort()
			}
		}()
		c.Next()
	}
}

// SecurityHeaders sets the headers every response carries. The CSP allows only our own origin:
// the dashboard and demo load vendored scripts and styles from /static, never from a CDN, and
// neither inline scripts nor inline styles: the pages have no style attributes or <style>
// elements (the dashboard's meters are SVG, htmx's indicator styles are switched off) and the
// demo uses the captcha widget's strict-CSP build, whose proof-of-work worker is a same-origin
// script rather than a blob: URL. The browser tests in cmd/app fail on any CSP violation.
//
// HSTS is sent on TLS connections, and on plain connections only when a trusted proxy (one of
// trusted, the parsed TRUSTED_PROXIES) says with X-Forwarded-Proto that the client used HTTPS:
// anyone else could send that header.
func SecurityHeaders(trusted []netip.Prefix) gin.HandlerFunc {
	return func(c *gin.Context) {
		h := c.Writer.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; "+
			"script-src 'self'; worker-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'")
		h.Set("X-Frame-Options", "DENY")
		if c.Request.TLS != nil || (c.Request.Header.Get("X-Forwarded-Proto") == "https" && fromProxy(c, trusted)) {
			h.Set("Strict-Transport-Security", "max-age=63072000; includeSubDomains")
		}
		c.Next()
	}
}

// fromProxy reports whether the request's direct peer is one of the trusted proxies.
func fromProxy(c *gin.Context, trusted []netip.Prefix) bool {
	if len(trusted) == 0 {
		return false
	}
	a, err := netip.ParseAddr(c.RemoteIP())
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// plainForwardedFor rewrites, on a request from a trusted proxy, each X-Forwarded-For entry
// written with brackets or a port ("[2001:db8::1]", "203.0.113.7:41234", "[2001:db8::1]:443", as
// some proxies write them) or as an IPv4-mapped IPv6 address to the plain address gin's
// ClientIP reads: gin reads such an entry as no address and answers the proxy's own, which would
// make every client behind that proxy one address (one ip: key, one login throttle). Anything
// else is left as it is (gin then falls back to the proxy, as before).
func plainForwardedFor(trusted []netip.Prefix) gin.HandlerFunc {
	return func(c *gin.Context) {
		values := c.Request.Header.Values("X-Forwarded-For")
		if len(values) == 0 || !fromProxy(c, trusted) {
			return
		}
		plain := make([]string, 0, len(values))
		for _, v := range values {
			entries := strings.Split(v, ",")
			for i, e := range entries {
				entries[i] = plainAddress(strings.TrimSpace(e))
			}
			plain = append(plain, strings.Join(entries, ", "))
		}
		c.Request.Header["X-Forwarded-For"] = plain
	}
}

// plainAddress is the address in an X-Forwarded-For entry written "[v6]", "[v6]:port",
// "v4:port" or as an IPv4-mapped address; e itself when it is none of them.
func plainAddress(e string) string {
	host := e
	if h, _, err := net.SplitHostPort(e); err == nil {
		host = h
	} else if strings.HasPrefix(e, "[") && strings.HasSuffix(e, "]") {
		host = e[1 : len(e)-1]
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Zone() == "" {
		return a.Unmap().String()
	}
	return e
}

// parseProxies reads TRUSTED_PROXIES entries (addresses or CIDRs), as gin does, an IPv4-mapped
// one as the IPv4 address or range it maps.
func parseProxies(proxies []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(proxies))
	for _, s := range proxies {
		if strings.Contains(s, "/") {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, err
			}
			if p.Addr().Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, err
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
