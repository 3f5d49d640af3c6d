// Package envoyrls serves Envoy's rate limit service, envoy.service.ratelimit.v3.RateLimitService
// ShouldRateLimit, over gRPC: a request's descriptors become limit names and keys of the caller's
// tenant and are decided all or nothing by one limiter.Engine.Batch. docs/envoy.md is the
// contract: the mapping, the unit rule and the policies.
package envoyrls

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// MaxDescriptors is the most descriptors one request may carry.
const MaxDescriptors = 64

// Authenticator resolves a tenant's API key (tenants.Service).
type Authenticator interface {
	Authenticate(ctx context.Context, secret string, kind tenants.KeyKind) (tenants.Principal, error)
}

// Engine decides limits (limiter.Engine).
type Engine interface {
	Batch(ctx context.Context, tenantID int64, reqs []limiter.Request, consume bool) (limiter.BatchDecision, error)
	CheckRefused(ctx context.Context, tenantID int64, reqs []limiter.Request) (limiter.BatchDecision, error)
	GetDefinition(ctx context.Context, tenantID int64, name string) (limiter.StoredDefinition, error)
}

// Options configure a Service.
type Options struct {
	// KeyHeader is the metadata header carrying the secret key (GRPC_KEY_HEADER); "authorization"
	// when empty.
	KeyHeader string
	// AllowUnknown answers OK, without counting, for a descriptor whose limit has no stored
	// definition (GRPC_UNKNOWN_LIMIT=allow); otherwise it is over the limit.
	AllowUnknown bool
	// Logger receives the causes of internal failures; slog.Default when nil.
	Logger *slog.Logger
	// Plans gives each tenant's plan, whose decision rate every request also spends, all or
	// nothing with its descriptors (nil: no plans).
	Plans PlanSource
}

// PlanSource gives the plan in force for a tenant, cached (tenants.Service).
type PlanSource interface {
	PlanOf(ctx context.Context, tenantID int64) (tenants.Plan, error)
}

// Service is the rate limit service. New starts nothing; Serve listens until its ctx ends.
type Service struct {
	rls.UnimplementedRateLimitServiceServer
	auth   Authenticator
	engine Engine
	opts   Options
	log    *slog.Logger
	// refusedWarnings keeps the warning about requests refused for their attributes to one a
	// minute per tenant and limit: a visitor can cause one per request.
	refusedWarnings warningThrottle
	// failedCalls keeps the warning about calls that failed (a wrong key in Envoy's configuration,
	// a malformed request) to one a minute per status code: with failure_mode_deny such calls
	// refuse all traffic, and no decision is logged to say so.
	failedCalls warningThrottle
	// missingParentWarnings keeps the warning about requests refused because a limit's parent
	// has no stored definition to one a minute per tenant and limit: every request on such a
	// limit causes one.
	missingParentWarnings warningThrottle
	// undecidableWarnings keeps the warning about requests refused because a stored limit
	// cannot decide to one a minute per tenant and limit: every request on such a limit causes
	// one.
	undecidableWarnings warningThrottle
}

// throttle lets one event through per period and counts the ones it held back.
type throttle struct {
	mu         sync.Mutex
	next       time.Time
	suppressed int
}

// allow reports whether an event at now goes through, and if so how many were held back since
// the last one that did.
func (t *throttle) allow(now time.Time, period time.Duration) (ok bool, heldBack int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Before(t.next) {
		t.suppressed++
		return false, 0
	}
	heldBack, t.suppressed, t.next = t.suppressed, 0, now.Add(period)
	return true, heldBack
}

// maxWarningKeys bounds a warningThrottle's memory: its keys are tenants' limit names, of which
// tenants may store as many as they like.
const maxWarningKeys = 1024

// warningKey is what a warningThrottle throttles on its own: one tenant's limit.
type warningKey struct {
	tenantID int64
	limit    string
}

// warningThrottle is a throttle per tenant and limit, so that one tenant's broken limit, however
// busy, does not silence the warning about another's. It holds at most maxWarningKeys throttles:
// when full, a new key first clears those whose period has passed (they would let their next
// event through anyway; what they held back goes unreported), and while none has, the new keys
// share one throttle (overflow), so that a warning still goes through once a period.
type warningThrottle struct {
	mu       sync.Mutex
	byKey    map[warningKey]*throttle
	overflow throttle
}

