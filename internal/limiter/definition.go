// Package limiter decides rate limits. Its pure part (this file, the algorithm files and decide.go)
// has no I/O: state in, clock reading in, decision and new state out. The engine (engine.go) runs
// those functions inside serializable database transactions.
package limiter

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Kind is the algorithm of a limit.
type Kind string

// The limit kinds of DESIGN §3.
const (
	TokenBucket   Kind = "token bucket"
	FixedWindow   Kind = "fixed window"
	SlidingWindow Kind = "sliding window"
)

// Bounds on definitions. They keep every computation far from float64 and int64 overflow.
const (
	MaxShards     = 1024
	MaxResolution = 60
	maxAmount     = 1e15                  // rate, capacity, maxReserved, count
	maxPeriod     = 10 * 366 * 86_400_000 // ten years in ms
	maxJitter     = 86_400_000            // one day in ms
	maxStart      = int64(1) << 50        // ms since the epoch, ~35,000 years
	MaxKeyBytes   = 256
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// ValidName reports whether s is an acceptable limit name.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// KeyRule describes what ValidKey accepts, for error messages.
const KeyRule = "keys are 1 to 256 bytes of UTF-8 without NUL characters"

// ValidKey reports whether s is an acceptable key: 1–256 bytes of valid UTF-8 without NUL
// (PostgreSQL text cannot hold a NUL byte, so such a key would fail inside the database instead of
// being refused as the caller's mistake).
func ValidKey(s string) bool {
	return s != "" && len(s) <= MaxKeyBytes && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// Definition configures one limit. Units are milliseconds; Rate tokens are issued per Period.
// Optional fields are pointers so that "absent" differs from zero.
type Definition struct {
	Kind        Kind
	Rate        float64
	Period      int64
	Capacity    *float64 // max tokens; default Rate. Not for sliding windows.
	MaxReserved *float64 // how far a reservation may go below zero; default unbounded
	Shards      int      // 1..1024, default 1
	Start       *int64   // fixed window: origin of the windows; default a stable per-key offset
	Resolution  int      // sliding window: sub-intervals per period, 1..60, default 1
	Jitter      int64    // refusals get retryAfter + uniform[0, Jitter)
	IPFallback  bool     // unauthorized sessions fall back to a hashed client-IP-prefix key
}

// FieldError is one problem with one field of a definition or request.
type FieldError struct {
	Field   string
	Message string
}

// ValidationError lists what is wrong with a definition; its Code is "invalid_config" or
// "invalid_request".
type ValidationError struct {
	Code   string
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Message
	}
	return "limiter: " + e.Code + ": " + strings.Join(parts, "; ")
}

// Sentinel errors of the engine; the API maps each to its problem code.
var (
	ErrLimitNotFound        = errors.New("limit not found")
	ErrDefinitionExists     = errors.New("a stored definition exists for this name")
	ErrCountExceedsCapacity = errors.New("count exceeds what the limit can ever admit")
)

func invalidRequest(field, msg string) error {
	return &ValidationError{Code: "invalid_request", Fields: []FieldError{{field, msg}}}
}

func finiteIn(v, lo, hi float64) bool { return !math.IsNaN(v) && v >= lo && v <= hi }

// Validate checks a definition and reports every problem, each tied to its JSON field name.
func (d Definition) Validate() error {
	var fe []FieldError
	add := func(field, format string, args ...any) {
		fe = append(fe, FieldError{field, fmt.Sprintf(format, args...)})
	}
	switch d.Kind {
	case TokenBucket, FixedWindow, SlidingWindow:
	default:
		add("kind", `must be "token bucket", "fixed window" or "sliding window"`)
	}
	if !finiteIn(d.Rate, math.SmallestNonzeroFloat64, maxAmount) || d.Rate <= 0 {
		add("rate", "must be a number > 0 and <= %g", float64(maxAmount))
	}
	if d.Period <= 0 || d.Period > maxPeriod {
		add("period", "must be a whole number of milliseconds > 0 and <= %d", int64(maxPeriod))
	}
	if d.Capacity != nil && !finiteIn(*d.Capacity, 0, maxAmount) {
		add("capacity", "must be a number >= 0 and <= %g", float64(maxAmount))
	}
	if d.MaxReserved != nil && !finiteIn(*d.MaxReserved, 0, maxAmount) {
		add("maxReserved", "must be a number >= 0 and <= %g", float64(maxAmount))
	}
	if d.Shards < 0 || d.Shards > MaxShards {
		add("shards", "must be between 1 and %d", MaxShards)
	}
	if d.Jitter < 0 || d.Jitter > maxJitter {
		add("jitter", "must be a whole number of milliseconds >= 0 and <= %d", maxJitter)
	}
	if d.Start != nil {
		if d.Kind != FixedWindow {
			add("start", "applies to fixed windows only")
		} else if *d.Start < -maxStart || *d.Start > maxStart {
			add("start", "must be a time in milliseconds within ±%d", maxStart)
		}
	}
	if d.Resolution != 0 {
		if d.Kind != SlidingWindow {
			add("resolution", "applies to sliding windows only")
		} else if d.Resolution < 1 || d.Resolution > MaxResolution {
			add("resolution", "must be between 1 and %d", MaxResolution)
		}
	}
	if d.Kind == SlidingWindow {
		if d.Capacity != nil {
			add("capacity", "does not apply to sliding windows")
		}
		if d.MaxReserved != nil {
			add("maxReserved", "does not apply to sliding windows (they cannot reserve)")
		}
		if d.Period > 0 && d.Period < int64(max(d.Resolution, 1)) {
			add("period", "must be at least resolution milliseconds (a sub-interval is at least 1 ms)")
		}
	}
	if d.Capacity != nil && *d.Capacity == 0 && d.MaxReserved == nil {
		// Zero capacity is legal (everything must be reserved), but only with a reservation bound
		// does it mean anything other than "always refuse", which is worth stating loudly.
		add("capacity", "0 admits nothing; set maxReserved to allow reservations, or raise capacity")
	}
	if len(fe) > 0 {
		return &ValidationError{Code: "invalid_config", Fields: fe}
	}
	return nil
}

// normalized fills defaults. Call only on a valid definition.
func (d Definition) normalized() Definition {
	if d.Shards == 0 {
		d.Shards = 1
	}
	if d.Kind == SlidingWindow && d.Resolution == 0 {
		d.Resolution = 1
	}
	return d
}

// Max is the most tokens the limit holds: capacity, or rate when capacity is absent.
func (d Definition) Max() float64 {
	if d.Capacity != nil && d.Kind != SlidingWindow {
		return *d.Capacity
	}
	return d.Rate
}

// shardParams are the per-shard numbers: rate, capacity and maxReserved split evenly.
type shardParams struct {
	kind        Kind
	rate        float64
	period      int64
	max         float64
	maxReserved float64 // +Inf when unbounded
	resolution  int
}

func (d Definition) shardParams() shardParams {
	d = d.normalized()
	n := float64(d.Shards)
	p := shardParams{kind: d.Kind, rate: d.Rate / n, period: d.Period, max: d.Max() / n, maxReserved: math.Inf(1), resolution: d.Resolution}
	if d.MaxReserved != nil {
		p.maxReserved = *d.MaxReserved / n
	}
	return p
}

// checkCount rejects requests that can never succeed, before any state is read.
func (d Definition) checkCount(count float64, reserve bool) error {
	if !finiteIn(count, 0, maxAmount) {
		return invalidRequest("count", fmt.Sprintf("must be a number >= 0 and <= %g", float64(maxAmount)))
	}
	if reserve && d.Kind == SlidingWindow {
		return invalidRequest("reserve", "sliding windows cannot reserve")
	}
	d = d.normalized()
	p := d.shardParams()
	// One decision reaches one shard, or two combined (DESIGN §3.4: with shards, count must fit
	// in the capacity of two shards, reservation or not).
	usable := p.max * float64(min(d.Shards, 2))
	if reserve && d.Shards == 1 {
		usable += p.maxReserved // may be +Inf: an unbounded reservation always succeeds
	}
	if count > usable*(1+1e-12) {
		return ErrCountExceedsCapacity
	}
	return nil
}
