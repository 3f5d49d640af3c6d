package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// RefundBody is the body of POST /v1/limits/{name}/refund.
type RefundBody struct {
	Key        *string           `json:"key"`
	Count      *float64          `json:"count"`
	Attributes map[string]string `json:"attributes"`
}

// RefundResponse says what a refund gave back.
type RefundResponse struct {
	Name      string  `json:"name"`
	Key       *string `json:"key"`
	Refunded  float64 `json:"refunded"`
	Remaining float64 `json:"remaining"`
	// Parents are the refunds of the limit's ancestors (nested budgets).
	Parents []ParentRefundResponse `json:"parents,omitempty"`
}

// ParentRefundResponse is one ancestor's part in a refund.
type ParentRefundResponse struct {
	Name      string  `json:"name"`
	Key       string  `json:"key"`
	Refunded  float64 `json:"refunded"`
	Remaining float64 `json:"remaining"`
}

// refund gives tokens back (issue 15: "charge what was used, give back the rest"). It is not
// audited: like a decision, it is traffic, not a change of configuration. With an
// Idempotency-Key its answer is stored in its transaction and a retry replays it, as a
// decision's: a refund retried after a lost answer must not give the tokens back twice.
func (s *Server) refund(c *gin.Context) {
	name, ok := s.existingLimitName(c)
	if !ok {
		return
	}
	idemKey, err := idempotencyKeyOf(c)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	var body RefundBody
	raw, err := decodeJSONRaw(c, &body, MaxBodyBytes)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	if body.Count == nil {
		writeProblem(c, s.log, badRequest("count", "is required: how many tokens to give back"))
		return
	}
	req := limiter.Request{Name: name, Count: *body.Count, Attributes: body.Attributes}
	if body.Key != nil {
		if !limiter.ValidKey(*body.Key) { // "" too: the global key is the absent one
			writeProblem(c, s.log, badRequest("key", limiter.KeyRule+`; leave "key" out for the limit's global key`))
			return
		}
		if limiter.ReservedKey(*body.Key) { // as in decisions: no one refills a session's allowance by naming it
			writeProblem(c, s.log, badRequest("key", limiter.ReservedKeyRule))
			return
		}
		req.Key = *body.Key
	}
	ctx, tenantID := c.Request.Context(), tenantOf(c).TenantID
	if idemKey != "" {
		req.Refund = true
		render := func(b limiter.BatchDecision) limiter.Answer {
			return jsonAnswer(http.StatusOK, refundResponse(b.Results[0]), map[string]string{})
		}
		r, err := s.engine.LimitIdempotent(ctx, tenantID, []limiter.Request{req}, idempotencyFor(c, idemKey, 0, raw, render))
		if err != nil {
			writeProblem(c, s.log, err)
			return
		}
		writeAnswer(c, r.Answer, r.Replayed)
		return
	}
	d, err := s.engine.Refund(ctx, tenantID, req)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, refundResponse(d))
}

// refundResponse is a refund's answer.
func refundResponse(d limiter.Decision) RefundResponse {
	out := RefundResponse{Name: d.Name, Refunded: roundTokens(d.Refunded), Remaining: roundTokens(d.Remaining)}
	if d.Key != "" {
		k := d.Key
		out.Key = &k
	}
	for _, p := range d.Parents {
		out.Parents = append(out.Parents, ParentRefundResponse{Name: p.Name, Key: p.Key, Refunded: roundTokens(p.Refunded), Remaining: roundTokens(p.Remaining)})
	}
	return out
}
