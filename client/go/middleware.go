package sluice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// KeyFunc names the key a request is limited under (as in go-chi/httprate); "" is the limit's
// single global key, shared by every request. An error refuses the request with 400 through the
// middleware's error handler, as does a key that is not valid UTF-8 or that Sluice refuses (over
// 256 bytes, or starting with "ip:" or "session:", which Sluice reserves).
type KeyFunc func(r *http.Request) (string, error)

// CountFunc says how many tokens a request costs (default 1).
type CountFunc func(r *http.Request) (float64, error)

// MiddlewareOption configures Middleware.
type MiddlewareOption func(*middleware)

// WithKeyFunc sets the key of each request (default KeyByClientIP with no trusted proxy: the
// connection's peer address).
func WithKeyFunc(fn KeyFunc) MiddlewareOption { return func(m *middleware) { m.key = fn } }

// WithCountFunc sets the cost of each request (default 1).
func WithCountFunc(fn CountFunc) MiddlewareOption { return func(m *middleware) { m.count = fn } }

// WithLimitHandler replaces the refusal response (default: 429 with an application/problem+json
// body). It runs after the RateLimit and Retry-After headers are set; ResultFromContext gives
// it the refused Result.
func WithLimitHandler(h http.Handler) MiddlewareOption { return func(m *middleware) { m.limited = h } }

// WithErrorHandler replaces the response when no decision could be made: the key or count
// function failed, Sluice could not answer and the client's FailPolicy is FailClosed (or its
// fallback returned an error), or Sluice answered with a problem (an unknown limit, a wrong
// key, the tenant's plan over its decision rate). The default answers, as problem+json: 400
// when the request has no key Sluice can take (the key function failed, or Sluice refused the
// key as too long or reserved); 413 count_exceeds_capacity when the count function's count is
// more than the limit can ever admit (the request's doing), logged as a warning at most once a
// minute; 429 tenant_quota_exceeded with Retry-After (whole seconds, at
// least 1) when the tenant's plan refused the decision, logged as a warning; 503 with
// Retry-After (1, or what the failed answer asked for: a gateway's 429, say) when Sluice could
// not answer (a 429 that is not Sluice's problem included: a gateway in front of it) or its
// answer did not decode; and 500 when Sluice refused the decision itself,
// or the client refused it before sending (ErrInvalidArgument: a malformed base URL or secret
// key, say), both this server's configuration, logged as an error. A request whose context was
// cancelled while Sluice decided (its visitor hung up, or the server is shutting down) gets an
// error wrapping context.Canceled, which the default answers 503 with Retry-After: 1 (unread by
// a visitor who left), logged at debug level only, whatever the fail policy.
func WithErrorHandler(fn func(w http.ResponseWriter, r *http.Request, err error)) MiddlewareOption {
	return func(m *middleware) { m.onError = fn }
}

// WithLogger sets where the middleware logs (default slog.Default()): the default error
// handler's failures and a lease release that failed. nil logs nowhere.
func WithLogger(l *slog.Logger) MiddlewareOption {
	return func(m *middleware) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		m.log = l
	}
}

type middleware struct {
	client  *Client
	name    string
	key     KeyFunc
	count   CountFunc
	limited http.Handler
	onError func(http.ResponseWriter, *http.Request, error)
	log     *slog.Logger
	// oversizedAt is when (Unix ns) the default error handler last logged a request costing
	// more than the limit can ever admit: it does so at most once per oversizedLogEvery.
	oversizedAt atomic.Int64
}

// oversizedLogEvery is how often at most the default error handler logs requests whose count
// (WithCountFunc's, so the visitor's) is over what the limit can ever admit: the visitor decides
// how many there are.
const oversizedLogEvery = time.Minute

type resultKey struct{}

// ResultFromContext is the decision the middleware made for a request, in the context of the
// request it passes on (and of the one a limit handler gets).
func ResultFromContext(ctx context.Context) (Result, bool) {
	r, ok := ctx.Value(resultKey{}).(Result)
	return r, ok
}

// errKey marks a failure of the key or count function (the request's fault, not Sluice's).
var errKey = errors.New("sluice middleware: no key for the request")