// allow is throttle.allow for key's own throttle.
func (w *warningThrottle) allow(key warningKey, now time.Time, period time.Duration) (ok bool, heldBack int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.byKey[key]
	if t == nil {
		if len(w.byKey) >= maxWarningKeys {
			// A scan of at most maxWarningKeys, only for a new key while full.
			for k, old := range w.byKey {
				if !now.Before(old.next) {
					delete(w.byKey, k)
				}
			}
		}
		if len(w.byKey) >= maxWarningKeys {
			return w.overflow.allow(now, period)
		}
		if w.byKey == nil {
			w.byKey = map[warningKey]*throttle{}
		}
		t = &throttle{}
		w.byKey[key] = t
	}
	return t.allow(now, period)
}

// New returns the service; it starts nothing.
func New(auth Authenticator, engine Engine, opts Options) *Service {
	if opts.KeyHeader == "" {
		opts.KeyHeader = "authorization"
	}
	opts.KeyHeader = strings.ToLower(opts.KeyHeader)
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Service{auth: auth, engine: engine, opts: opts, log: log}
}

// stopGrace is how long in-flight calls may take to finish once Serve's ctx ends.
const stopGrace = 10 * time.Second

// Serve answers gRPC calls on l until ctx ends, then stops gracefully: no new calls, in-flight
// ones finish (cut off after stopGrace). It returns nil on a clean stop.
func (s *Service) Serve(ctx context.Context, l net.Listener) error {
	g := grpc.NewServer(grpc.ForceServerCodecV2(lenientCodec{encoding.GetCodecV2(proto.Name)}), grpc.ChainUnaryInterceptor(s.logFailures, s.recoverPanics))
	rls.RegisterRateLimitServiceServer(g, s)
	done := make(chan error, 1)
	go func() { done <- g.Serve(l) }()
	select {
	case err := <-done:
		return fmt.Errorf("envoyrls: serve: %w", err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(stopGrace):
		g.Stop()
	}
	if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("envoyrls: serve: %w", err)
	}
	return nil
}

// Errors a caller may see, as gRPC statuses.
var (
	errBadKey         = status.Error(codes.Unauthenticated, "missing, malformed or revoked API key: send a secret key in the configured metadata header")
	errPublishableKey = status.Error(codes.PermissionDenied, "publishable keys can only fetch captcha challenges; use a secret key")
	errUnavailable    = status.Error(codes.Unavailable, apperr.UnavailableMessage)
)

// ShouldRateLimit decides every descriptor of req, all or nothing, for the caller's tenant.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	p, err := s.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	reqs, err := toRequests(req)
	if errors.Is(err, errHitsNeverFit) {
		return overLimitAll(len(req.GetDescriptors())), nil
	}
	if err != nil {
		return nil, err
	}
	plan, fits, err := s.plan(ctx, p.TenantID, len(reqs))
	switch {
	case err != nil:
		return nil, s.statusOf(ctx, err)
	case !fits: // more descriptors than the plan admits at once: can never pass
		return overLimitAll(len(reqs)), nil
	}
	b, err := s.engine.Batch(ctx, p.TenantID, withPlan(reqs, plan), true)
	if limiter.IsNotFound(err) {
		return s.withUnknown(ctx, p.TenantID, reqs, plan)
	}
	if s.neverPasses(ctx, p.TenantID, reqs, err) {
		return overLimitAll(len(reqs)), nil
	}
	if err != nil {
		return nil, s.statusOf(ctx, err)
	}
	results, planned := splitPlan(b.Results, plan)
	return planResponse(response(b.OK, results, nil), planned), nil
}

// plan is the request that spends n decisions of the tenant's plan rate (nil without one);
// fits is false when n is more than the plan admits at once.
func (s *Service) plan(ctx context.Context, tenantID int64, n int) (plan *limiter.Request, fits bool, err error) {
	if s.opts.Plans == nil {
		return nil, true, nil
	}
	p, err := s.opts.Plans.PlanOf(ctx, tenantID)
	if err != nil {
		return nil, false, err
	}
	if p.DecisionsPerSecond > 0 && float64(n) > limiter.PlanBurst(p.DecisionsPerSecond) {
		return nil, false, nil
	}
	return limiter.PlanRequest(tenantID, p.DecisionsPerSecond, n), true, nil
}

