package sluice

import (
	"encoding/json"
	"fmt"
	"time"
)

// Kind is a limit's algorithm.
type Kind string

// The kinds of limit Sluice knows.
const (
	TokenBucket   Kind = "token bucket"
	FixedWindow   Kind = "fixed window"
	SlidingWindow Kind = "sliding window"
	// GCRA is the token bucket under its other name: burst = Capacity, emission interval =
	// Period / Rate. Sluice returns a definition with the kind it was written with.
	GCRA Kind = "gcra"
	// Quota counts Rate per calendar window (Definition.Calendar) in a time zone; it has no
	// Period.
	Quota Kind = "quota"
	// Concurrency bounds what is in flight: Rate leases at once per key, each lasting LeaseTTL
	// ms unless released (Client.ReleaseLease) or extended (Client.ExtendLease).
	Concurrency Kind = "concurrency"
)

// Calendar is a quota's window.
type Calendar string

// The calendar windows of a quota: a day from local midnight, an ISO week from Monday, a month
// from its first day (or Definition.AnchorDay).
const (
	Day   Calendar = "day"
	Week  Calendar = "week"
	Month Calendar = "month"
)

// Parent is a budget a decision on a limit also spends (nested budgets): the parent limit's name
// and the template of the key it is spent under, whose {placeholders} the decision's Attributes
// fill ("org:{org}").
type Parent struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// Mode is what a limit's refusals do.
type Mode string

// The modes of a limit. In shadow mode Sluice decides and writes as when enforcing, but admits
// every request and reports what enforcement would have said in Result.Shadow.
const (
	Enforce Mode = "enforce"
	Shadow  Mode = "shadow"
)

// Definition configures a limit: the body of PUT /v1/limits/{name} and a decision's inline
// config. Times are milliseconds, as on the wire. Optional members are pointers or zero values
// left out of the JSON, so that Sluice applies its defaults.
type Definition struct {
	Kind   Kind    `json:"kind"`
	Rate   float64 `json:"rate"`             // tokens per Period (a quota: per calendar window)
	Period int64   `json:"period,omitempty"` // milliseconds; none for a quota
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
	Mode       Mode   `json:"mode,omitempty"` // "" (Sluice's default) is Enforce
	// Penalty (ms): a key the limit refuses stays refused this long after the refusal.
	Penalty int64 `json:"penalty,omitempty"`
	// Quotas only: the calendar window, its IANA time zone ("Europe/Berlin"), and for monthly
	// quotas the billing day the windows start on (1–31, clamped to each month's last day).
	Calendar  Calendar `json:"calendar,omitempty"`
	TimeZone  string   `json:"timeZone,omitempty"`
	AnchorDay int      `json:"anchorDay,omitempty"`
	// Parents are the budgets every decision on this limit also spends, all or nothing.
	Parents []Parent `json:"parents,omitempty"`
	// LeaseTTL (concurrency limits only, ms): how long a lease lasts unless released or extended.
	LeaseTTL int64 `json:"leaseTtl,omitempty"`
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
	// Attributes fill the {placeholders} of the keys of the limit's parents.
	Attributes map[string]string `json:"attributes,omitempty"`
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
	// Replayed is true when Sluice answered with the stored answer of an earlier request with the
	// same Idempotency-Key (WithIdempotencyKey): nothing was consumed by this call. On Bulk's
	// results it is the request's: true when every item decided was replayed (a bulk request
	// retried after a crash that replayed some items and decided others says false for all).
	Replayed bool
	// Shadow is, for a limit in shadow mode (whose OK is then always true), what enforcement
	// would have answered; nil otherwise.
	Shadow *ShadowResult
	// Parents are the decisions on the limit's ancestors (nested budgets); OK and RetryAfter
	// above are the whole family's.
	Parents []ParentResult
	// LeaseID and LeaseExpiresAt are, for an admitted Limit on a concurrency limit, the lease it
	// acquired (release it with ReleaseLease when the work is done); "" and zero otherwise.
	LeaseID        string
	LeaseExpiresAt time.Time

	// ownReplay is true when the answer replayed is an earlier attempt's of this very call (its
	// Sluice-Call-Id, which Sluice stores with the answer, is this call's): the tokens and the
	// lease are this call's (the middleware uses the lease), not another call's under the key.
	ownReplay bool
}

// ParentResult is one ancestor's part in a decision.
type ParentResult struct {
	Name, Key  string
	OK         bool // whether this ancestor alone allowed the request
	Remaining  float64
	RetryAfter time.Duration
	Shadow     *ShadowResult // for an ancestor in shadow mode
	Override   string        // the match of the override that decided for it, "" when none did
}