// errRequestEnded marks a request whose context was cancelled while Sluice decided (its visitor
// hung up, or the server is shutting down): no failure of Sluice's, nor a refusal.
var errRequestEnded = errors.New("sluice: the request ended while Sluice decided")

// Middleware limits each request with the limit name: it consumes one token (or CountFunc's) of
// the request's key with Client.Limit, passes the IETF RateLimit-Policy and RateLimit headers
// Sluice answered with on to the response, and refuses with 429, Retry-After and a problem body
// (or WithLimitHandler's response). When Sluice cannot answer, the client's FailPolicy decides:
// FailOpen lets the request through (without RateLimit headers), FailClosed answers 503. A
// client WithBatching gets no headers to pass on (a bulk answer has none); Retry-After stays.
// On a concurrency limit the lease the decision took is released once next returns (or
// panics), by a request sent in the background: the response does not wait for it (see
// the README for when the slot is free).
func Middleware(c *Client, name string, opts ...MiddlewareOption) func(http.Handler) http.Handler {
	peer, _ := KeyByClientIP()
	m := &middleware{client: c, name: name, key: peer, log: slog.Default()}
	m.limited = http.HandlerFunc(m.refuse)
	m.onError = m.fail
	for _, o := range opts {
		o(m)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(next, w, r) })
	}
}

func (m *middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	key, err := m.key(r)
	if err != nil {
		m.onError(w, r, fmt.Errorf("%w: %w", errKey, err))
		return
	}
	if !utf8.ValidString(key) { // a visitor's bytes (a header, say) that no key can be made of
		m.onError(w, r, fmt.Errorf("%w: the key %q is not valid UTF-8", errKey, key))
		return
	}
	d := Decision{Key: key}
	if m.count != nil {
		n, err := m.count(r)
		if err != nil {
			m.onError(w, r, fmt.Errorf("%w: count: %w", errKey, err))
			return
		}
		if !(n >= 0 && n <= 1e15) { // NaN fails both
			m.onError(w, r, fmt.Errorf("%w: count %v is not a number of tokens", errKey, n))
			return
		}
		d.Count = &n
	}
	ctx, cancel := m.decisionContext(r.Context())
	defer cancel()
	res, err := m.client.Limit(ctx, m.name, d)
	if cause := r.Context().Err(); errors.Is(cause, context.Canceled) {
		// The request ended while Sluice decided: its visitor hung up, or the server is shutting
		// down with the visitor still there. A lease the decision took is released at once, the
		// handler does not run, and the error handler answers (unread if the visitor left) with
		// an error wrapping context.Canceled (and the decision's error, if any).
		if err != nil {
			m.onError(w, r, fmt.Errorf("%w: %w: %w", errRequestEnded, cause, err))
			return
		}
		// A lease replayed from another call under the request's Idempotency-Key is that call's:
		// not released here.
		if res.LeaseID != "" && (!res.Replayed || res.ownReplay) {
			m.release(r, res.LeaseID)
		}
		m.onError(w, r, fmt.Errorf("%w: %w", errRequestEnded, cause))
		return
	}
	if err != nil {
		m.onError(w, r, err)
		return
	}
	if res.OK && res.Replayed && res.LeaseID != "" && !res.ownReplay {
		// A decision replayed under the request's Idempotency-Key carries the lease of the
		// attempt that made it, still running or ended: no slot of this request's. It is refused,
		// not run beside that attempt (or after it, on no slot at all), and nothing is released.
		// A replay after this call's own attempt got no answer (Client.Limit retried it) is that
		// attempt's answer: its lease is this request's, used and released as any.
		res.OK, res.LeaseID = false, ""
	}
	h := w.Header()
	if res.RateLimitPolicy != "" {
		h.Set("RateLimit-Policy", res.RateLimitPolicy)
		h.Set("RateLimit", res.RateLimit)
	}
	r = r.WithContext(context.WithValue(r.Context(), resultKey{}, res))
	if !res.OK {
		if res.RetryAfter > 0 {
			h.Set("Retry-After", strconv.FormatFloat(math.Ceil(res.RetryAfter.Seconds()), 'f', 0, 64))
		}
		m.limited.ServeHTTP(w, r)
		return
	}
	if res.LeaseID != "" {
		// A concurrency limit counts requests in flight: this one's slot is freed once next has
		// returned (or panicked), not when the lease's TTL runs out. The release is sent in the
		// background, so that the response (which net/http completes once this returns) never
		// waits for Sluice: a slow or unreachable Sluice would delay every admitted request.
		defer func() { go m.release(r, res.LeaseID) }()
	}
	next.ServeHTTP(w, r)
}