func withPlan(reqs []limiter.Request, plan *limiter.Request) []limiter.Request {
	if plan == nil {
		return reqs
	}
	return append(reqs[:len(reqs):len(reqs)], *plan)
}

// splitPlan separates the plan's decision (the last) from the descriptors'.
func splitPlan(results []limiter.Decision, plan *limiter.Request) ([]limiter.Decision, *limiter.Decision) {
	if plan == nil {
		return results, nil
	}
	d := results[len(results)-1]
	return results[:len(results)-1], &d
}

// planResponse makes a request the plan refused over the limit as a whole (its descriptors keep
// their own statuses; none was counted) with the plan's Retry-After, or a descriptor's longer one.
func planResponse(out *rls.RateLimitResponse, planned *limiter.Decision) *rls.RateLimitResponse {
	if planned == nil || planned.OK {
		return out
	}
	out.OverallCode = rls.RateLimitResponse_OVER_LIMIT
	if planned.RetryAfter == nil {
		return out
	}
	plan := limiter.HeaderSeconds(float64(statedWait(*planned.RetryAfter)))
	for _, h := range out.ResponseHeadersToAdd {
		if h.Key == "retry-after" {
			// A descriptor refused too: the longer wait, as every refusal's must pass.
			if own, err := strconv.ParseInt(h.Value, 10, 64); err == nil && own < plan {
				h.Value = strconv.FormatInt(plan, 10)
			}
			return out
		}
	}
	out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &core.HeaderValue{Key: "retry-after",
		Value: strconv.FormatInt(plan, 10)})
	return out
}

// withUnknown answers a request naming at least one limit without a stored definition: the
// unknown ones per the policy, the known ones decided (allow: counted; deny: only checked, as the
// request is refused and so consumes nothing, each reporting its balance as it stands).
func (s *Service) withUnknown(ctx context.Context, tenantID int64, reqs []limiter.Request, plan *limiter.Request) (*rls.RateLimitResponse, error) {
	unknown := make([]bool, len(reqs))
	seen := map[string]bool{}               // name -> unknown
	defs := map[string]limiter.Definition{} // name -> definition, of the known ones
	var known []limiter.Request
	var at []int
	for i, r := range reqs {
		u, ok := seen[r.Name]
		if !ok {
			sd, err := s.engine.GetDefinition(ctx, tenantID, r.Name)
			switch {
			case limiter.IsNotFound(err):
				u = true
			case err != nil:
				return nil, s.statusOf(ctx, err)
			default:
				defs[r.Name] = sd.Definition
			}
			seen[r.Name] = u
		}
		if unknown[i] = u; !u {
			known, at = append(known, r), append(at, i)
		}
	}
	results := make([]limiter.Decision, len(reqs))
	ok := s.opts.AllowUnknown
	var planned *limiter.Decision // the plan is spent only with what is counted: the known limits
	if len(known) > 0 {
		if plan != nil {
			p := *plan
			p.Count = float64(len(known))
			plan = &p
		}
		var b limiter.BatchDecision
		var err error
		if s.opts.AllowUnknown {
			b, err = s.engine.Batch(ctx, tenantID, withPlan(known, plan), true)
		} else { // refused as a whole: each known limit's balance as it stands
			b, err = s.engine.CheckRefused(ctx, tenantID, withPlan(known, plan))
		}
		switch {
		case limiter.IsNotFound(err):
			return s.missingParent(ctx, tenantID, known, defs, len(reqs), err)
		case s.neverPasses(ctx, tenantID, reqs, err):
			return overLimitAll(len(reqs)), nil
		case err != nil:
			return nil, s.statusOf(ctx, err)
		}
		ok = ok && b.OK
		var decided []limiter.Decision
		decided, planned = splitPlan(b.Results, plan)
		for k, d := range decided {
			results[at[k]] = d
		}
	}
	for i := range results {
		if unknown[i] {
			results[i] = limiter.Decision{Name: reqs[i].Name, Key: reqs[i].Key, OK: s.opts.AllowUnknown}
		}
	}
	return planResponse(response(ok, results, unknown), planned), nil
}