// ShadowResult is what a limit in shadow mode would have answered if it were enforced.
type ShadowResult struct {
	OK         bool
	RetryAfter time.Duration // as Result.RetryAfter
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
	// Replayed is true when Sluice answered with the stored answer of an earlier request with the
	// same Idempotency-Key (WithIdempotencyKey): nothing was consumed by this call.
	Replayed bool
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
	// FullAt is when (ms since the Unix epoch) the key is full again if nothing more is
	// consumed; nil when it is full already.
	FullAt *int64 `json:"fullAt"`
	// PenaltyUntil is when the key's running penalty ends (ms since the Unix epoch); nil when
	// none runs.
	PenaltyUntil *int64 `json:"penaltyUntil"`
	// WindowStart and ResetAt (quotas only) are the current calendar window's start and end
	// (ms since the Unix epoch): the quota is whole again at ResetAt.
	WindowStart *int64 `json:"windowStart"`
	ResetAt     *int64 `json:"resetAt"`
	// Override is the match of the limit's override that applies to the key ("org:acme:*"):
	// Config then shows its numbers. "" when none does (see PutOverride).
	Override string `json:"override"`
}

// wireDecision is a decision as Sluice sends it.
type wireDecision struct {
	OK         bool        `json:"ok"`
	RetryAfter *int64      `json:"retryAfter"`
	Remaining  float64     `json:"remaining"`
	Name       string      `json:"name"`
	Key        *string     `json:"key"`
	Shadow     *wireShadow `json:"shadow"`
	Override   string      `json:"override"`
	LeaseID    string      `json:"leaseId"`
	ExpiresAt  *int64      `json:"expiresAt"`
	Parents    []struct {
		Name       string      `json:"name"`
		Key        string      `json:"key"`
		OK         bool        `json:"ok"`
		Remaining  float64     `json:"remaining"`
		RetryAfter *int64      `json:"retryAfter"`
		Shadow     *wireShadow `json:"shadow"`
		Override   string      `json:"override"`
	} `json:"parents"`
}

type wireShadow struct {
	OK         bool   `json:"ok"`
	RetryAfter *int64 `json:"retryAfter"`
}

func (w *wireShadow) result() *ShadowResult {
	if w == nil {
		return nil
	}
	return &ShadowResult{OK: w.OK, RetryAfter: ms(w.RetryAfter)}
}

// UnmarshalJSON decodes a decision, refusing one without a member the OpenAPI document requires
// of it: decoded as is, an answer of {} or null would read as a refusal nobody made.
func (w *wireDecision) UnmarshalJSON(b []byte) error {
	if err := requireMembers(b, "a decision", "ok", "retryAfter", "remaining", "name", "key"); err != nil {
		return err
	}
	type plain wireDecision
	return json.Unmarshal(b, (*plain)(w))
}

// requireMembers refuses b (what: its name, for the message) unless it is a JSON object with
// every member of names, its "ok" (if named) a boolean.
func requireMembers(b []byte, what string, names ...string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if m == nil {
		return fmt.Errorf("%s is null, not an object", what)
	}
	for _, n := range names {
		v, ok := m[n]
		if !ok {
			return fmt.Errorf("%s has no %q member", what, n)
		}
		if n == "ok" && string(v) != "true" && string(v) != "false" {
			return fmt.Errorf("%s's \"ok\" is %s, not a boolean", what, v)
		}
	}
	return nil
}

func (w wireDecision) result() Result {
	r := Result{OK: w.OK, RetryAfter: ms(w.RetryAfter), Remaining: w.Remaining, Name: w.Name, Shadow: w.Shadow.result(), Override: w.Override}
	if w.Key != nil {
		r.Key = *w.Key
	}
	if w.LeaseID != "" && w.ExpiresAt != nil {
		r.LeaseID, r.LeaseExpiresAt = w.LeaseID, time.UnixMilli(*w.ExpiresAt)
	}
	for _, p := range w.Parents {
		r.Parents = append(r.Parents, ParentResult{Name: p.Name, Key: p.Key, OK: p.OK, Remaining: p.Remaining,
			RetryAfter: ms(p.RetryAfter), Shadow: p.Shadow.result(), Override: p.Override})
	}
	return r
}

type wireBatch struct {
	OK         bool           `json:"ok"`
	RetryAfter *int64         `json:"retryAfter"`
	Results    []wireDecision `json:"results"`
}

// UnmarshalJSON decodes a batch's answer, refusing one without a member the OpenAPI document
// requires of it.
func (w *wireBatch) UnmarshalJSON(b []byte) error {
	if err := requireMembers(b, "a batch decision", "ok", "retryAfter", "results"); err != nil {
		return err
	}
	type plain wireBatch
	return json.Unmarshal(b, (*plain)(w))
}

type wireBulk struct {
	Results []wireBulkResult `json:"results"`
}

// UnmarshalJSON decodes a bulk answer, refusing one without its results.
func (w *wireBulk) UnmarshalJSON(b []byte) error {
	if err := requireMembers(b, "a bulk answer", "results"); err != nil {
		return err
	}
	type plain wireBulk
	return json.Unmarshal(b, (*plain)(w))
}

type wireBulkResult struct {
	wireDecision
	Error *Error `json:"error"`
}

// UnmarshalJSON decodes one result of a bulk answer: its problem, or else a decision (whose own
// UnmarshalJSON, promoted, would otherwise decode the whole result and never the problem).
func (w *wireBulkResult) UnmarshalJSON(b []byte) error {
	var e struct {
		Error *Error `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return err
	}
	if e.Error != nil {
		w.Error = e.Error
		return nil
	}
	return json.Unmarshal(b, &w.wireDecision)
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