// decisionContext is the context of the decision on the request whose context is req. With a
// client timeout (the default), the decision outlives a visitor who hangs up while Sluice
// decides, within that timeout and the request's deadline: Sluice may have taken a lease for it,
// which only its answer names, so the answer is waited for and the lease released at once.
// Without one (WithTimeout(0): no bound beyond the context's), it is the request's own.
func (m *middleware) decisionContext(req context.Context) (context.Context, context.CancelFunc) {
	if m.client.timeout <= 0 {
		return req, func() {}
	}
	deadline, ok := req.Deadline()
	if !ok {
		return context.WithoutCancel(req), func() {}
	}
	return context.WithDeadline(context.WithoutCancel(req), deadline)
}

// release ends the lease a request's decision took on a concurrency limit. The request's own
// context may be done by now (its client gone): the release outlives it, bounded by the client's
// timeout (DefaultTimeout when the client has none). It is not sent under an Idempotency-Key the
// request's context carries for its decision (WithIdempotencyKey): that key names the decision,
// and Sluice refuses it on another request (422). A failure is logged, not the request's: the
// lease expires at its TTL.
func (m *middleware) release(r *http.Request, leaseID string) {
	ctx := context.WithValue(context.WithoutCancel(r.Context()), idempotencyKey{}, nil)
	if m.client.timeout <= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	if err := m.client.ReleaseLease(ctx, leaseID); err != nil {
		m.log.WarnContext(r.Context(), "sluice: the request's concurrency lease was not released; it ends at its TTL", "limit", m.name, "err", err)
	}
}

// refuse is the default refusal: 429 with a problem body like Sluice's own, but naming the limit
// the middleware decides on: where that limit has parents (nested budgets) and one of them refused,
// Sluice's own 429 would name that parent; the RateLimit headers name every limit of the family.
func (m *middleware) refuse(w http.ResponseWriter, r *http.Request) {
	res, _ := ResultFromContext(r.Context())
	p := map[string]any{"type": "about:blank", "title": "Too Many Requests", "status": http.StatusTooManyRequests,
		"detail": "rate limit exceeded; retry later", "code": CodeRateLimited, "name": res.Name}
	if res.RetryAfter > 0 {
		p["retryAfter"] = int64(math.Ceil(float64(res.RetryAfter) / 1e6))
	}
	writeProblem(w, http.StatusTooManyRequests, p)
}