// missingParent answers a request whose known limits were found a moment ago but whose batch
// says a limit has no stored definition (batchErr). When an ancestor of one of them (a parent,
// its parent, ...) has none, every call on that limit would fail the same way until the parent
// is defined: the request is refused, OVER_LIMIT with nothing counted, as a request whose
// attributes cannot fill a parent's key is, rather than failing the call (which Envoy lets
// through unless failure_mode_deny is set, so the limit would never be enforced), and a warning
// naming the limit and the missing parent is logged, at most once a minute. Otherwise one of the
// limits was deleted meanwhile: the call fails closed (UNAVAILABLE), as a retry decides anew.
func (s *Service) missingParent(ctx context.Context, tenantID int64, known []limiter.Request, defs map[string]limiter.Definition, n int, batchErr error) (*rls.RateLimitResponse, error) {
	type edge struct{ limit, parent, namedBy string }
	var queue []edge
	checked := map[string]bool{}
	for _, r := range known {
		if checked[r.Name] {
			continue
		}
		checked[r.Name] = true
		for _, p := range defs[r.Name].Parents {
			queue = append(queue, edge{r.Name, p.Name, r.Name})
		}
	}
	// Breadth first, each ancestor read once; a chain is at most algo.MaxParentDepth long, and
	// the visited set ends a cycle (a definition stored before its parents could close one).
	visited := map[string]limiter.Definition{}
	for len(queue) > 0 {
		e := queue[0]
		queue = queue[1:]
		def, ok := visited[e.parent]
		if !ok {
			if d, isKnown := defs[e.parent]; isKnown {
				def = d
			} else {
				sd, err := s.engine.GetDefinition(ctx, tenantID, e.parent)
				switch {
				case limiter.IsNotFound(err):
					if ok, heldBack := s.missingParentWarnings.allow(warningKey{tenantID, e.limit}, time.Now(), time.Minute); ok {
						s.log.WarnContext(ctx, "envoy rate limit service: request refused: a parent of its limit has no stored definition",
							"tenant", tenantID, "limit", e.limit, "missing_parent", e.parent, "parent_of", e.namedBy,
							"err", batchErr, "refused_since_last_warning", heldBack)
					}
					return overLimitAll(n), nil
				case err != nil:
					return nil, s.statusOf(ctx, err)
				}
				def = sd.Definition
			}
			visited[e.parent] = def
			for _, p := range def.Parents {
				queue = append(queue, edge{e.limit, p.Name, e.parent})
			}
		}
	}
	// Every ancestor exists: a definition was deleted (or a parent created) meanwhile. Fail
	// closed rather than guess; the next call decides anew.
	return nil, errUnavailable
}

// authenticate reads the secret key from the configured metadata header.
func (s *Service) authenticate(ctx context.Context) (tenants.Principal, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(s.opts.KeyHeader)
	if len(vals) != 1 {
		return tenants.Principal{}, errBadKey
	}
	secret := strings.TrimSpace(vals[0])
	if scheme, rest, ok := strings.Cut(secret, " "); ok && strings.EqualFold(scheme, "Bearer") {
		secret = strings.TrimSpace(rest)
	}
	if secret == "" {
		return tenants.Principal{}, errBadKey
	}
	p, err := s.auth.Authenticate(ctx, secret, tenants.KindSecret)
	if err == nil {
		return p, nil
	}
	if !errors.Is(err, tenants.ErrUnauthorized) {
		return tenants.Principal{}, s.statusOf(ctx, err)
	}
	switch _, perr := s.auth.Authenticate(ctx, secret, tenants.KindPublishable); {
	case perr == nil:
		return tenants.Principal{}, errPublishableKey
	case errors.Is(perr, tenants.ErrTenantSuspended): // refused as every key of the tenant is
		return tenants.Principal{}, s.statusOf(ctx, perr)
	}
	return tenants.Principal{}, errBadKey
}

// recoverPanics turns a panic in a call into a logged UNAVAILABLE (failing closed, as every
// error that is not the caller's), never a crashed process: what the HTTP API's Recover does.
func (s *Service) recoverPanics(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.ErrorContext(ctx, "envoy rate limit service: panic", "panic", r, "stack", string(debug.Stack()))
			resp, err = nil, errUnavailable
		}
	}()
	return next(ctx, req)
}

