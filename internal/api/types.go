package api

import (
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// DefinitionBody is the JSON form of a limit definition (PUT body and inline config).
type DefinitionBody = limiter.Spec

// ConfigResponse is a definition without name and timestamps (the config of a value response).
type ConfigResponse struct {
	Kind        string               `json:"kind"`
	Rate        float64              `json:"rate"`
	Period      *int64               `json:"period,omitempty"` // absent for quotas
	Capacity    *float64             `json:"capacity,omitempty"`
	MaxReserved *float64             `json:"maxReserved,omitempty"`
	Shards      int                  `json:"shards"`
	Start       *int64               `json:"start,omitempty"`
	Resolution  *int                 `json:"resolution,omitempty"`
	Jitter      int64                `json:"jitter"`
	IPFallback  bool                 `json:"ipFallback"`
	Calendar    string               `json:"calendar,omitempty"`
	TimeZone    string               `json:"timeZone,omitempty"`
	AnchorDay   int                  `json:"anchorDay,omitempty"`
	Parents     []limiter.ParentSpec `json:"parents,omitempty"`
	Mode        string               `json:"mode"`
	Penalty     int64                `json:"penalty"`
	LeaseTTL    *int64               `json:"leaseTtl,omitempty"` // concurrency limits only
}

// toConfig is a definition as the API returns it. The kind is the one its author wrote: "gcra"
// stays "gcra" (the token bucket's math under its other name).
func toConfig(d limiter.Definition) ConfigResponse {
	c := ConfigResponse{Kind: string(d.Kind), Rate: d.Rate, Capacity: d.Capacity,
		MaxReserved: d.MaxReserved, Shards: max(d.Shards, 1), Start: d.Start, Jitter: d.Jitter, IPFallback: d.IPFallback,
		Mode: string(limiter.Enforce), Penalty: d.Penalty}
	if d.Mode != "" {
		c.Mode = string(d.Mode)
	}
	if d.Kind == limiter.SlidingWindow {
		r := max(d.Resolution, 1)
		c.Resolution = &r
	}
	switch d.Kind {
	case limiter.Quota:
		c.Calendar, c.TimeZone, c.AnchorDay = string(d.Calendar), d.TimeZone, d.AnchorDay
	case limiter.Concurrency:
		ttl := d.LeaseTTL
		c.LeaseTTL = &ttl
	default:
		p := d.Period
		c.Period = &p
	}
	for _, p := range d.Parents {
		c.Parents = append(c.Parents, limiter.ParentSpec(p))
	}
	return c
}

// DefinitionResponse is a stored definition as the API returns it: the config's fields between
// the name and the timestamps (the embedded struct's fields are inlined by encoding/json).
type DefinitionResponse struct {
	Name string `json:"name"`
	ConfigResponse
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

func toDefinitionResponse(s limiter.StoredDefinition) DefinitionResponse {
	return DefinitionResponse{Name: s.Name, ConfigResponse: toConfig(s.Definition), CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// Decision is what one decision asks, in a single decision's body and in each batch item (its
// fields are inlined in both by encoding/json). The request bodies' absent members are omitted
// when encoded, never null: the decoder refuses an explicit null for every one of them.
type Decision struct {
	Key     *string         `json:"key,omitempty"`
	Session *string         `json:"session,omitempty"`
	IP      *string         `json:"ip,omitempty"` // the visitor's address, when a backend decides for it
	Count   *float64        `json:"count,omitempty"`
	Reserve bool            `json:"reserve"`
	Config  *DefinitionBody `json:"config,omitempty"`
	// Attributes fill the {placeholders} of the keys of the limit's parents (nested budgets).
	Attributes map[string]string `json:"attributes,omitempty"`
}

// DecisionBody is the body of POST /v1/limits/{name}/limit and /check.
type DecisionBody struct {
	Decision
	Throws bool `json:"throws"`
}

// BatchItem is one limit of a batch.
type BatchItem struct {
	Name string `json:"name"`
	Decision
}

// BatchBody is the body of POST /v1/limit and /v1/check.
type BatchBody struct {
	Limits []BatchItem `json:"limits,omitempty"`
	Throws bool        `json:"throws"`
}

// MaxBatch bounds the limits of one batch request.
const MaxBatch = 100

// BulkBody is the body of POST /v1/decisions: independent decisions, each consuming.
type BulkBody struct {
	Decisions []BatchItem `json:"decisions,omitempty"`
}

// MaxBulk bounds the decisions of one bulk request; MaxBulkBodyBytes its body.
const (
	MaxBulk          = 1000
	MaxBulkBodyBytes = 1 << 20
)

// BulkResult is one answer of a bulk request: a decision, or the problem of that item alone.
type BulkResult struct {
	*DecisionResponse
	Error *Problem `json:"error,omitempty"`
}

// BulkResponse answers a bulk request, in the order of its decisions.
type BulkResponse struct {
	Results []BulkResult `json:"results"`
}

// ResetBody is the body of POST /v1/limits/{name}/reset.
type ResetBody struct {
	// Key absent is the limit's global key; an explicit null is refused by the decoder, as for
	// every member the document does not make nullable.
	Key     *string `json:"key,omitempty"`
	AllKeys *bool   `json:"allKeys,omitempty"`
}

// DecisionResponse is one decision.
type DecisionResponse struct {
	OK         bool            `json:"ok"`
	RetryAfter *int64          `json:"retryAfter"`
	Remaining  float64         `json:"remaining"`
	Name       string          `json:"name"`
	Key        *string         `json:"key"`
	Shadow     *ShadowResponse `json:"shadow,omitempty"`
	// Override is the match of the override that decided ("org:acme:*"), absent when none did.
	Override string `json:"override,omitempty"`
	// Parents are the decisions on the limit's ancestors (nested budgets); ok and retryAfter
	// above are the whole family's.
	Parents []ParentDecisionResponse `json:"parents,omitempty"`
	// LeaseID and ExpiresAt (ms since the epoch): the lease an admitted consuming decision on a
	// concurrency limit acquired; absent otherwise.
	LeaseID   string `json:"leaseId,omitempty"`
	ExpiresAt *int64 `json:"expiresAt,omitempty"`
}

// ShadowResponse is what a limit in shadow mode would have answered if enforced; present on
// every decision of a shadow limit (whose own ok is always true).
type ShadowResponse struct {
	OK         bool   `json:"ok"`
	RetryAfter *int64 `json:"retryAfter"`
}

// ParentDecisionResponse is one ancestor's part in a decision.
type ParentDecisionResponse struct {
	Name       string  `json:"name"`
	Key        string  `json:"key"`
	OK         bool    `json:"ok"`
	Remaining  float64 `json:"remaining"`
	RetryAfter *int64  `json:"retryAfter"`
	// Shadow is what a parent in shadow mode would have answered if enforced.
	Shadow *ShadowResponse `json:"shadow,omitempty"`
	// Override is the match of the override that decided for this parent, absent when none did.
	Override string `json:"override,omitempty"`
}

// BatchResponse is the outcome of a batch.
type BatchResponse struct {
	OK         bool               `json:"ok"`
	RetryAfter *int64             `json:"retryAfter"`
	Results    []DecisionResponse `json:"results"`
}

func toDecisionResponse(d limiter.Decision) DecisionResponse {
	r := DecisionResponse{OK: d.OK, RetryAfter: d.RetryAfter, Remaining: roundTokens(d.Remaining), Name: d.Name, Override: d.Override}
	if d.LeaseID != "" {
		exp := d.LeaseExpiresAt
		r.LeaseID, r.ExpiresAt = d.LeaseID, &exp
	}
	if d.Shadow != nil {
		r.Shadow = &ShadowResponse{OK: d.Shadow.OK, RetryAfter: d.Shadow.RetryAfter}
	}
	if d.Key != "" {
		k := d.Key
		r.Key = &k
	}
	for _, p := range d.Parents {
		pr := ParentDecisionResponse{Name: p.Name, Key: p.Key, OK: p.OK, Remaining: roundTokens(p.Remaining), RetryAfter: p.RetryAfter, Override: p.Override}
		if p.Shadow != nil {
			pr.Shadow = &ShadowResponse{OK: p.Shadow.OK, RetryAfter: p.Shadow.RetryAfter}
		}
		r.Parents = append(r.Parents, pr)
	}
	return r
}

// roundTokens trims float noise (9.999999999999998) from token counts shown to clients.
func roundTokens(v float64) float64 { return algo.Decimal9(v) }

// ShardValueResponse is one shard of a value response.
type ShardValueResponse struct {
	Shard int     `json:"shard"`
	Value float64 `json:"value"`
	TS    int64   `json:"ts"`
}

// ValueResponse is GET /v1/limits/{name}/value.
type ValueResponse struct {
	Value  float64              `json:"value"`
	TS     int64                `json:"ts"`
	Shards []ShardValueResponse `json:"shards"`
	Config ConfigResponse       `json:"config"`
	// WindowStart and ResetAt (quotas only): the current calendar window's start and end, in ms
	// since the epoch.
	WindowStart *int64 `json:"windowStart,omitempty"`
	ResetAt     *int64 `json:"resetAt,omitempty"`
	// FullAt is when (ms since the epoch) the key is full again if nothing more is consumed; null
	// when it is full already. Every kind has one.
	FullAt *int64 `json:"fullAt"`
	// PenaltyUntil is when the key's running penalty ends (ms since the epoch); absent when none runs.
	PenaltyUntil *int64 `json:"penaltyUntil,omitempty"`
	// Override is the match of the key's override (Config then has its numbers), absent when none.
	Override string `json:"override,omitempty"`
}

func toValueResponse(v limiter.Value) ValueResponse {
	out := ValueResponse{Value: roundTokens(v.Value), TS: v.TS, Config: toConfig(v.Definition), Shards: make([]ShardValueResponse, len(v.Shards)),
		WindowStart: v.WindowStart, ResetAt: v.ResetAt, Override: v.Override}
	if v.FullAt != 0 {
		f := v.FullAt
		out.FullAt = &f
	}
	if v.PenaltyUntil != 0 {
		p := v.PenaltyUntil
		out.PenaltyUntil = &p
	}
	for i, s := range v.Shards {
		out.Shards[i] = ShardValueResponse{Shard: s.Shard, Value: roundTokens(s.Value), TS: s.TS}
	}
	return out
}
