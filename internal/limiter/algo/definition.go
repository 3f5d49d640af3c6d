// Package algo is the pure limit math of DESIGN §3: definitions and their validation, the three
// algorithms, shards and the power of two choices, retryAfter, and when stored state reads like
// no state at all. It has no I/O and imports nothing of the project and no database library:
// state in, clock reading in, decision and new state out. The engine (package limiter) runs it
// inside serializable database transactions and turns its errors into the project's vocabulary.
package algo

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// Kind is the algorithm of a limit.
type Kind string

// The limit kinds of DESIGN §3.
const (
	TokenBucket   Kind = "token bucket"
	FixedWindow   Kind = "fixed window"
	SlidingWindow Kind = "sliding window"
	// Quota counts Rate per calendar window (a day, an ISO week, a month) in a time zone.
	Quota Kind = "quota"
	// GCRA is the token bucket under its other name (the generic cell rate algorithm): burst is
	// the capacity and the emission interval is period / rate. A definition keeps the name its
	// author wrote; the math is the token bucket's (Kind.Algorithm).
	GCRA Kind = "gcra"
	// Concurrency bounds what is in flight: Rate leases at once, each ending when released or
	// LeaseTTL ms after it was acquired or last extended (concurrency.go).
	Concurrency Kind = "concurrency"
)

// Known reports whether k is one of the kinds above.
func (k Kind) Known() bool {
	switch k {
	case TokenBucket, GCRA, FixedWindow, SlidingWindow, Quota, Concurrency:
		return true
	}
	return false
}

// Algorithm is the kind whose math decides: the token bucket for GCRA, the kind itself otherwise.
func (k Kind) Algorithm() Kind {
	if k == GCRA {
		return TokenBucket
	}
	return k
}

// Mode says what a limit's refusals do.
type Mode string

// The modes of a limit. In shadow mode the engine decides and writes exactly as it would when
// enforcing, but a would-be refusal is answered as admitted (and reported as a shadow refusal),
// so that a new limit can be watched before it is enforced. "" reads as Enforce.
const (
	Enforce Mode = "enforce"
	Shadow  Mode = "shadow"
)

// Bounds on definitions. They keep every computation far from float64 and int64 overflow.
const (
	MaxShards     = 1024
	MaxResolution = 60
	MaxAmount     = 1e15                  // the most a rate, capacity, maxReserved or count may be
	maxPeriod     = 10 * 366 * 86_400_000 // ten years in ms
	maxJitter     = 86_400_000            // one day in ms
	MaxPenalty    = 86_400_000            // one day in ms
	maxStart      = int64(1) << 50        // ms since the epoch, ~35,000 years
	MaxKeyBytes   = 256
)

// ValidName reports whether s is an acceptable limit name: 1 to 128 of A-Z, a-z, 0-9, '_', '.',
// ':' and '-', and not "." or "..", which HTTP clients resolve away as dot segments of the
// limit's URL (/v1/limits/./value is /v1/limits/value). (A loop, not a regular expression: every
// decision checks its limit's name, and the regexp was 1.7% of the app's CPU at 32 connections;
// FuzzValidName holds the two equal.)
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 128 || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '.', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// KeyRule describes what ValidKey accepts, for error messages.
const KeyRule = "keys are 1 to 256 bytes of UTF-8 without NUL characters"

// Keys the API derives itself live under these prefixes: an authorized anonymous session's key
// and an IP prefix's fallback key. No key a client names or fills from attributes may use them,
// so that a client cannot spend another visitor's allowance by naming it.
const (
	SessionKeyPrefix = "session:"
	IPKeyPrefix      = "ip:"
)

// ReservedKeyRule says what ReservedKey refuses, for error messages.
const ReservedKeyRule = `keys starting with "session:" or "ip:" are reserved for anonymous sessions and their IP fallback`

// ReservedKey reports whether s lies under a prefix of the keys the API derives itself.
func ReservedKey(s string) bool {
	return strings.HasPrefix(s, SessionKeyPrefix) || strings.HasPrefix(s, IPKeyPrefix)
}

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
	// Quota only: the calendar window, its IANA time zone, and (month only) the billing day the
	// windows start on, clamped to each month's last day; 0 means 1. Period is unused (0).
	Calendar  Calendar
	TimeZone  string
	AnchorDay int
	// Parents are the budgets a decision on this limit also spends (nested budgets, parents.go).
	Parents []Parent
	Mode    Mode // Enforce (default) or Shadow
	// Penalty (ms, default 0): a key the limit refuses stays refused until Penalty ms after that
	// refusal. Single-shard limits only: the lockout lives in the key's one state row.
	Penalty int64
	// LeaseTTL (concurrency only, ms): how long a lease lasts unless released or extended.
	LeaseTTL int64
}

