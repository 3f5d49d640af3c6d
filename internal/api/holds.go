package api

import (
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
	var body HoldBody
	if err := decodeJSON(c, &body); err != nil {
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
	h, err := s.engine.Hold(c.Request.Context(), tenantOf(c).TenantID, ls, *body.TTL)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	setRateLimitHeaders(c, h.Decision.Results)
	if !h.Decision.OK {
		worst := h.Decision.Results[0]
		for _, r := range h.Decision.Results {
			if !r.OK && (worst.OK || (r.RetryAfter != nil && (worst.RetryAfter == nil || *r.RetryAfter > *worst.RetryAfter))) {
				worst = r
			}
		}
		s.tooMany(c, worst)
		return
	}
	out := HoldResponse{HoldID: h.ID, ExpiresAt: h.ExpiresAt, Results: make([]DecisionResponse, len(h.Decision.Results))}
	for i, r := range h.Decision.Results {
		out.Results[i] = toDecisionResponse(r)
	}
	c.JSON(http.StatusCreated, out)
}

// settleHold charges a hold's actual amounts, once.
func (s *Server) settleHold(c *gin.Context) {
	var body SettleBody
	if err := decodeJSON(c, &body); err != nil {
		writeProblem(c, s.log, err)
		return
	}
	if body.Counts == nil {
		writeProblem(c, s.log, badRequest("counts", "is required: the actual amount of each limit of the hold, in its order"))
		return
	}
	id := c.Param("id")
	st, err := s.engine.SettleHold(c.Request.Context(), tenantOf(c).TenantID, id, body.Counts)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
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
	c.JSON(http.StatusOK, out)
}

// releaseHold gives everything a hold reserved back.
func (s *Server) releaseHold(c *gin.Context) {
	if err := s.engine.ReleaseHold(c.Request.Context(), tenantOf(c).TenantID, c.Param("id")); err != nil {
		writeProblem(c, s.log, err)
		return
	}
	c.Status(http.StatusNoContent)
}
