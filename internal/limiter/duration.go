package limiter

import "github.com/sluice-dev/sluice/internal/limiter/algo"

// Human durations for the dashboard (algo.ParseDuration): the API keeps milliseconds.

// ParseDuration reads milliseconds ("60000") or a human duration ("10m", "1h30m",
// "per 10 minutes") into milliseconds; its error says what is accepted.
func ParseDuration(s string) (int64, error) { return algo.ParseDuration(s) }

// FormatDuration writes milliseconds compactly ("1h30m"), as ParseDuration reads them.
func FormatDuration(ms int64) string { return algo.FormatDuration(ms) }

// PerDuration writes a period after a rate: "per minute", "per 10 minutes".
func PerDuration(ms int64) string { return algo.PerDuration(ms) }

// DurationWords writes milliseconds in words: "10 minutes", "1 hour 30 minutes".
func DurationWords(ms int64) string { return algo.DurationWords(ms) }