// fail is the default error handler.
func (m *middleware) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errRequestEnded) {
		// Most likely a visitor who hung up (then nobody reads this); else a server shutting
		// down. Not Sluice failing, whatever the fail policy: logged at debug level only.
		m.log.DebugContext(r.Context(), "sluice: the request ended while Sluice decided; not run", "limit", m.name, "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, map[string]any{"type": "about:blank", "title": "Service Unavailable",
			"status": http.StatusServiceUnavailable, "detail": "the request ended before it was decided; retry later", "code": CodeUnavailable})
		return
	}
	var e *Error
	answered := errors.As(err, &e)
	if errors.Is(err, errKey) || (answered && visitorsKeyRefused(e)) {
		writeProblem(w, http.StatusBadRequest, map[string]any{"type": "about:blank", "title": "Bad Request",
			"status": http.StatusBadRequest, "detail": "the request cannot be rate limited", "code": CodeInvalidRequest})
		return
	}
	if answered && e.Code == CodeCountExceedsCapacity && m.count != nil {
		// The count function's count (the visitor's request: its size, say) is more than the
		// limit can ever admit: no retry will pass, and it is the request's doing, not Sluice's
		// nor this server's configuration's.
		m.logOversized(r, err)
		writeProblem(w, http.StatusRequestEntityTooLarge, map[string]any{"type": "about:blank", "title": "Content Too Large",
			"status": http.StatusRequestEntityTooLarge, "detail": "the request costs more than the rate limit can ever admit", "code": CodeCountExceedsCapacity, "name": m.name})
		return
	}
	if answered && e.Code == CodeTenantQuotaExceeded {
		// The tenant's plan (its decisions per second) refused: Sluice answered, and the answer
		// is "not now", like the limit's own refusal; not a failure of this server.
		m.log.WarnContext(r.Context(), "sluice: the tenant's plan refused the decision; refusing the request", "limit", m.name, "err", err)
		p := map[string]any{"type": "about:blank", "title": "Too Many Requests", "status": http.StatusTooManyRequests,
			"detail": "too many requests; retry later", "code": CodeTenantQuotaExceeded, "retryAfter": int64(1000)}
		if e.RetryAfter > 0 {
			p["retryAfter"] = int64(math.Ceil(float64(e.RetryAfter) / 1e6))
		}
		w.Header().Set("Retry-After", retryAfterSeconds(e.RetryAfter))
		writeProblem(w, http.StatusTooManyRequests, p)
		return
	}
	if errors.Is(err, ErrInvalidArgument) || (answered && e.Status < http.StatusInternalServerError && !gatewayRefused(e)) {
		// Sluice answered that the decision itself is wrong (an unknown limit, a count over the
		// capacity without a count function, a revoked key): a mistake of this server's
		// configuration, not of the visitor.
		m.log.ErrorContext(r.Context(), "sluice: the decision was refused as invalid", "limit", m.name, "err", err)
		writeProblem(w, http.StatusInternalServerError, map[string]any{"type": "about:blank", "title": "Internal Server Error",
			"status": http.StatusInternalServerError, "detail": "internal error", "code": CodeInternal})
		return
	}
	m.log.WarnContext(r.Context(), "sluice: no decision; refusing the request (fail closed)", "limit", m.name, "err", err)
	var wait time.Duration
	if answered { // a gateway's 429 or a 503 that asked for longer than a second
		wait = e.RetryAfter
	}
	w.Header().Set("Retry-After", retryAfterSeconds(wait))
	writeProblem(w, http.StatusServiceUnavailable, map[string]any{"type": "about:blank", "title": "Service Unavailable",
		"status": http.StatusServiceUnavailable, "detail": "the rate limiter is unavailable; retry later", "code": CodeUnavailable})
}

// retryAfterSeconds is a wait as the default error handler's Retry-After: whole seconds, rounded
// up, at least 1.
func retryAfterSeconds(wait time.Duration) string {
	return strconv.FormatFloat(max(math.Ceil(wait.Seconds()), 1), 'f', 0, 64)
}

// logOversized logs a request the limit refused as costing more than its capacity, at warning
// level at most once per oversizedLogEvery (so that visitors cannot fill the log), else at debug.
func (m *middleware) logOversized(r *http.Request, err error) {
	now, last := time.Now().UnixNano(), m.oversizedAt.Load()
	if (last == 0 || now-last >= int64(oversizedLogEvery)) && m.oversizedAt.CompareAndSwap(last, now) {
		m.log.WarnContext(r.Context(), "sluice: a request costs more than the limit can ever admit; answering 413 (logged at most once a minute)", "limit", m.name, "err", err)
		return
	}
	m.log.DebugContext(r.Context(), "sluice: a request costs more than the limit can ever admit; answering 413", "limit", m.name, "err", err)
}

// visitorsKeyRefused reports whether Sluice refused the request's key (too long, or under a
// prefix Sluice reserves): the key comes from the request (a header, say), so it is the
// visitor's mistake, answered 400 as a request without a key is, not this server's.
func visitorsKeyRefused(e *Error) bool {
	return e.Status == http.StatusBadRequest && e.Code == CodeInvalidRequest && e.Field == "key"
}

func writeProblem(w http.ResponseWriter, status int, p map[string]any) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}

// KeyByHeader keys requests by the value of a header; a request without it is refused (400).
func KeyByHeader(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", fmt.Errorf("no %s header", name)
		}
		return v, nil
	}
}

// KeyByContextValue keys requests by a value the request's context carries under key: the
// authenticated user an authentication middleware put there (so this middleware goes after
// it). The value may be a string, a fmt.Stringer or an integer (of any type whose kind is a
// string or an integer: a type UserID int64 is keyed by its number); a request without it (or
// with an empty one, or a nil pointer or interface) is refused (400), so an unauthenticated
// request never shares a key.
func KeyByContextValue(key any) KeyFunc {
	return func(r *http.Request) (string, error) {
		return KeyFromValue(r.Context().Value(key), key)
	}
}

