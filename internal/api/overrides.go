package api

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// OverrideBody is the body of PUT /v1/limits/{name}/overrides: one override, created or
// replaced by its match.
type OverrideBody struct {
	Match       *string  `json:"match"`
	Rate        *float64 `json:"rate"`
	Capacity    *float64 `json:"capacity"`
	MaxReserved *float64 `json:"maxReserved"`
	Action      *string  `json:"action"`
	// ExpiresAt is an RFC 3339 time; absent or null: the override never expires.
	ExpiresAt *string `json:"expiresAt"`
}

// OverrideResponse is a stored override.
type OverrideResponse struct {
	Match       string     `json:"match"`
	Rate        *float64   `json:"rate,omitempty"`
	Capacity    *float64   `json:"capacity,omitempty"`
	MaxReserved *float64   `json:"maxReserved,omitempty"`
	Action      string     `json:"action,omitempty"`
	ExpiresAt   *time.Time `json:"expiresAt"`
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
}

// OverridesPage is GET /v1/limits/{name}/overrides: overrides ordered by match, and the match to
// pass as "after" for the next page (null on the last).
type OverridesPage struct {
	Overrides []OverrideResponse `json:"overrides"`
	Next      *string            `json:"next"`
}

// DefaultOverridesPage is the page size without ?limit=.
const DefaultOverridesPage = 100

func toOverrideResponse(s limiter.StoredOverride) OverrideResponse {
	o := s.Override
	r := OverrideResponse{Match: o.Match, Rate: o.Rate, Capacity: o.Capacity, MaxReserved: o.MaxReserved,
		Action: string(o.Action), CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
	if o.ExpiresAt != nil {
		t := time.UnixMilli(*o.ExpiresAt).UTC()
		r.ExpiresAt = &t
	}
	return r
}

// ToOverride converts a body; the engine validates the rest against the limit's definition.
func (b OverrideBody) ToOverride() (limiter.Override, error) {
	if b.Match == nil {
		return limiter.Override{}, badRequest("match", "match is required: a key, or a prefix followed by one \"*\"")
	}
	o := limiter.Override{Match: *b.Match, Rate: b.Rate, Capacity: b.Capacity, MaxReserved: b.MaxReserved}
	if b.Action != nil {
		o.Action = limiter.Action(*b.Action)
		if o.Action == "" {
			return o, badRequest("action", `action must be "allow" or "deny"; omit it to change numbers`)
		}
	}
	if b.ExpiresAt != nil {
		t, err := algo.ParseDateTime(*b.ExpiresAt)
		if err != nil {
			return o, badRequest("expiresAt", "expiresAt must be an RFC 3339 time, such as 2030-01-02T15:04:05Z")
		}
		if t = t.UTC(); t.Year() < 1970 || t.Year() > 9999 { // in UTC, as it is stored and answered
			return o, badRequest("expiresAt", "expiresAt must be between the years 1970 and 9999")
		}
		ms := t.UnixMilli()
		o.ExpiresAt = &ms
	}
	return o, nil
}

func (s *Server) putOverride(c *gin.Context) {
	name, ok := s.existingLimitName(c)
	if !ok {
		return
	}
	var body OverrideBody
	if err := decodeJSON(c, &body); err != nil {
		writeProblem(c, s.log, err)
		return
	}
	o, err := body.ToOverride()
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	stored, _, err := s.engine.PutOverride(c.Request.Context(), tenantOf(c).TenantID, name, o, s.auditTx().OverrideChange(s.actor(c)))
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, toOverrideResponse(stored))
}

func (s *Server) listOverrides(c *gin.Context) {
	name, ok := s.existingLimitName(c)
	if !ok {
		return
	}
	limit, ok := s.pageSize(c, DefaultOverridesPage, limiter.MaxOverridesPage)
	if !ok {
		return
	}
	list, next, err := s.engine.ListOverrides(c.Request.Context(), tenantOf(c).TenantID, name, c.Query("after"), limit)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	out := OverridesPage{Overrides: make([]OverrideResponse, len(list))}
	for i, o := range list {
		out.Overrides[i] = toOverrideResponse(o)
	}
	if next != "" {
		out.Next = &next
	}
	c.JSON(http.StatusOK, out)
}

func (s *Server) deleteOverride(c *gin.Context) {
	name, ok := s.existingLimitName(c)
	if !ok {
		return
	}
	match, present := c.GetQuery("match")
	if !present {
		writeProblem(c, s.log, badRequest("match", "give the override to delete as ?match=…"))
		return
	}
	if !limiter.ValidMatch(match) {
		writeProblem(c, s.log, badRequest("match", limiter.MatchRule))
		return
	}
	if err := s.engine.DeleteOverride(c.Request.Context(), tenantOf(c).TenantID, name, match, s.auditTx().OverrideChange(s.actor(c))); err != nil {
		writeProblem(c, s.log, err)
		return
	}
	c.Status(http.StatusNoContent)
}
