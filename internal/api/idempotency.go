package api

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// Idempotent decisions (limiter/idempotency.go does the work in the deciding transaction). A
// consuming route that takes the Idempotency-Key header reads it with idempotencyKeyOf, decodes
// its body with decodeJSONRaw, and, when a key was given, hands the engine an idempotency record
// (idempotencyFor) whose Render builds the whole answer — status, headers, body — exactly as the
// route would write it; the route then writes what the engine returns (writeAnswer). Wiring
// another route is those three calls.
//
// The canonical request is the method, the path, the tenant and the body's bytes: a retry must
// send the same bytes (clients that re-encode a body must encode it the same way). A retry while
// the first attempt is still being decided waits for it (the database orders the two; the second
// replays), so the API never answers 409 for a key in flight.

const (
	// IdempotencyKeyHeader is the request header that makes a decision idempotent.
	IdempotencyKeyHeader = "Idempotency-Key"
	// IdempotentReplayedHeader marks a replayed answer ("true"): nothing was decided again.
	IdempotentReplayedHeader = "Idempotent-Replayed"
	// maxIdempotencyKey is the longest Idempotency-Key.
	maxIdempotencyKey = 255
	// CallIDHeader is a client's ID of one call, the same on each of its retries, sent beside an
	// Idempotency-Key: the answer stored under the key carries the ID the deciding request sent,
	// so a replay tells a client whether it answers the call's own earlier attempt (whose answer
	// was lost) or another call that used the same key (a visitor's retry holding the same
	// concurrency slot, say). Without one the answer carries none.
	CallIDHeader = "Sluice-Call-Id"
	// maxCallID is the longest Sluice-Call-Id.
	maxCallID = 64
)

// callIDOf reads the Sluice-Call-Id header: "" when absent, a 400 naming the header unless it
// is one value of 1 to 64 letters, digits and "-._~" (it is written back in answers).
func callIDOf(c *gin.Context) (string, error) {
	vs := c.Request.Header.Values(CallIDHeader)
	if len(vs) == 0 {
		return "", nil
	}
	const rule = "Sluice-Call-Id must be one header of 1 to 64 letters, digits, '-', '.', '_' or '~'"
	if len(vs) > 1 || len(vs[0]) == 0 || len(vs[0]) > maxCallID {
		return "", badRequest(CallIDHeader, rule)
	}
	for _, r := range vs[0] {
		if !callIDRune(r) {
			return "", badRequest(CallIDHeader, rule)
		}
	}
	return vs[0], nil
}

// callIDRune reports whether r may be in a Sluice-Call-Id: a letter, a digit, '-', '.', '_' or '~'.
func callIDRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~", r)
}

// withCallID is answer a with the request's Sluice-Call-Id (checked by idempotencyKeyOf), to be
// stored with it and so replayed with it.
func withCallID(c *gin.Context, a limiter.Answer) limiter.Answer {
	if id := c.Request.Header.Get(CallIDHeader); id != "" {
		h := make(map[string]string, len(a.Header)+1)
		for k, v := range a.Header {
			h[k] = v
		}
		h[CallIDHeader] = id
		a.Header = h
	}
	return a
}

// idempotencyKeyOf reads the Idempotency-Key header: "" when absent, a 400 naming the header
// unless it is one value of 1 to 255 printable ASCII characters.
func idempotencyKeyOf(c *gin.Context) (string, error) {
	vs := c.Request.Header.Values(IdempotencyKeyHeader)
	if len(vs) == 0 {
		return "", nil
	}
	const rule = "Idempotency-Key must be one header of 1 to 255 printable ASCII characters"
	if len(vs) > 1 {
		return "", badRequest(IdempotencyKeyHeader, rule+"; it was given more than once")
	}
	k := vs[0]
	if len(k) == 0 || len(k) > maxIdempotencyKey {
		return "", badRequest(IdempotencyKeyHeader, rule)
	}
	for i := range len(k) {
		if k[i] < 0x20 || k[i] > 0x7e {
			return "", badRequest(IdempotencyKeyHeader, rule)
		}
	}
	if _, err := callIDOf(c); err != nil {
		return "", err
	}
	return k, nil
}

// requestHash is the hash of the canonical request: method, path, tenant and body bytes.
func requestHash(c *gin.Context, body []byte) []byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n%d\n", c.Request.Method, c.Request.URL.Path, tenantOf(c).TenantID)
	h.Write(body)
	return h.Sum(nil)
}

// idempotencyFor is the engine's idempotency record of a request with key and body; part tells
// apart the items of one bulk request.
func idempotencyFor(c *gin.Context, key string, part int, body []byte, render func(limiter.BatchDecision) limiter.Answer) *limiter.Idempotency {
	idem := &limiter.Idempotency{Key: key, Part: part, Hash: requestHash(c, body)}
	if render != nil {
		idem.Render = func(b limiter.BatchDecision) limiter.Answer { return withCallID(c, render(b)) }
	}
	return idem
}

// writeAnswer writes an answer rendered for an idempotent request (or replayed, marked so).
func writeAnswer(c *gin.Context, a limiter.Answer, replayed bool) {
	h := c.Writer.Header()
	for k, v := range a.Header {
		h.Set(k, v)
	}
	if replayed {
		h.Set(IdempotentReplayedHeader, "true")
	}
	if a.Status == http.StatusNoContent { // a release: no body, no Content-Type
		c.Status(a.Status)
		return
	}
	c.Data(a.Status, a.Header["Content-Type"], a.Body)
}

