package algo

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// Human durations, for the dashboard's period field (the API keeps milliseconds): a whole number
// alone is milliseconds ("60000"); otherwise a sum of amounts with units, written compactly
// ("10m", "1h30m", "1.5s") or in words ("per 10 minutes", "every hour", "1 hour 30 minutes",
// "2 days, 3 hours and 5 seconds"). A unit without an amount is one of it ("per minute"). Units:
// ms, s, m (minutes), h, d and w, or their names (millisecond, second, minute, hour, day, week,
// singular or plural; sec, min, hr). The result is whole milliseconds, more than 0 and at most
// MaxDurationMS.

// MaxDurationMS bounds what ParseDuration returns (about 31,700 years); definitions bound their
// periods further.
const MaxDurationMS = 1_000_000_000_000_000

// ErrDuration is ParseDuration's error; its message says what is accepted.
var ErrDuration = errors.New(`use milliseconds (60000) or a duration such as "10m", "1h30m" or "per 10 minutes"`)

var durationUnits = map[string]int64{
	"ms": 1, "msec": 1, "msecs": 1, "millisecond": 1, "milliseconds": 1,
	"s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
	"m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
	"h": 3_600_000, "hr": 3_600_000, "hrs": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
	"d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
	"w": 604_800_000, "week": 604_800_000, "weeks": 604_800_000,
}

// ParseDuration reads a human duration (above) into milliseconds.
func ParseDuration(s string) (int64, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if len(s) == 0 || len(s) > 100 {
		return 0, ErrDuration
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil { // milliseconds, as before
		if n <= 0 || n > MaxDurationMS {
			return 0, ErrDuration
		}
		return n, nil
	}
	for _, prefix := range []string{"per ", "every "} {
		if strings.HasPrefix(s, prefix) {
			s = strings.TrimSpace(s[len(prefix):])
			break
		}
	}
	// Tokens: numbers and words, splitting "1h30m" into 1, h, 30, m; separators are spaces,
	// commas and "and".
	var tokens []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == ',' || c == '\t':
			i++
		case c >= '0' && c <= '9' || c == '.':
			j := i
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.') {
				j++
			}
			tokens, i = append(tokens, s[i:j]), j
		case c >= 'a' && c <= 'z':
			j := i
			for j < len(s) && s[j] >= 'a' && s[j] <= 'z' {
				j++
			}
			tokens, i = append(tokens, s[i:j]), j
		default:
			return 0, ErrDuration
		}
	}
	var total int64
	seen := false
	for i := 0; i < len(tokens); i++ {
		tok := tokens[i]
		if tok == "and" && seen {
			continue
		}
		amount := "1"
		if tok[0] >= '0' && tok[0] <= '9' || tok[0] == '.' {
			if i+1 >= len(tokens) {
				return 0, ErrDuration // a number needs its unit
			}
			amount, i, tok = tok, i+1, tokens[i+1]
		}
		unit, ok := durationUnits[tok]
		if !ok {
			return 0, ErrDuration
		}
		ms, ok := amountMS(amount, unit)
		if !ok || ms > MaxDurationMS-total {
			return 0, ErrDuration
		}
		total += ms
		seen = true
	}
	if !seen || total <= 0 {
		return 0, ErrDuration
	}
	return total, nil
}

// amountMS is amount (digits with at most one decimal point) of unit in whole milliseconds,
// computed exactly; false when it is malformed, not whole or too large.
func amountMS(amount string, unit int64) (int64, bool) {
	whole, frac, _ := strings.Cut(amount, ".")
	if whole == "" && frac == "" || strings.Contains(frac, ".") || len(whole) > 18 || len(frac) > 9 {
		return 0, false
	}
	var w int64
	if whole != "" {
		var err error
		if w, err = strconv.ParseInt(whole, 10, 64); err != nil || w > MaxDurationMS/unit {
			return 0, false
		}
	}
	ms := w * unit
	if frac != "" {
		f, err := strconv.ParseInt(frac, 10, 64)
		if err != nil {
			return 0, false
		}
		scale := int64(math.Pow10(len(frac)))
		if (f*unit)%scale != 0 { // unit <= 604,800,000 and f < 10^9: no overflow
			return 0, false
		}
		ms += f * unit / scale
	}
	return ms, ms <= MaxDurationMS
}

// durationParts are the units FormatDuration and DurationWords write, largest first (no weeks:
// "14d" reads better than "2w").
var durationParts = []struct {
	ms          int64
	short, word string
}{{86_400_000, "d", "day"}, {3_600_000, "h", "hour"}, {60_000, "m", "minute"}, {1000, "s", "second"}, {1, "ms", "millisecond"}}

// FormatDuration writes ms (> 0) compactly: "10m", "1h30m", "1s500ms"; ParseDuration reads it back.
func FormatDuration(ms int64) string {
	if ms <= 0 {
		return strconv.FormatInt(ms, 10) + "ms"
	}
	var b strings.Builder
	for _, p := range durationParts {
		if n := ms / p.ms; n > 0 {
			b.WriteString(strconv.FormatInt(n, 10) + p.short)
			ms -= n * p.ms
		}
	}
	return b.String()
}

// DurationWords writes ms (> 0) in words: "10 minutes", "1 hour 30 minutes", "1 second"; for a
// period, "per " + DurationWords reads "per 10 minutes" (and "per 1 minute" as "per minute").
// ParseDuration reads it back.
func DurationWords(ms int64) string {
	if ms <= 0 {
		return strconv.FormatInt(ms, 10) + " milliseconds"
	}
	var parts []string
	for _, p := range durationParts {
		if n := ms / p.ms; n > 0 {
			w := p.word
			if n != 1 {
				w += "s"
			}
			parts = append(parts, strconv.FormatInt(n, 10)+" "+w)
			ms -= n * p.ms
		}
	}
	return strings.Join(parts, " ")
}

// PerDuration is a period as the dashboard shows it after a rate: "per minute", "per 10 minutes",
// "per 1 hour 30 minutes".
func PerDuration(ms int64) string {
	w := DurationWords(ms)
	if strings.HasPrefix(w, "1 ") && !strings.Contains(w[2:], " ") {
		return "per " + w[2:]
	}
	return "per " + w
}