// KeyFromValue is the limit key KeyByContextValue makes of the value v found under key (nil: not
// found), for the middleware of other routers (the Gin middleware's KeyByContextValue reads
// gin's own keys with it). A fmt.Stringer is keyed by its String; any other value whose kind is a
// string or an integer by its text. A nil v, a nil pointer (whose String method could not be
// called) or a nil value of another nilable kind is "not found", as is an empty key.
func KeyFromValue(v, key any) (string, error) {
	if isNil(v) {
		return "", fmt.Errorf("no %v in the request's context", key)
	}
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case fmt.Stringer:
		s = x.String()
	default:
		rv := reflect.ValueOf(v)
		switch rv.Kind() {
		case reflect.String:
			s = rv.String()
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			s = strconv.FormatInt(rv.Int(), 10)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			s = strconv.FormatUint(rv.Uint(), 10)
		default:
			return "", fmt.Errorf("the request's %v is a %T, not a string, fmt.Stringer or integer", key, v)
		}
	}
	if s == "" {
		return "", fmt.Errorf("the request's %v is empty", key)
	}
	return s, nil
}

// isNil reports whether v is nil or holds a nil pointer, map, slice, channel, function or
// interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// KeyByClientIP keys requests by the client's address: the connection's peer, or, when the
// peer is one of trustedProxies (addresses or CIDR prefixes), the right-most address of
// X-Forwarded-For that is not a trusted proxy. X-Forwarded-For is never read otherwise, since
// any client can send it. An IPv6 address is keyed by its /64 (one host usually holds a whole
// /64). IPv4 peers are trusted only by IPv4 entries, or IPv4-mapped ones of /96 or longer
// ("::ffff:10.0.0.0/104" is 10.0.0.0/8); any other IPv6 prefix, "::/0" included, trusts IPv6
// peers only. The error is an entry of trustedProxies that is not an address or a prefix, or an
// IPv4-mapped prefix shorter than /96.
func KeyByClientIP(trustedProxies ...string) (KeyFunc, error) {
	// Entries and peers are compared unmapped (::ffff:10.1.2.3 is 10.1.2.3), as the TypeScript
	// middleware does, so that both trust the same peers. An IPv6 prefix covering
	// ::ffff:0:0/96 (::/0, ::/8) would otherwise trust every IPv4 peer, which is surely not
	// what its writer meant.
	var trusted []netip.Prefix
	for _, s := range trustedProxies {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("sluice: trusted proxy %q is neither an address nor a CIDR prefix", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4In6() {
			if p.Bits() < 96 {
				return nil, fmt.Errorf("sluice: trusted proxy %q is an IPv4-mapped prefix shorter than /96, which reaches beyond IPv4: write it as an IPv4 prefix", s)
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		trusted = append(trusted, p.Masked())
	}
	isTrusted := func(a netip.Addr) bool { // a is unmapped, without a zone
		for _, p := range trusted {
			if p.Contains(a) { // false when a and p are not of the same family
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (string, error) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		client, err := netip.ParseAddr(host)
		if err != nil {
			return "", fmt.Errorf("peer address %q: %w", r.RemoteAddr, err)
		}
		client = client.Unmap().WithZone("")
		if isTrusted(client) {
			hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
			for i := len(hops) - 1; i >= 0; i-- {
				a, err := parseHop(strings.TrimSpace(hops[i]))
				if err != nil {
					break // a forged or broken entry: keep the last address a trusted hop vouched for
				}
				client = a.Unmap().WithZone("")
				if !isTrusted(client) {
					break
				}
			}
		}
		if client.Is6() {
			return netip.PrefixFrom(client, 64).Masked().String(), nil
		}
		return client.String(), nil
	}, nil
}

// parseHop parses an address of X-Forwarded-For, an IPv6 one possibly in brackets
// ("[2001:db8::1]", as some proxies write it).
func parseHop(s string) (netip.Addr, error) {
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		s = s[1 : len(s)-1]
	}
	return netip.ParseAddr(s)
}