// logFailures warns that calls failed, at most once a minute for each status code (the calls it
// held back counted in the next), naming the code and the status's message, never the key.
// A call its caller gave up on (CANCELLED, DEADLINE_EXCEEDED) is not a failure of the service's.
func (s *Service) logFailures(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	resp, err := next(ctx, req)
	if code := status.Code(err); err != nil && code != codes.Canceled && code != codes.DeadlineExceeded {
		if ok, heldBack := s.failedCalls.allow(warningKey{limit: code.String()}, time.Now(), time.Minute); ok {
			s.log.WarnContext(ctx, "envoy rate limit service: a call failed", "code", code.String(),
				"message", status.Convert(err).Message(), "failed_since_last_warning", heldBack)
		}
	}
	return resp, err
}

// statusOf maps an error of the domain to a gRPC status. Whatever is not the caller's mistake
// fails closed as UNAVAILABLE (Envoy's failure_mode_deny then refuses the request).
func (s *Service) statusOf(ctx context.Context, err error) error {
	e := apperr.From(err)
	switch e.Code {
	case apperr.InvalidRequest, apperr.InvalidConfig:
		return status.Error(codes.InvalidArgument, e.Message)
	case apperr.Unauthorized:
		return errBadKey
	case apperr.Forbidden:
		return errPublishableKey
	case apperr.TenantSuspended:
		return status.Error(codes.PermissionDenied, e.Message)
	case apperr.Unavailable:
		return errUnavailable
	}
	s.log.WarnContext(ctx, "envoy rate limit service: decision failed", "err", err)
	return errUnavailable
}

// Separators of the mapping (docs/envoy.md).
const (
	nameSep = "."
	keySep  = "/"
)

// keyEscaper makes the key mapping one to one: "/" inside a value cannot be confused with the
// separator. NUL, which a key cannot hold, is written %00.
var keyEscaper = strings.NewReplacer("%", "%25", "/", "%2F", "\x00", "%00")

// escapeValue is keyEscaper's escaping, and each byte that is not part of valid UTF-8 (a header
// value in Latin-1, read by lenientCodec) written %XX in upper-case hex. Every escape is the
// byte's %XX, so a key decodes back to its values.
func escapeValue(v string) string {
	return escapeNonUTF8(keyEscaper.Replace(v))
}

