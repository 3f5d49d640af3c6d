package sluice

import "time"

// Kind is a limit's algorithm.
type Kind string

// The kinds of limit Sluice knows.
const (
	TokenBucket   Kind = "token bucket"
	FixedWindow   Kind = "fixed window"
	SlidingWindow Kind = "sliding window"
)

// Definition configures a limit: the body of PUT /v1/limits/{name} and a decision's inline
// config. Times are milliseconds, as on the wire. Optional members are pointers or zero values
// left out of the JSON, so that Sluice applies its defaults.
type Definition struct {
	Kind   Kind    `json:"kind"`
	Rate   float64 `json:"rate"`   // tokens per Period
	Period int64   `json:"period"` // milliseconds
	// Capacity defaults to Rate; not for sliding windows.
	Capacity *float64 `json:"capacity,omitempty"`
	// MaxReserved is how far reservations may go below zero; not for sliding windows.
	MaxReserved *float64 `json:"maxReserved,omitempty"`
	Shards      int      `json:"shards,omitempty"`
	// Start is the origin of a fixed window's windows (ms); absent: a stable per-key offset.
	Start      *int64 `json:"start,omitempty"`
	Resolution int    `json:"resolution,omitempty"` // sliding windows only
	Jitter     int64  `json:"jitter,omitempty"`     // refusals get retryAfter + uniform[0, Jitter) ms
	IPFallback bool   `json:"ipFallback,omitempty"`
}

// StoredDefinition is a definition as Sluice stores it.
type StoredDefinition struct {
	Name string `json:"name"`
	Definition
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Decision is what one decision asks. With neither Key, Session nor IP it is the limit's single
// global key.
type Decision struct {
	Key     string `json:"key,omitempty"`
	Session string `json:"session,omitempty"` // an anonymous session authorized by the captcha
	IP      string `json:"ip,omitempty"`      // the visitor's address, when a backend decides for it
	// Count is how many tokens to take; nil means 1. Count(0) is a probe.
	Count   *float64    `json:"count,omitempty"`
	Reserve bool        `json:"reserve,omitempty"`
	Config  *Definition `json:"config,omitempty"` // an inline definition, for a name with none stored
}

// Count returns a pointer to n, for Decision.Count.
func Count(n float64) *float64 { return &n }

// Item is one decision of a batch or bulk request.
type Item struct {
	Name string `json:"name"`
	Decision
}

// Result is one decision's answer.
type Result struct {
	OK bool
	// RetryAfter is, on a refusal, when to retry; on a reservation, when to run the reserved
	// work; otherwise 0.
	RetryAfter time.Duration
	// Remaining is the balance of the shard(s) the decision used; negative after a reservation.
	Remaining float64
	Name      string
	Key       string // "" for the limit's global key
	// Override is the match of the limit's override that decided this key ("org:acme:*"), ""
	// when none applied (see PutOverride).
	Override string
	// Degraded is true when Sluice could not answer and the client's FailPolicy made the result.
	Degraded bool
	// RateLimitPolicy and RateLimit are the IETF headers Sluice sent with the answer ("" when
	// Degraded, and on the results of a bulk request, which carries none).
	RateLimitPolicy, RateLimit string
}

// BatchResult answers Batch and CheckBatch: all of the limits or none.
type BatchResult struct {
	OK bool
	// RetryAfter is the largest retryAfter among the refusals (or, when admitted, among the
	// reservations); 0 when there is none.
	RetryAfter time.Duration
	Results    []Result
	Degraded   bool
	// RateLimitPolicy and RateLimit are the headers Sluice sent, one entry per limit.
	RateLimitPolicy, RateLimit string
}

// BulkResult is one answer of a bulk request: a Result, or, when Err is not nil, the error of
// that item alone (wrapping a *Error for an invalid item: use errors.As).
type BulkResult struct {
	Result
	Err error
}

// ShardValue is one shard's value.
type ShardValue struct {
	Shard int     `json:"shard"`
	Value float64 `json:"value"`
	TS    int64   `json:"ts"` // ms since the Unix epoch
}

// Value is a limit's value now, for one key.
type Value struct {
	Value  float64      `json:"value"` // the sum over all shards
	TS     int64        `json:"ts"`
	Shards []ShardValue `json:"shards"`
	Config Definition   `json:"config"`
}

// wireDecision is a decision as Sluice sends it.
type wireDecision struct {
	OK         bool    `json:"ok"`
	RetryAfter *int64  `json:"retryAfter"`
	Remaining  float64 `json:"remaining"`
	Name       string  `json:"name"`
	Key        *string `json:"key"`
	Override   string  `json:"override"`
}

func (w wireDecision) result() Result {
	r := Result{OK: w.OK, RetryAfter: ms(w.RetryAfter), Remaining: w.Remaining, Name: w.Name, Override: w.Override}
	if w.Key != nil {
		r.Key = *w.Key
	}
	return r
}

type wireBatch struct {
	OK         bool           `json:"ok"`
	RetryAfter *int64         `json:"retryAfter"`
	Results    []wireDecision `json:"results"`
}

type wireBulk struct {
	Results []wireBulkResult `json:"results"`
}

type wireBulkResult struct {
	wireDecision
	Error *Error `json:"error"`
}

type wireList struct {
	Limits []StoredDefinition `json:"limits"`
}

type wireReset struct {
	Key     string `json:"key,omitempty"`
	AllKeys bool   `json:"allKeys,omitempty"`
}

// maxDuration caps a retryAfter (Sluice's bound is 1e15 ms, beyond time.Duration's range).
const maxDuration = time.Duration(1<<63 - 1)

func ms(v *int64) time.Duration {
	if v == nil {
		return 0
	}
	if *v > int64(maxDuration/time.Millisecond) {
		return maxDuration
	}
	return time.Duration(*v) * time.Millisecond
}
