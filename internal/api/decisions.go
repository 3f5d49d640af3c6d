package api

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/limiter"
)

var sessionIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{16,128}$`)

// ValidSessionID reports whether s looks like a session ID the widget flow creates.
func ValidSessionID(s string) bool { return sessionIDRE.MatchString(s) }

// SessionKey is the rate-limit key of an authorized anonymous session.
func SessionKey(sessionID string) string {
	sum := sha256.Sum256([]byte(sessionID))
	return limiter.SessionKeyPrefix + hex.EncodeToString(sum[:16])
}

// ipPrefixKey is the lossy fallback key: the client's /24 (IPv4) or /48 (IPv6), hashed.
func ipPrefixKey(ip string) string {
	parsed := net.ParseIP(ip)
	var prefix string
	switch {
	case parsed == nil:
		prefix = "unknown"
	case parsed.To4() != nil:
		prefix = parsed.Mask(net.CIDRMask(24, 32)).String() + "/24"
	default:
		prefix = parsed.Mask(net.CIDRMask(48, 128)).String() + "/48"
	}
	sum := sha256.Sum256([]byte(prefix))
	return limiter.IPKeyPrefix + hex.EncodeToString(sum[:16])
}

// item is one decision request in the API's terms, before keys are resolved.
type item struct {
	name string
	Decision
}

// toRequest validates an item and resolves its key (including anonymous sessions).
func (s *Server) toRequest(c *gin.Context, it item, field string) (limiter.Request, error) {
	req := limiter.Request{Name: it.name, Count: 1, Reserve: it.Reserve, Field: field}
	if !limiter.ValidName(it.name) {
		return req, badRequest(field+"name", "limit names match ^[A-Za-z0-9_.:-]{1,128}$ and are not \".\" or \"..\"")
	}
	if it.Count != nil {
		// Before the plan's rate is spent, or even read: a bad count is a 400 whatever the plan.
		if err := limiter.CheckCount(*it.Count); err != nil {
			return req, apperr.At(field, err)
		}
		req.Count = *it.Count
	}
	if it.Config != nil {
		def, err := it.Config.ToDefinition()
		if err != nil {
			return req, apperr.At(field+"config.", err)
		}
		if len(def.Parents) > 0 {
			return req, &apperr.Error{Code: apperr.InvalidConfig, Field: field + "config.parents",
				Message: "inline configs cannot have parents: store the definition (PUT /v1/limits/{name}) to give it parents"}
		}
		req.Config = &def
	}
	if err := limiter.CheckAttributes(it.Attributes); err != nil {
		e := *apperr.From(err)
		e.Field = field + e.Field
		e.Fields = nil // one problem: the field above, with the request's path
		return req, &e
	}
	req.Attributes = it.Attributes
	var visitor netip.Addr
	if it.IP != nil {
		a, err := netip.ParseAddr(*it.IP)
		if err != nil || a.Zone() != "" {
			return req, badRequest(field+"ip", "ip must be an IPv4 or IPv6 address, such as 203.0.113.7 or 2001:db8::1")
		}
		visitor = a.Unmap()
	}
	switch {
	case it.Key != nil && it.Session != nil:
		return req, badRequest(field+"session", `give "key" or "session", not both`)
	case it.Key != nil && it.IP != nil:
		return req, badRequest(field+"ip", `"ip" goes with "session" (the address of its IP fallback) or alone (the address decides under a key of its own), not with "key"`)
	case it.Key != nil:
		k := *it.Key
		if !limiter.ValidKey(k) {
			return req, badRequest(field+"key", limiter.KeyRule)
		}
		if limiter.ReservedKey(k) {
			return req, badRequest(field+"key", `keys starting with "session:" or "ip:" are reserved; use "session" for anonymous sessions`)
		}
		req.Key = k
	case it.Session != nil:
		clientIP := c.ClientIP()
		if visitor.IsValid() {
			clientIP = visitor.String()
		}
		key, err := s.sessionKey(c, it, *it.Session, clientIP, field)
		if err != nil {
			return req, err
		}
		req.Key = key
	case visitor.IsValid():
		req.Key = ipAddressKey(visitor)
	}
	return req, nil
}

// ipAddressKey is the key of a decision made for one visitor address: the address for IPv4, its
// /64 for IPv6 (one subscriber usually holds a whole /64), hashed.
func ipAddressKey(a netip.Addr) string {
	p := netip.PrefixFrom(a, 32)
	if a.Is6() {
		p = netip.PrefixFrom(a, 64).Masked()
	}
	sum := sha256.Sum256([]byte("address " + p.String()))
	return limiter.IPKeyPrefix + hex.EncodeToString(sum[:16])
}

// sessionKey resolves an anonymous session: its own key when authorized, otherwise the hashed
// client-IP prefix if the definition opts in, otherwise 403 session_not_authorized.
// clientIP is the address of the IP fallback: the request's, or the body's explicit "ip".
func (s *Server) sessionKey(c *gin.Context, it item, sessionID, clientIP, field string) (string, error) {
	if !ValidSessionID(sessionID) {
		return "", badRequest(field+"session", "session IDs are 16 to 128 characters of [A-Za-z0-9_-]")
	}
	ctx := c.Request.Context()
	tenantID := tenantOf(c).TenantID
	if s.sessions != nil {
		ok, err := s.sessions.IsAuthorized(ctx, tenantID, sessionID)
		if err != nil {
			return "", err
		}
		if ok {
			return SessionKey(sessionID), nil
		}
	}
	// The definition that would decide: the stored one, else the inline config (both is the
	// decision's own 409, answered here as it would be without a session).
	fallback := false
	stored, err := s.engine.GetDefinition(ctx, tenantID, it.name)
	switch {
	case err == nil && it.Config != nil:
		return "", apperr.At(field, limiter.ErrDefinitionExists)
	case err == nil:
		fallback = stored.Definition.IPFallback
	case !limiter.IsNotFound(err):
		return "", err
	case it.Config != nil:
		fallback = it.Config.IPFallback != nil && *it.Config.IPFallback
	default:
		return "", inItem(field, "name", err)
	}
	if fallback {
		return ipPrefixKey(clientIP), nil
	}
	return "", inItem(field, "session", errSessionNotAuthorized)
}

// inItem is err about member of the batch or bulk item at prefix ("limits[1]."), so that the
// client can tell which item it is about, as the decision's own problems say; err itself for a
// lone decision (prefix ""), whose name is its path's.
func inItem(prefix, member string, err error) error {
	var e *apperr.Error
	if prefix == "" || !errors.As(err, &e) {
		return err
	}
	return e.WithField(prefix + member)
}

func (s *Server) decideOne(c *gin.Context, consume bool) {
	name := c.Param("name")
	idemKey, err := idempotencyKeyOf(c)
	if err != nil && consume {
		writeProblem(c, s.log, err)
		return
	}
	var body DecisionBody
	raw, err := decodeJSONRaw(c, &body, MaxBodyBytes)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	req, err := s.toRequest(c, item{name: name, Decision: body.Decision}, "")
	if err != nil && consume && s.replayStored(c, idemKey, raw) {
		return
	}
	if err != nil {
		if e := apperr.From(err); e.Code == apperr.InvalidRequest && e.Field == "name" {
			err = limiter.ErrLimitNotFound // the name is part of the path: an impossible name is not found
		}
		writeProblem(c, s.log, err)
		return
	}
	requestID := c.GetString(RequestIDKey)
	s.decideWithPlan(c, []limiter.Request{req}, consume, idemKey, raw, func(b limiter.BatchDecision) limiter.Answer {
		return oneAnswer(b.Results[0], body.Throws, requestID)
	})
}

// decideWithPlan decides reqs as one batch, all or nothing with the tenant's plan (planGuard), and
// writes render's answer to the tenant's own decisions (the plan's refusal is 429
// tenant_quota_exceeded). With an Idempotency-Key (consuming only) the answer is stored in the
// deciding transaction and a retry replays it (limiter.LimitIdempotent).
func (s *Server) decideWithPlan(c *gin.Context, reqs []limiter.Request, consume bool, idemKey string, raw []byte, render func(limiter.BatchDecision) limiter.Answer) {
	plan, err := s.planGuard(c, len(reqs))
	if err != nil && consume && s.replayStored(c, idemKey, raw) {
		return
	}
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	if plan != nil {
		reqs = append(reqs, *plan)
	}
	requestID := c.GetString(RequestIDKey)
	var used *limiter.Decision // the plan as an admitted consuming batch left it
	answer := func(b limiter.BatchDecision) limiter.Answer {
		used = nil // a retried transaction renders again
		if plan != nil {
			last := b.Results[len(b.Results)-1]
			if !last.OK {
				own := b.Results[:len(b.Results)-1]
				return problemAnswer(planRefusal(plan, last, own), requestID, rateLimitHeaderMap(own))
			}
			if b.OK && consume {
				used = &last
			}
			b.Results = b.Results[:len(b.Results)-1]
		}
		return render(b)
	}
	ctx, tenantID := c.Request.Context(), tenantOf(c).TenantID
	if consume && idemKey != "" {
		r, err := s.engine.LimitIdempotent(ctx, tenantID, reqs, idempotencyFor(c, idemKey, 0, raw, answer))
		if err != nil {
			writeProblem(c, s.log, err)
			return
		}
		if used != nil && !r.Replayed {
			s.planUsed(c, plan, *used)
		}
		writeAnswer(c, r.Answer, r.Replayed)
		return
	}
	b, err := s.engine.Batch(ctx, tenantID, reqs, consume)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	a := answer(b)
	if used != nil {
		s.planUsed(c, plan, *used)
	}
	writeAnswer(c, a, false)
}

func (s *Server) limitOne(c *gin.Context) { s.decideOne(c, true) }
func (s *Server) checkOne(c *gin.Context) { s.decideOne(c, false) }

func (s *Server) decideBatch(c *gin.Context, consume bool) {
	idemKey, err := idempotencyKeyOf(c)
	if err != nil && consume {
		writeProblem(c, s.log, err)
		return
	}
	var body BatchBody
	raw, err := decodeJSONRaw(c, &body, MaxBodyBytes)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	if len(body.Limits) == 0 || len(body.Limits) > MaxBatch {
		writeProblem(c, s.log, fieldf("limits", "limits must hold 1 to %d items", MaxBatch))
		return
	}
	reqs := make([]limiter.Request, len(body.Limits))
	for i, it := range body.Limits {
		req, err := s.toRequest(c, item{name: it.Name, Decision: it.Decision},
			fmt.Sprintf("limits[%d].", i))
		if err != nil && consume && s.replayStored(c, idemKey, raw) {
			return
		}
		if err != nil {
			writeProblem(c, s.log, err)
			return
		}
		reqs[i] = req
	}
	requestID := c.GetString(RequestIDKey)
	s.decideWithPlan(c, reqs, consume, idemKey, raw, func(b limiter.BatchDecision) limiter.Answer {
		return batchAnswer(b, body.Throws, requestID)
	})
}

// worstRefusal is the refusal a refused batch's 429 names: the one with the largest retryAfter.
func worstRefusal(b limiter.BatchDecision) limiter.Decision {
	worst := b.Results[0]
	for _, r := range b.Results {
		if !r.OK && (worst.OK || (r.RetryAfter != nil && (worst.RetryAfter == nil || *r.RetryAfter > *worst.RetryAfter))) {
			worst = r
		}
	}
	return worst
}

func toBatchResponse(b limiter.BatchDecision) BatchResponse {
	out := BatchResponse{OK: b.OK, RetryAfter: b.RetryAfter, Results: make([]DecisionResponse, len(b.Results))}
	for i, r := range b.Results {
		out.Results[i] = toDecisionResponse(r)
	}
	return out
}

// decideBulk answers POST /v1/decisions: each decision on its own, in order, sharing the group
// transactions (not all or nothing, unlike /v1/limit). A bad item gets its own problem.
func (s *Server) decideBulk(c *gin.Context) {
	idemKey, err := idempotencyKeyOf(c)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	var body BulkBody
	raw, err := decodeJSONRaw(c, &body, MaxBulkBodyBytes)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	if len(body.Decisions) == 0 || len(body.Decisions) > MaxBulk {
		writeProblem(c, s.log, fieldf("decisions", "decisions must hold 1 to %d items", MaxBulk))
		return
	}
	results := make([]BulkResult, len(body.Decisions))
	var reqs []limiter.Request
	var at []int              // the item of each request
	var stored map[int][]byte // items an earlier attempt decided that would now be refused before deciding
	var answers map[int]limiter.Answer
	for i, it := range body.Decisions {
		req, err := s.toRequest(c, item{name: it.Name, Decision: it.Decision}, fmt.Sprintf("decisions[%d].", i))
		if err != nil && idemKey != "" {
			if answers == nil { // read once, on the first item refused
				answers = s.storedAnswers(c, idemKey, raw)
			}
			if a, ok := answers[i]; ok {
				if stored == nil {
					stored = map[int][]byte{}
				}
				stored[i] = a.Body
				continue
			}
		}
		if err != nil {
			results[i].Error = s.itemProblem(c, err)
			continue
		}
		reqs, at = append(reqs, req), append(at, i)
	}
	plan, err := s.planGuard(c, 1) // each item is its own decision, all or nothing with the plan
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	if idemKey != "" {
		s.decideBulkIdempotent(c, idemKey, raw, reqs, at, plan, results, stored)
		return
	}
	var used *limiter.Decision // the plan as the last admitted item left it
	for k, o := range s.engine.EachWith(c.Request.Context(), tenantOf(c).TenantID, reqs, plan, true) {
		if o.Err != nil {
			results[at[k]].Error = s.itemProblem(c, o.Err)
			continue
		}
		if o.With != nil && !o.With.OK {
			results[at[k]].Error = s.itemProblem(c, planRefusal(plan, *o.With, []limiter.Decision{o.Decision}))
			continue
		}
		if o.With != nil && o.Decision.OK {
			used = o.With
		}
		d := toDecisionResponse(o.Decision)
		results[at[k]].DecisionResponse = &d
	}
	if used != nil {
		s.planUsed(c, plan, *used)
	}
	c.JSON(http.StatusOK, BulkResponse{Results: results})
}

// itemProblem is the problem of one bulk item; an internal cause is logged as writeProblem does.
func (s *Server) itemProblem(c *gin.Context, err error) *Problem {
	p := ProblemFor(err)
	if p.Status >= http.StatusInternalServerError {
		s.log.WarnContext(c.Request.Context(), "bulk item failed", "request_id", c.GetString(RequestIDKey), "err", err)
	}
	return &p
}

func (s *Server) limitBatch(c *gin.Context) { s.decideBatch(c, true) }
func (s *Server) checkBatch(c *gin.Context) { s.decideBatch(c, false) }

// errTooMany is a refusal as 429 rate_limited (throws: true; Retry-After in whole seconds,
// rounded up), naming the limit whose refusal it is: an ancestor's when the wait is its.
func errTooMany(d limiter.Decision) error {
	by := d.RefusedBy()
	return &apperr.Error{Code: apperr.RateLimited, Message: fmt.Sprintf("limit %q refused the request", by),
		Name: by, RetryAfterMs: d.RetryAfter}
}

// replayStored writes the answer stored under idemKey for this very request, if there is one,
// and reports whether it did: a retry is replayed even where a check made before deciding (the
// plan's burst, an anonymous session's authorization) would now refuse it.
func (s *Server) replayStored(c *gin.Context, idemKey string, raw []byte) bool {
	if idemKey == "" {
		return false
	}
	a, ok := s.storedAnswers(c, idemKey, raw)[0]
	if ok {
		writeAnswer(c, a, true)
	}
	return ok
}

// storedAnswers are the answers stored under idemKey for this very request, by part (never nil);
// none when they cannot be read, so that the refusal about to be made stands.
func (s *Server) storedAnswers(c *gin.Context, idemKey string, raw []byte) map[int]limiter.Answer {
	answers, err := s.engine.StoredAnswers(c.Request.Context(), tenantOf(c).TenantID, idemKey, requestHash(c, raw))
	if err != nil || answers == nil {
		return map[int]limiter.Answer{}
	}
	return answers
}