// IsShadow reports whether the limit is in shadow mode.
func (d Definition) IsShadow() bool { return d.Mode == Shadow }

// FieldError is one problem with one field of a definition or request.
type FieldError struct {
	Field   string
	Message string
}

// The codes of a ValidationError (the problem codes of DESIGN §4 they stand for).
const (
	CodeInvalidConfig  = "invalid_config"
	CodeInvalidRequest = "invalid_request"
)

// ValidationError lists what is wrong with a definition or a request; its Code is
// CodeInvalidConfig or CodeInvalidRequest. It is algo's own type because algo imports nothing of
// the project: the engine converts it into the project's error vocabulary.
type ValidationError struct {
	Code   string
	Fields []FieldError
	Cause  error // a sentinel the problem is also, for callers that answer it otherwise (optional)
}

// Unwrap is the problem's sentinel, if it has one.
func (e *ValidationError) Unwrap() error { return e.Cause }

// because gives the problem its sentinel and returns it.
func (e *ValidationError) because(cause error) *ValidationError {
	e.Cause = cause
	return e
}

// Detail is every field's problem, "field: message" joined by "; ".
func (e *ValidationError) Detail() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Message
	}
	return strings.Join(parts, "; ")
}

func (e *ValidationError) Error() string { return e.Code + ": " + e.Detail() }

// ErrBadAttributes is the cause of the problem when a decision's attributes cannot serve it: a
// value is empty, too long or not UTF-8, a parent's key template names an attribute that is not
// there, or the key it fills is too long or under a reserved prefix. Where attributes come from
// visitors (Envoy's descriptors), such a request is refused rather than failed.
var ErrBadAttributes = errors.New("the attributes cannot fill the parents' keys")

// ErrCountNeverAdmitted is the cause of the problem when a count is one the limit's kind never
// admits (a concurrency limit takes 1). Where counts come from a request's traffic (Envoy's
// hits_addend), such a request is refused rather than failed.
var ErrCountNeverAdmitted = errors.New("the limit's kind never admits this count")

// ErrCountExceedsCapacity means a request can never succeed: its count is more than the limit
// can ever admit at once (DESIGN §3.4).
var ErrCountExceedsCapacity = errors.New("count exceeds what the limit can ever admit")

// InvalidRequest is a ValidationError of CodeInvalidRequest about one field.
func InvalidRequest(field, msg string) *ValidationError {
	return &ValidationError{Code: CodeInvalidRequest, Fields: []FieldError{{field, msg}}}
}

// CheckCountRange refuses a count no limit takes: below 0, above MaxAmount, or not a number.
func CheckCountRange(count float64) error {
	if !finiteIn(count, 0, MaxAmount) {
		return InvalidRequest("count", fmt.Sprintf("must be a number >= 0 and <= %g", float64(MaxAmount)))
	}
	return nil
}

func finiteIn(v, lo, hi float64) bool { return !math.IsNaN(v) && v >= lo && v <= hi }

