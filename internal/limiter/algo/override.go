package algo

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// Overrides change one limit for the keys they match: the numbers that keep existing state
// meaningful (rate, capacity, maxReserved; never kind, period or shards), or an action that
// admits without counting ("allow") or refuses ("deny"). A match is an exact key, or a prefix
// followed by one "*". For a key, the exact match wins, then the longest matching prefix;
// expired overrides are ignored, as if they had been deleted.

// Action is what an override does instead of changing numbers.
type Action string

// The override actions. The empty action changes numbers.
const (
	ActionNone  Action = ""
	ActionAllow Action = "allow" // admits without counting
	ActionDeny  Action = "deny"  // refuses until ExpiresAt, or for ever (MaxRetryAfter)
)

// Bounds on overrides.
const (
	// MaxMatchBytes bounds a match (keys are at most MaxKeyBytes too).
	MaxMatchBytes = 256
	// MaxOverrides is how many overrides one limit may hold.
	MaxOverrides = 10_000
)

// Override changes one limit for the keys Match matches.
type Override struct {
	Match       string
	Rate        *float64
	Capacity    *float64
	MaxReserved *float64
	Action      Action
	ExpiresAt   *int64 // ms since the epoch; nil: never expires
}

// IsPrefix reports whether the override matches a prefix (its match ends in "*").
func (o Override) IsPrefix() bool { return strings.HasSuffix(o.Match, "*") }

// ActiveAt reports whether the override applies at now (ms): it has not expired.
func (o Override) ActiveAt(now int64) bool { return o.ExpiresAt == nil || now < *o.ExpiresAt }

// Apply is def with the override's numbers in place of its own.
func (o Override) Apply(def Definition) Definition {
	if o.Rate != nil {
		def.Rate = *o.Rate
	}
	if o.Capacity != nil {
		def.Capacity = o.Capacity
	}
	if o.MaxReserved != nil {
		def.MaxReserved = o.MaxReserved
	}
	return def
}

// DenyRetryAfter is the retryAfter (ms) of a deny override at now: until it expires, or
// MaxRetryAfter when it never does.
func (o Override) DenyRetryAfter(now int64) int64 {
	if o.ExpiresAt == nil {
		return MaxRetryAfter
	}
	return RetryAfterMillis(float64(*o.ExpiresAt - now))
}

// MatchRule describes what ValidMatch accepts, for error messages.
const MatchRule = `match is a key, or a prefix followed by one "*" at the end (such as "org:acme:*"): 1 to 256 bytes of UTF-8 without NUL`

// ValidMatch reports whether m is an acceptable match: an exact key (ValidKey, without "*"), or
// a prefix followed by a single trailing "*" ("*" alone matches every key), at most
// MaxMatchBytes bytes in all.
func ValidMatch(m string) bool {
	if m == "" || len(m) > MaxMatchBytes || !utf8.ValidString(m) || strings.ContainsRune(m, 0) {
		return false
	}
	star := strings.IndexByte(m, '*')
	return star < 0 || star == len(m)-1
}

// MaxExpiresAt is the latest expiry an override can have (9999-12-31T23:59:59.999Z, in Unix
// ms): an RFC 3339 time, which is how expiries are shown and answered, has a four-digit year.
const MaxExpiresAt = 253402300799999

// Validate checks an override of def at now (ms): the match, the action, the expiry (in the
// future, before the year 10000), and that def with the override's numbers is a valid definition. Problems of the
// request (match, action, expiresAt) are CodeInvalidRequest; of the numbers, CodeInvalidConfig,
// each naming its JSON field.
func (o Override) Validate(def Definition, now int64) error {
	var fe []FieldError
	if !ValidMatch(o.Match) {
		fe = append(fe, FieldError{"match", MatchRule})
	}
	numbers := o.Rate != nil || o.Capacity != nil || o.MaxReserved != nil
	switch o.Action {
	case ActionNone:
		if !numbers {
			fe = append(fe, FieldError{"action", `give "action" ("allow" or "deny") or at least one of rate, capacity, maxReserved`})
		}
	case ActionAllow, ActionDeny:
		if numbers {
			fe = append(fe, FieldError{"action", `an override with an action cannot also change rate, capacity or maxReserved`})
		}
	default:
		fe = append(fe, FieldError{"action", `must be "allow" or "deny"`})
	}
	if o.ExpiresAt != nil && *o.ExpiresAt <= now {
		fe = append(fe, FieldError{"expiresAt", "must be in the future"})
	} else if o.ExpiresAt != nil && *o.ExpiresAt > MaxExpiresAt {
		fe = append(fe, FieldError{"expiresAt", "must be before the year 10000 (UTC)"})
	}
	if len(fe) > 0 {
		return &ValidationError{Code: CodeInvalidRequest, Fields: fe}
	}
	return o.validateNumbers(def)
}