// rateLimitHeaderMap is setRateLimitHeaders' headers, for an answer.
func rateLimitHeaderMap(ds []limiter.Decision) map[string]string {
	h := map[string]string{}
	if policy, limit := limiter.RateLimitHeaders(limiter.WithParents(ds)); policy != "" {
		h["Ratelimit-Policy"], h["Ratelimit"] = policy, limit
	}
	return h
}

// jsonAnswer is c.JSON(status, v) with headers h, as an answer.
func jsonAnswer(status int, v any, h map[string]string) limiter.Answer {
	body, err := json.Marshal(v)
	if err != nil { // the API's response types always encode
		panic(fmt.Sprintf("api: encode answer: %v", err))
	}
	h["Content-Type"] = "application/json; charset=utf-8"
	return limiter.Answer{Status: status, Header: h, Body: body}
}

// tooManyAnswer is tooMany's 429 problem (writeProblem's rendering of it) as an answer.
func tooManyAnswer(d limiter.Decision, requestID string, h map[string]string) limiter.Answer {
	return problemAnswer(errTooMany(d), requestID, h)
}

// problemAnswer is writeProblem's rendering of a refusal (a 429: rate_limited or
// tenant_quota_exceeded) as an answer.
func problemAnswer(err error, requestID string, h map[string]string) limiter.Answer {
	p := ProblemFor(err)
	p.RequestID = requestID
	if p.RetryAfter != nil {
		h["Retry-After"] = strconv.FormatInt(limiter.HeaderSeconds(float64(*p.RetryAfter)), 10)
	}
	h["Cache-Control"] = "no-store"
	a := jsonAnswer(p.Status, p, h)
	a.Header["Content-Type"] = "application/problem+json"
	return a
}

// oneAnswer renders POST /v1/limits/{name}/limit's answer to a decision.
func oneAnswer(d limiter.Decision, throws bool, requestID string) limiter.Answer {
	h := rateLimitHeaderMap([]limiter.Decision{d})
	if !d.OK && throws {
		return tooManyAnswer(d, requestID, h)
	}
	return jsonAnswer(http.StatusOK, toDecisionResponse(d), h)
}

// batchAnswer renders POST /v1/limit's answer to a batch decision.
func batchAnswer(b limiter.BatchDecision, throws bool, requestID string) limiter.Answer {
	h := rateLimitHeaderMap(b.Results)
	if !b.OK && throws {
		return tooManyAnswer(worstRefusal(b), requestID, h)
	}
	return jsonAnswer(http.StatusOK, toBatchResponse(b), h)
}

// decideBulkIdempotent decides a bulk request's valid items (reqs, at their items at) with key:
// each item's answer is stored on its own (part = its index), so that a retry after a crash
// replays the items decided and decides only the others. results holds the invalid items'
// problems already (not stored: they are the same on every attempt). Idempotent-Replayed is set
// when at least one item was decided and every item decided was replayed (nothing was decided
// again): an item's problem, whether the request's parse or the engine found it (an unknown
// limit), is no decision either way and stored nothing to replay.
func (s *Server) decideBulkIdempotent(c *gin.Context, key string, body []byte, reqs []limiter.Request, at []int, plan *limiter.Request, results []BulkResult, stored map[int][]byte) {
	ctx := c.Request.Context()
	tenantID := tenantOf(c).TenantID
	hash := requestHash(c, body)
	// Items without a stored answer would otherwise be decided under a key used for another
	// request, and another request under this one's key where an item stored nothing: claim the
	// key first (refused whole if it holds another request).
	if err := s.engine.ClaimIdempotencyKey(ctx, tenantID, key, hash); err != nil {
		writeProblem(c, s.log, err)
		return
	}
	idems := make([]*limiter.Idempotency, len(reqs))
	for k := range reqs {
		idems[k] = &limiter.Idempotency{Key: key, Part: at[k], Hash: hash, Render: func(b limiter.BatchDecision) limiter.Answer {
			if plan != nil && !b.Results[1].OK { // the item's own problem, as in decideBulk
				p := ProblemFor(planRefusal(plan, b.Results[1], b.Results[:1]))
				return jsonAnswer(http.StatusOK, BulkResult{Error: &p}, map[string]string{})
			}
			d := toDecisionResponse(b.Results[0])
			return jsonAnswer(http.StatusOK, BulkResult{DecisionResponse: &d}, map[string]string{})
		}}
	}
	raw := make([]json.RawMessage, len(results))
	decided, replayed := false, true
	var used *limiter.Decision // the plan as the last item admitted now (not replayed) left it, as in decideBulk
	for k, o := range s.engine.EachIdempotent(ctx, tenantID, reqs, plan, idems) {
		if o.Err != nil {
			results[at[k]].Error = s.itemProblem(c, o.Err)
			continue
		}
		raw[at[k]] = o.Answer.Body
		decided, replayed = true, replayed && o.Replayed
		if !o.Replayed && o.With != nil && o.With.OK && o.Decision.OK {
			used = o.With
		}
	}
	if used != nil {
		s.planUsed(c, plan, *used)
	}
	for i, b := range stored { // replayed as they were stored, though they would be refused now
		raw[i], decided = b, true
	}
	for i := range raw {
		if raw[i] == nil {
			raw[i] = jsonAnswer(http.StatusOK, results[i], map[string]string{}).Body
		}
	}
	writeAnswer(c, jsonAnswer(http.StatusOK, struct {
		Results []json.RawMessage `json:"results"`
	}{raw}, map[string]string{}), decided && replayed)
}