// Validate checks a definition and reports every problem, each tied to its JSON field name.
func (d Definition) Validate() error {
	var fe []FieldError
	add := func(field, format string, args ...any) {
		fe = append(fe, FieldError{field, fmt.Sprintf(format, args...)})
	}
	if !d.Kind.Known() {
		add("kind", `must be "token bucket", "gcra", "fixed window", "sliding window", "quota" or "concurrency"`)
	}
	switch d.Mode {
	case "", Enforce, Shadow:
	default:
		add("mode", `must be "enforce" or "shadow"`)
	}
	if d.Penalty < 0 || d.Penalty > MaxPenalty {
		add("penalty", "must be a whole number of milliseconds >= 0 and <= %d", int64(MaxPenalty))
	} else if d.Penalty > 0 && d.Shards > 1 {
		add("penalty", "applies to limits with one shard (a key's lockout lives in its one state row)")
	}
	if !finiteIn(d.Rate, math.SmallestNonzeroFloat64, MaxAmount) {
		add("rate", "must be a number > 0 and <= %g", float64(MaxAmount))
	}
	switch {
	case d.Kind == Quota:
		fe = append(fe, d.quotaProblems()...)
	case d.Kind == Concurrency:
		fe = append(fe, d.concurrencyProblems()...)
	case d.Period <= 0 || d.Period > maxPeriod:
		add("period", "must be a whole number of milliseconds > 0 and <= %d", int64(maxPeriod))
	}
	if d.Kind != Quota {
		if d.Calendar != "" {
			add("calendar", "applies to quotas only")
		}
		if d.TimeZone != "" {
			add("timeZone", "applies to quotas only")
		}
		if d.AnchorDay != 0 {
			add("anchorDay", "applies to quotas only")
		}
	}
	fe = append(fe, parentProblems(d.Parents)...)
	if d.Capacity != nil && !finiteIn(*d.Capacity, 0, MaxAmount) {
		add("capacity", "must be a number >= 0 and <= %g", float64(MaxAmount))
	}
	if d.MaxReserved != nil && !finiteIn(*d.MaxReserved, 0, MaxAmount) {
		add("maxReserved", "must be a number >= 0 and <= %g", float64(MaxAmount))
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
	if d.LeaseTTL != 0 && d.Kind != Concurrency {
		add("leaseTtl", "applies to concurrency limits only")
	}
	if len(fe) > 0 {
		return &ValidationError{Code: CodeInvalidConfig, Fields: fe}
	}
	return nil
}

// quotaProblems checks the fields of a quota.
func (d Definition) quotaProblems() []FieldError {
	var fe []FieldError
	add := func(field, msg string) { fe = append(fe, FieldError{field, msg}) }
	if d.Period != 0 {
		add("period", "does not apply to quotas: the calendar sets the window")
	}
	switch d.Calendar {
	case Day, Week, Month:
	case "":
		add("calendar", `is required for quotas: "day", "week" or "month"`)
	default:
		add("calendar", `must be "day", "week" or "month"`)
	}
	if d.TimeZone == "" {
		add("timeZone", `is required for quotas: an IANA time zone such as "Europe/Berlin" or "UTC"`)
	} else if _, ok := LoadZone(d.TimeZone); !ok {
		add("timeZone", fmt.Sprintf("unknown time zone %q: use an IANA name such as \"Europe/Berlin\" or \"UTC\"", d.TimeZone))
	}
	if d.AnchorDay != 0 {
		if d.Calendar != Month {
			add("anchorDay", "applies to monthly quotas only")
		} else if d.AnchorDay < 1 || d.AnchorDay > 31 {
			add("anchorDay", "must be a day of the month between 1 and 31 (clamped to each month's last day)")
		}
	}
	if d.Capacity != nil {
		add("capacity", "does not apply to quotas: rate is the quota of each window")
	}
	if d.MaxReserved != nil {
		add("maxReserved", "does not apply to quotas (they cannot reserve)")
	}
	return fe
}

// Normalized fills defaults, and reads a capacity or maxReserved of -0 (valid: it is >= 0) as
// +0, so that no state computed from it carries the sign (math.Min(+0, -0) is -0; PostgreSQL's
// least, which the one-trip function uses, keeps the first of equal values). Call only on a
// valid definition.
func (d Definition) Normalized() Definition {
	for _, p := range []**float64{&d.Capacity, &d.MaxReserved} {
		if *p != nil && **p == 0 && math.Signbit(**p) {
			zero := 0.0
			*p = &zero
		}
	}
	if d.Shards == 0 {
		d.Shards = 1
	}
	if d.Kind == SlidingWindow && d.Resolution == 0 {
		d.Resolution = 1
	}
	if d.Kind == Quota && d.Calendar == Month && d.AnchorDay == 0 {
		d.AnchorDay = 1
	}
	if d.Mode == "" {
		d.Mode = Enforce
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
	calendar    Calendar       // quota only
	zone        *time.Location // quota only
	anchorDay   int            // quota only
}

func (d Definition) shardParams() shardParams {
	d = d.Normalized()
	n := float64(d.Shards)
	p := shardParams{kind: d.Kind.Algorithm(), rate: d.Rate / n, period: d.Period, max: d.Max() / n, maxReserved: math.Inf(1), resolution: d.Resolution}
	if d.MaxReserved != nil {
		p.maxReserved = *d.MaxReserved / n
	}
	if d.Kind == Quota {
		p.calendar, p.zone, p.anchorDay = d.Calendar, d.zone(), d.AnchorDay
	}
	return p
}

// zone is a quota's time zone, or nil when the binary's zone data lacks it: validation refuses
// such a zone, but a definition stored by an earlier version, which asked the machine's zone
// files, may name one ("localtime"). Nil is no zone at all, not UTC: deciding in a zone other
// than the one other instances use starts windows elsewhere and admits a quota twice. Window
// reads nil as one endless window, and CheckCount refuses every decision on such a quota.
func (d Definition) zone() *time.Location {
	loc, _ := LoadZone(d.TimeZone)
	return loc
}

// zoneProblem is the problem of a quota whose zone the binary's zone data lacks (zone), nil for
// any other definition.
func (d Definition) zoneProblem() error {
	if d.Kind != Quota {
		return nil
	}
	if _, ok := LoadZone(d.TimeZone); ok {
		return nil
	}
	return &ValidationError{Code: CodeInvalidConfig, Fields: []FieldError{{"timeZone", fmt.Sprintf(
		"unknown time zone %q: this quota cannot decide until its definition is replaced with an IANA name such as \"Europe/Berlin\" or \"UTC\"",
		d.TimeZone)}}}
}

// WindowAt is the calendar window [start, end) of a quota that contains the instant t (ms).
func (d Definition) WindowAt(t int64) (start, end int64) {
	return Window(d.Calendar, d.zone(), d.AnchorDay, t)
}

// CheckCount rejects requests that can never succeed, before any state is read: a
// *ValidationError for a count or reserve that is invalid in itself or for a stored quota whose
// zone the binary does not have (zone), ErrCountExceedsCapacity for a count this limit can never
// admit.
func (d Definition) CheckCount(count float64, reserve bool) error {
	if err := d.zoneProblem(); err != nil {
		return err
	}
	if err := CheckCountRange(count); err != nil {
		return err
	}
	if reserve && d.Kind == SlidingWindow {
		return InvalidRequest("reserve", "sliding windows cannot reserve")
	}
	if reserve && d.Kind == Quota {
		return InvalidRequest("reserve", "quotas cannot reserve")
	}
	if d.Kind == Concurrency {
		if reserve {
			return InvalidRequest("reserve", "concurrency limits cannot reserve")
		}
		if count != 1 {
			return InvalidRequest("count", "must be 1 for a concurrency limit (one lease per decision)").because(ErrCountNeverAdmitted)
		}
		return nil
	}
	d = d.Normalized()
	p := d.shardParams()
	// One decision reaches one shard, or two combined (DESIGN §3.4: with shards, count must fit
	// in the capacity of two shards, reservation or not).
	usable := p.max * float64(min(d.Shards, 2))
	if reserve && d.Shards == 1 {
		usable += p.maxReserved // may be +Inf: an unbounded reservation always succeeds
	}
	// Exactly: a count above what full shards hold is refused by every decision (a tolerance here
	// turned such counts into refusals for ever, with a retryAfter, instead of this 400).
	// Compared as a decision does (balanceAfter): a window's 0.1 + 0.2 of 0.3 fits. (A sharded
	// limit's shards are exact: 0.3 in 3 shards is 0.09999999999999999 each, and 0.2 fits no two.)
	if balanceAfter(p.kind, usable, count) < 0 {
		return ErrCountExceedsCapacity
	}
	return nil
}

// NumbersChanged reports whether b reads a key's state otherwise than a: its shape, or the
// numbers and rules a decision applies to it (rate, maximum, how far reservations go, kind, mode,
// penalty). Jitter, ipFallback, parents and leaseTTL change nothing in a key's own state.
func NumbersChanged(a, b Definition) bool {
	a, b = a.Normalized(), b.Normalized()
	reserve := func(d Definition) float64 {
		if d.MaxReserved == nil {
			return math.Inf(1)
		}
		return *d.MaxReserved
	}
	return StateShapeChanged(a, b) || a.Kind != b.Kind || a.Rate != b.Rate || a.Max() != b.Max() ||
		reserve(a) != reserve(b) || a.Mode != b.Mode || a.Penalty != b.Penalty
}

// StateShapeChanged reports whether stored state of a becomes meaningless under b, in which case
// replacing the definition drops the state (a new, full limit). Rate, capacity, maxReserved,
// jitter, ipFallback, mode and penalty changes keep the state, read under the new numbers, and so
// does renaming a token bucket to gcra or back (the same algorithm).
func StateShapeChanged(a, b Definition) bool {
	a, b = a.Normalized(), b.Normalized()
	return a.Kind.Algorithm() != b.Kind.Algorithm() || a.Period != b.Period || a.Shards != b.Shards || a.Resolution != b.Resolution ||
		a.Calendar != b.Calendar || a.TimeZone != b.TimeZone || a.AnchorDay != b.AnchorDay ||
		(a.Start == nil) != (b.Start == nil) || (a.Start != nil && *a.Start != *b.Start)
}