// escapeNonUTF8 writes each byte of v that is not part of valid UTF-8 as %XX.
func escapeNonUTF8(v string) string {
	if utf8.ValidString(v) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		if r == utf8.RuneError && size == 1 {
			fmt.Fprintf(&b, "%%%02X", v[i])
		} else {
			b.WriteString(v[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Keys of descriptors whose escaped values make no valid key: longer than a key may be (the
// prefix, then the SHA-256 of the escaped key in hex), or empty (one entry with an empty value).
// No escaped key starts with "%s" or "%e" (an escaped "%" is "%25"), so they are one to one too.
const (
	hashedKeyPrefix = "%sha256:"
	emptyKey        = "%empty"
)

// LimitName is the limit a descriptor counts against: the domain and the entries' keys joined
// with ".".
func LimitName(domain string, entries []*rlcommon.RateLimitDescriptor_Entry) string {
	parts := make([]string, 0, len(entries)+1)
	parts = append(parts, domain)
	for _, e := range entries {
		parts = append(parts, e.GetKey())
	}
	return strings.Join(parts, nameSep)
}

// neverPasses reports a refusal of the request itself that no retry can change, and that
// nothing was counted: a descriptor asks for more than its limit can ever admit or for a count
// its limit's kind never admits (a concurrency limit takes 1), or the descriptors' entries cannot
// fill a parent's key (an entry the template names is missing or empty, or the key it fills is
// too long or under a reserved prefix). Such a request is answered
// OVER_LIMIT, not with an error, since Envoy lets a request through when its rate limit call
// fails (unless failure_mode_deny is set): a visitor's header value must not be able to switch
// the limit off. The attributes' case is logged, at most once a minute, since it can also be the
// route's configuration not matching the limit's templates.
//
// So is a request on a stored limit that cannot decide (invalid_config from the engine: a
// quota an earlier version stored with a time zone this binary lacks, a concurrency limit stored
// as a parent before that was refused): the request carries no configuration of its own, so the
// stored definition is at fault, and failing every call on it would switch the limit (and its
// children) off. Logged at most once a minute; put the definition again to mend it.
//
// The warnings name the tenant and the limit of the descriptor the error is about (its field;
// see descriptorField), which is the child when a parent is at fault, and are throttled per both.
func (s *Service) neverPasses(ctx context.Context, tenantID int64, reqs []limiter.Request, err error) bool {
	if errors.Is(err, limiter.ErrBadAttributes) {
		limit := refusedLimit(reqs, err)
		if ok, heldBack := s.refusedWarnings.allow(warningKey{tenantID, limit}, time.Now(), time.Minute); ok {
			s.log.WarnContext(ctx, "envoy rate limit service: request refused: its descriptors cannot fill a parent's key",
				"tenant", tenantID, "limit", limit, "err", err, "refused_since_last_warning", heldBack)
		}
		return true
	}
	if err != nil && apperr.From(err).Code == apperr.InvalidConfig {
		limit := refusedLimit(reqs, err)
		if ok, heldBack := s.undecidableWarnings.allow(warningKey{tenantID, limit}, time.Now(), time.Minute); ok {
			s.log.WarnContext(ctx, "envoy rate limit service: request refused: a stored limit cannot decide until its definition is put again",
				"tenant", tenantID, "limit", limit, "err", err, "refused_since_last_warning", heldBack)
		}
		return true
	}
	return errors.Is(err, limiter.ErrCountExceedsCapacity) || errors.Is(err, limiter.ErrCountNeverAdmitted)
}

// LimitKey is the key a descriptor counts: the entries' values, each with "%", "/" and NUL escaped
// as %25, %2F and %00 and bytes that are not UTF-8 as %XX (escapeValue), joined with "/". Values
// come from visitors' requests, which must neither name an allowance that is not theirs nor fail
// the call (Envoy lets a request through when its rate limit call fails, unless
// failure_mode_deny is set). So a key that would start with a prefix
// reserved for the keys the API derives itself ("session:", "ip:") has that prefix's ":" written
// %3A (no escaped value contains "%3A"), and a key longer than a key may be is hashedKeyPrefix and
// its SHA-256 in hex; an empty key is emptyKey. Every rule keeps the mapping one to one, and
// every key it makes is valid.
func LimitKey(entries []*rlcommon.RateLimitDescriptor_Entry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = escapeValue(e.GetValue())
	}
	key := strings.Join(parts, keySep)
	if limiter.ReservedKey(key) {
		key = strings.Replace(key, ":", "%3A", 1)
	}
	switch {
	case key == "":
		key = emptyKey
	case len(key) > limiter.MaxKeyBytes:
		sum := sha256.Sum256([]byte(key))
		key = hashedKeyPrefix + hex.EncodeToString(sum[:])
	}
	return key
}

// Attributes are a descriptor's entries as a decision's attributes, which fill the key templates
// of the limit's parents (nested budgets): each entry whose key can name an attribute
// ([A-Za-z0-9_]{1,64}) gives its value, a later entry winning, if the value can be one (1 to 256
// bytes, as a key), each byte that is not part of UTF-8 written %XX as in keys (a header in
// Latin-1). None when there would be more than a decision may carry (a descriptor that
// long needs no parents' templates). A template that names a value left out refuses the request
// (see neverPasses), and one that names none does not mind it.
func Attributes(entries []*rlcommon.RateLimitDescriptor_Entry) map[string]string {
	var attrs map[string]string
	for _, e := range entries {
		if !limiter.ValidAttributeName(e.GetKey()) {
			continue
		}
		value := escapeNonUTF8(e.GetValue())
		if !limiter.ValidKey(value) {
			delete(attrs, e.GetKey()) // the later entry wins, and it is no attribute
			continue
		}
		if attrs == nil {
			attrs = map[string]string{}
		}
		attrs[e.GetKey()] = value
	}
	if len(attrs) > limiter.MaxAttributes {
		return nil
	}
	return attrs
}

// descriptorField is the place of descriptor i in the request, which the engine puts before the
// field of an error about that descriptor's decision ("descriptors[1].attributes.org"), so that
// refusedLimit can tell which descriptor's limit a refusal is about.
func descriptorField(i int) string { return fmt.Sprintf("descriptors[%d].", i) }

// refusedLimit is the limit of the descriptor among reqs whose field the engine's err names, or
// "" when it names none.
func refusedLimit(reqs []limiter.Request, err error) string {
	var e *apperr.Error
	if !errors.As(err, &e) {
		return ""
	}
	for _, r := range reqs {
		if r.Field != "" && strings.HasPrefix(e.Field, r.Field) { // the trailing "." tells [1] from [10]
			return r.Name
		}
	}
	return ""
}

// errHitsNeverFit: a hits_addend above limiter.MaxAmount, the largest count a decision may carry
// and the largest capacity a limit may have, can never fit. A route can derive hits_addend from
// the request, so it is refused (OVER_LIMIT), not failed, as a visitor's values are.
var errHitsNeverFit = errors.New("a descriptor's hits_addend is more than any limit can admit")

// toRequests validates req and maps its descriptors to limit requests.
func toRequests(req *rls.RateLimitRequest) ([]limiter.Request, error) {
	ds := req.GetDescriptors()
	switch {
	case req.GetDomain() == "":
		return nil, status.Error(codes.InvalidArgument, "domain is required")
	case len(ds) == 0 || len(ds) > MaxDescriptors:
		return nil, status.Errorf(codes.InvalidArgument, "a request carries 1 to %d descriptors", MaxDescriptors)
	}
	out := make([]limiter.Request, len(ds))
	neverFits := false // refused only once every descriptor's configuration has been checked
	for i, d := range ds {
		if len(d.GetEntries()) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d] has no entries", i)
		}
		if d.GetIsNegativeHits() {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d]: negative hits are not supported", i)
		}
		name, key := LimitName(req.GetDomain(), d.GetEntries()), LimitKey(d.GetEntries())
		if !limiter.ValidName(name) {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d]: limit name %q (domain and entry keys joined with %q) must match ^[A-Za-z0-9_.:-]{1,128}$ and not be \".\" or \"..\"", i, name, nameSep)
		}
		if !limiter.ValidKey(key) {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d]: limit key (entry values joined with %q): %s", i, keySep, limiter.KeyRule)
		}
		// The request's hits_addend is a plain number, whose 0 is "not set": 1. A descriptor's is
		// a wrapper, set or not: set to 0 it asks whether the limit has room without counting
		// (Envoy's reference service reads it so; a gateway peeks at a budget before routing).
		hits := max(1, uint64(req.GetHitsAddend()))
		if d.GetHitsAddend() != nil {
			hits = d.GetHitsAddend().GetValue()
		}
		if hits > limiter.MaxAmount {
			neverFits = true
			continue
		}
		out[i] = limiter.Request{Name: name, Key: key, Count: float64(hits), Attributes: Attributes(d.GetEntries()),
			Field: descriptorField(i)}
	}
	if neverFits {
		return nil, errHitsNeverFit
	}
	return out, nil
}

