package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// HoldBody is the body of POST /v1/holds.
type HoldBody struct {
	Limits []HoldItem `json:"limits"`
	TTL    *int64     `json:"ttl"`
}

// HoldItem is one amount a hold reserves.
type HoldItem struct {
	Name       string            `json:"name"`
	Key        *string           `json:"key"`
	Count      *float64          `json:"count"`
	Attributes map[string]string `json:"attributes"`
}

// HoldResponse is an admitted hold: its handle, its expiry (ms since the epoch) and the decisions.
type HoldResponse struct {
	HoldID    string             `json:"holdId"`
	ExpiresAt int64              `json:"expiresAt"`
	Results   []DecisionResponse `json:"results"`
}

// SettleBody is the body of POST /v1/holds/{id}/settle.
type SettleBody struct {
	Counts []float64 `json:"counts"`
}

// SettleResponse is a settled hold, per limit in the hold's order.
type SettleResponse struct {
	HoldID string          `json:"holdId"`
	Limits []SettledAmount `json:"limits"`
}

// SettledAmount is one limit of a settled hold.
type SettledAmount struct {
	Name     string  `json:"name"`
	Key      *string `json:"key"`
	Held     float64 `json:"held"`
	Charged  float64 `json:"charged"`
	Refunded float64 `json:"refunded"`
	Overage  float64 `json:"overage"`
}

// hold reserves amounts all or nothing (issue 15: "reserve an estimate, run, charge what was
// used"). Like a decision it is traffic, not configuration: not audited. A refusal is 429 with
// the largest retryAfter, like a batch with throws.
func (s *Server) hold(c *gin.Context) {
	idemKey, err := idempotencyKeyOf(c)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	var body HoldBody
	raw, err := decodeJSONRaw(c, &body, MaxBodyBytes)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	if len(body.Limits) == 0 || len(body.Limits) > limiter.MaxHoldLimits {
		writeProblem(c, s.log, fieldf("limits", "limits must hold 1 to %d items", limiter.MaxHoldLimits))
		return
	}
	if body.TTL == nil {
		writeProblem(c, s.log, badRequest("ttl", "is required: how long the hold lasts, in ms (1 to 86400000)"))
		return
	}
	ls := make([]limiter.HoldLimit, len(body.Limits))
	for i, it := range body.Limits {
		req, err := s.toRequest(c, item{name: it.Name, Decision: Decision{Key: it.Key, Count: it.Count, Attributes: it.Attributes}},
			fmt.Sprintf("limits[%d].", i))
		if err != nil {
			writeProblem(c, s.log, err)
			return
		}
		ls[i] = limiter.HoldLimit{Name: req.Name, Key: req.Key, Count: req.Count, Attributes: req.Attributes}
	}
	// Each limit held is one decision of the tenant's plan, taken in the hold's own batch: a plan
	// refusal holds nothing, and a refused hold spends nothing of the plan.
	plan, err := s.planGuard(c, len(ls))
	if err != nil && s.replayStored(c, idemKey, raw) { // the hold made by the first attempt, not a refusal
		return
	}
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	requestID := c.GetString(RequestIDKey)
	var used *limiter.Decision // the plan as an admitted hold left it
	s.answerCall(c, idemKey, raw, func(r any) limiter.Answer {
		h := r.(limiter.HoldResult)
		used = nil // a retried transaction renders again
		if h.With != nil && !h.With.OK {
			return problemAnswer(planRefusal(plan, *h.With, h.Decision.Results), requestID, rateLimitHeaderMap(h.Decision.Results))
		}
		if h.With != nil && h.Decision.OK {
			used = h.With
		}
		return holdAnswer(h, requestID)
	}, func(ctx context.Context) (any, error) {
		return s.engine.HoldWith(ctx, tenantOf(c).TenantID, ls, *body.TTL, plan)
	})
	if used != nil && c.Writer.Header().Get(IdempotentReplayedHeader) == "" { // a replay spent nothing now
		s.planUsed(c, plan, *used)
	}
}