// validateNumbers checks that def with the override's numbers is valid, reporting only the
// fields the override sets. If none of them is at fault, def itself is: stored before a rule it
// now breaks (a parent's template under a reserved prefix, say), and its own problems are named.
func (o Override) validateNumbers(def Definition) error {
	if o.Action != ActionNone {
		return nil
	}
	err := o.Apply(def).Validate()
	if err == nil {
		return nil
	}
	ve, _ := err.(*ValidationError)
	if ve == nil {
		return err
	}
	var fe []FieldError
	for _, f := range ve.Fields {
		switch f.Field {
		case "rate", "capacity", "maxReserved":
			fe = append(fe, f)
		}
	}
	if len(fe) == 0 {
		return ve
	}
	return &ValidationError{Code: CodeInvalidConfig, Fields: fe}
}

// CheckDefinition reports whether the override still fits def (a definition being replaced):
// a problem names the override's field and the override.
func (o Override) CheckDefinition(def Definition) error {
	err := o.validateNumbers(def)
	if ve, ok := err.(*ValidationError); ok {
		for i := range ve.Fields {
			ve.Fields[i].Message = fmt.Sprintf("override %q sets %s, which would make it invalid: %s",
				o.Match, ve.Fields[i].Field, ve.Fields[i].Message)
		}
	}
	return err
}

// OverrideIndex finds the override of a key among a limit's overrides in time proportional to
// the number of distinct prefix lengths, not the number of overrides.
type OverrideIndex struct {
	exact   map[string]*Override
	prefix  map[string]*Override // by the prefix without its "*"
	lengths []int                // the prefixes' distinct lengths, longest first
	n       int
}

// NewOverrideIndex indexes overrides (their matches are distinct).
func NewOverrideIndex(overrides []Override) *OverrideIndex {
	ix := &OverrideIndex{exact: map[string]*Override{}, prefix: map[string]*Override{}, n: len(overrides)}
	seen := map[int]bool{}
	for i := range overrides {
		o := &overrides[i]
		if !o.IsPrefix() {
			ix.exact[o.Match] = o
			continue
		}
		p := strings.TrimSuffix(o.Match, "*")
		ix.prefix[p] = o
		if !seen[len(p)] {
			seen[len(p)] = true
			ix.lengths = append(ix.lengths, len(p))
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(ix.lengths)))
	return ix
}

// Len is the number of overrides indexed.
func (ix *OverrideIndex) Len() int {
	if ix == nil {
		return 0
	}
	return ix.n
}

// Lookup is the override that applies to key at now: the exact match, else the longest
// matching prefix, skipping expired ones; nil when none does. "" is the limit's global key,
// which only "*" matches.
func (ix *OverrideIndex) Lookup(key string, now int64) *Override {
	if ix == nil {
		return nil
	}
	if o := ix.exact[key]; o != nil && key != "" && o.ActiveAt(now) {
		return o
	}
	for _, l := range ix.lengths {
		if l > len(key) {
			continue
		}
		if o := ix.prefix[key[:l]]; o != nil && o.ActiveAt(now) {
			return o
		}
	}
	return nil
}

// NumbersUntil is when the numbers the overrides give key at now may change with no write: the
// earliest expiry among the active overrides that match it, when one of them sets numbers (an
// allow or deny alone changes no numbers when it ends); 0 when none can.
func (ix *OverrideIndex) NumbersUntil(key string, now int64) int64 {
	var until int64
	numbers := false
	for _, o := range ix.Matching(key, now) {
		numbers = numbers || o.Action == ActionNone
		if o.ExpiresAt != nil && (until == 0 || *o.ExpiresAt < until) {
			until = *o.ExpiresAt
		}
	}
	if !numbers {
		return 0
	}
	return until
}

// Expiries lists in order the distinct times after now at which an override matching key and
// active at now expires: the moments the overrides that decide key may change (none start later).
func (ix *OverrideIndex) Expiries(key string, now int64) []int64 {
	var at []int64
	for _, o := range ix.Matching(key, now) {
		if o.ExpiresAt != nil && !slices.Contains(at, *o.ExpiresAt) {
			at = append(at, *o.ExpiresAt)
		}
	}
	slices.Sort(at)
	return at
}

// Matching lists every override whose match covers key and that is active at now, whichever
// wins: the sweeper keeps a row unless it reads as missing under each of them.
func (ix *OverrideIndex) Matching(key string, now int64) []Override {
	if ix == nil {
		return nil
	}
	var out []Override
	if o := ix.exact[key]; o != nil && key != "" && o.ActiveAt(now) {
		out = append(out, *o)
	}
	for _, l := range ix.lengths {
		if l > len(key) {
			continue
		}
		if o := ix.prefix[key[:l]]; o != nil && o.ActiveAt(now) {
			out = append(out, *o)
		}
	}
	return out
}