// maxWaitMillis is the longest wait the answer states, in duration_until_reset and Retry-After
// alike: the longest google.protobuf.Duration, 10,000 years of 365.25 days. A retryAfter may be up
// to 10^15 ms (31,700 years; a deny override that never expires says that much), and
// docs/envoy.md promises Retry-After is the longest duration_until_reset, so both use statedWait.
const maxWaitMillis = 315_576_000_000 * 1000

// statedWait is a retryAfter (ms) as the answer states it: at most maxWaitMillis.
func statedWait(retryAfterMillis int64) int64 { return min(retryAfterMillis, maxWaitMillis) }

// response builds the answer: per descriptor, its code, limit, remaining and time to wait.
func response(ok bool, results []limiter.Decision, unknown []bool) *rls.RateLimitResponse {
	out := &rls.RateLimitResponse{OverallCode: code(ok), Statuses: make([]*rls.RateLimitResponse_DescriptorStatus, len(results))}
	for i, d := range results {
		st := &rls.RateLimitResponse_DescriptorStatus{Code: code(d.OK)}
		if unknown == nil || !unknown[i] {
			st.CurrentLimit = CurrentLimit(d.Definition)
			st.LimitRemaining = clampUint32(math.Floor(d.Remaining))
			if !d.OK && d.RetryAfter != nil {
				// From the milliseconds themselves: a time.Duration holds only 292 years.
				ms := statedWait(*d.RetryAfter)
				st.DurationUntilReset = &durationpb.Duration{Seconds: ms / 1000, Nanos: int32(ms%1000) * 1_000_000}
			}
		}
		out.Statuses[i] = st
	}
	out.ResponseHeadersToAdd = rateLimitHeaders(ok, results, unknown)
	return out
}