// holdAnswer renders POST /v1/holds' answer: 201 with the hold, or the batch's 429.
func holdAnswer(h limiter.HoldResult, requestID string) limiter.Answer {
	hs := rateLimitHeaderMap(h.Decision.Results)
	if !h.Decision.OK {
		return tooManyAnswer(worstRefusal(h.Decision), requestID, hs)
	}
	out := HoldResponse{HoldID: h.ID, ExpiresAt: h.ExpiresAt, Results: make([]DecisionResponse, len(h.Decision.Results))}
	for i, r := range h.Decision.Results {
		out.Results[i] = toDecisionResponse(r)
	}
	return jsonAnswer(http.StatusCreated, out, hs)
}

// answerCall runs call (a hold, or a close of a hold or lease) and writes render's answer to its
// result. With an Idempotency-Key (key, with the request's body bytes) the engine stores that
// answer in the call's own transaction, and a retry gets it replayed without calling again.
func (s *Server) answerCall(c *gin.Context, key string, body []byte, render func(any) limiter.Answer, call func(context.Context) (any, error)) {
	ctx := c.Request.Context()
	var idem *limiter.Idempotency
	if key != "" {
		idem = idempotencyFor(c, key, 0, body, nil)
		idem.RenderCall = func(r any) limiter.Answer { return withCallID(c, render(r)) }
		ctx = limiter.WithIdempotency(ctx, idem)
	}
	result, err := call(ctx)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	if idem != nil {
		writeAnswer(c, idem.Result.Answer, idem.Result.Replayed)
		return
	}
	writeAnswer(c, render(result), false)
}

// settleHold charges a hold's actual amounts, once.
func (s *Server) settleHold(c *gin.Context) {
	idemKey, err := idempotencyKeyOf(c)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	var body SettleBody
	raw, err := decodeJSONRaw(c, &body, MaxBodyBytes)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	if body.Counts == nil {
		writeProblem(c, s.log, badRequest("counts", "is required: the actual amount of each limit of the hold, in its order"))
		return
	}
	id := c.Param("id")
	s.answerCall(c, idemKey, raw, func(r any) limiter.Answer { return settleAnswer(id, r.(limiter.Settlement)) },
		func(ctx context.Context) (any, error) {
			return s.engine.SettleHold(ctx, tenantOf(c).TenantID, id, body.Counts)
		})
}

// settleAnswer renders a settled hold.
func settleAnswer(id string, st limiter.Settlement) limiter.Answer {
	out := SettleResponse{HoldID: id, Limits: make([]SettledAmount, len(st.Names))}
	for i := range st.Names {
		a := SettledAmount{Name: st.Names[i], Held: st.Held[i], Charged: roundTokens(st.Charged[i]),
			Refunded: roundTokens(st.Refunded[i]), Overage: roundTokens(st.Overage[i])}
		if st.Keys[i] != "" {
			k := st.Keys[i]
			a.Key = &k
		}
		out.Limits[i] = a
	}
	return jsonAnswer(http.StatusOK, out, map[string]string{})
}

// noContent is the answer of a release: 204 without a body.
func noContent(any) limiter.Answer {
	return limiter.Answer{Status: http.StatusNoContent, Header: map[string]string{}, Body: []byte{}} // stored: body NOT NULL
}

// releaseHold gives everything a hold reserved back.
func (s *Server) releaseHold(c *gin.Context) {
	s.closeWithoutBody(c, func(ctx context.Context) (any, error) {
		return nil, s.engine.ReleaseHold(ctx, tenantOf(c).TenantID, c.Param("id"))
	})
}

// closeWithoutBody answers a release (204) made idempotent by an Idempotency-Key like the other
// calls; such requests have no body, so the request's hash is its method, path and tenant.
func (s *Server) closeWithoutBody(c *gin.Context, call func(context.Context) (any, error)) {
	idemKey, err := idempotencyKeyOf(c)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	s.answerCall(c, idemKey, nil, noContent, call)
}