// rateLimitHeaders are the headers Envoy adds to the client's response: RateLimit-Policy and
// RateLimit for every descriptor with a definition and for its limit's ancestors, as the JSON
// API sends them, and Retry-After
// when the request is refused and some refusal says when to retry.
func rateLimitHeaders(ok bool, results []limiter.Decision, unknown []bool) []*core.HeaderValue {
	var known []limiter.Decision
	var retry *int64
	for i, d := range results {
		if unknown != nil && unknown[i] {
			continue
		}
		known = append(known, d)
		if !d.OK && d.RetryAfter != nil && (retry == nil || *d.RetryAfter > *retry) {
			retry = d.RetryAfter
		}
	}
	var hs []*core.HeaderValue
	// Each descriptor's limit followed by its ancestors (nested budgets), as the JSON API names
	// them; the statuses stay the descriptors' own.
	if policy, limit := limiter.RateLimitHeaders(limiter.WithParents(known)); policy != "" { // none for shadow limits alone
		hs = append(hs,
			&core.HeaderValue{Key: "ratelimit-policy", Value: policy},
			&core.HeaderValue{Key: "ratelimit", Value: limit})
	}
	if !ok && retry != nil {
		hs = append(hs, &core.HeaderValue{Key: "retry-after", Value: strconv.FormatInt(limiter.HeaderSeconds(float64(statedWait(*retry))), 10)})
	}
	return hs
}

// overLimitAll refuses every one of n descriptors.
func overLimitAll(n int) *rls.RateLimitResponse {
	out := &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OVER_LIMIT}
	for range n {
		out.Statuses = append(out.Statuses, &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OVER_LIMIT})
	}
	return out
}

func code(ok bool) rls.RateLimitResponse_Code {
	if ok {
		return rls.RateLimitResponse_OK
	}
	return rls.RateLimitResponse_OVER_LIMIT
}

// units are Envoy's fixed-length units, longest first (MONTH and YEAR vary in length and are not
// used).
var units = []struct {
	unit rls.RateLimitResponse_RateLimit_Unit
	ms   int64
}{
	{rls.RateLimitResponse_RateLimit_WEEK, 7 * 24 * 3600 * 1000},
	{rls.RateLimitResponse_RateLimit_DAY, 24 * 3600 * 1000},
	{rls.RateLimitResponse_RateLimit_HOUR, 3600 * 1000},
	{rls.RateLimitResponse_RateLimit_MINUTE, 60 * 1000},
	{rls.RateLimitResponse_RateLimit_SECOND, 1000},
}

// CurrentLimit states a definition (Rate per Period ms) in Envoy's terms: when the period is a
// whole number of seconds, the longest unit that divides it, times unit_multiplier (omitted when
// 1), with requests_per_unit the rate rounded to a whole number; otherwise the rate per SECOND,
// rounded. A rate that rounds to 0 is stated as 1 so that Envoy never reads "no requests".
func CurrentLimit(def limiter.Definition) *rls.RateLimitResponse_RateLimit {
	if def.Period <= 0 {
		return nil
	}
	for _, u := range units {
		if def.Period%u.ms == 0 {
			rl := &rls.RateLimitResponse_RateLimit{Unit: u.unit, RequestsPerUnit: perUnit(def.Rate)}
			if m := def.Period / u.ms; m > 1 {
				rl.UnitMultiplier = wrapperspb.UInt32(uint32(min(m, math.MaxUint32)))
			}
			return rl
		}
	}
	return &rls.RateLimitResponse_RateLimit{Unit: rls.RateLimitResponse_RateLimit_SECOND,
		RequestsPerUnit: perUnit(def.Rate * 1000 / float64(def.Period))}
}

func perUnit(rate float64) uint32 { return max(clampUint32(math.Round(rate)), 1) }

func clampUint32(v float64) uint32 {
	switch {
	case math.IsNaN(v) || v <= 0:
		return 0
	case v >= math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}
