package algo

import (
	"strings"
	"testing"
)

func TestParseDurationReadsMillisecondsAndHumanDurations(t *testing.T) {
	for in, want := range map[string]int64{
		"60000": 60_000, "1": 1, "10m": 600_000, "1h30m": 5_400_000, "per 10 minutes": 600_000,
		"per minute": 60_000, "every hour": 3_600_000, "1 hour 30 minutes": 5_400_000, "1.5s": 1500,
		"0.001s": 1, "2 days, 3 hours and 5 seconds": 183_605_000, " Per 10 Minutes ": 600_000,
		"1s500ms": 1500, "1w": 604_800_000, "10 sec": 10_000, "2 hrs": 7_200_000, ".5m": 30_000,
	} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-5", "10", "10.5", "m10", "1e3s", "per", "and", "1 fortnight", "0.0001s",
		"1h-30m", "0m", "1.0005s", "0.5ms", "99999999999999999999ms", "31710 weeks 10000000 weeks", "1..5s", "10 10m", strings.Repeat("1m", 60)} {
		if in == "10" {
			continue // ten milliseconds: a number alone is milliseconds
		}
		if got, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %d, want an error", in, got)
		}
	}
}

func TestDurationsAreWrittenAsPeopleReadThem(t *testing.T) {
	for ms, want := range map[int64][3]string{
		600_000:    {"10m", "10 minutes", "per 10 minutes"},
		60_000:     {"1m", "1 minute", "per minute"},
		5_400_000:  {"1h30m", "1 hour 30 minutes", "per 1 hour 30 minutes"},
		1500:       {"1s500ms", "1 second 500 milliseconds", "per 1 second 500 milliseconds"},
		86_400_000: {"1d", "1 day", "per day"},
	} {
		got := [3]string{FormatDuration(ms), DurationWords(ms), PerDuration(ms)}
		if got != want {
			t.Errorf("%d ms written %q, want %q", ms, got, want)
		}
	}
}

// FuzzParseDuration: no input panics; whatever parses is a whole positive number of ms within
// the bound, and both written forms (and "per …") read back to the same milliseconds.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"60000", "10m", "1h30m", "per 10 minutes", "every hour", "1.5s", "2 days, 3 hours and 5 seconds", "1w2d", ".5m", "1..2s", "9999999999999999h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := ParseDuration(s)
		if err != nil {
			return
		}
		if ms <= 0 || ms > MaxDurationMS {
			t.Fatalf("ParseDuration(%q) = %d, outside (0, %d]", s, ms, int64(MaxDurationMS))
		}
		for _, w := range []string{FormatDuration(ms), DurationWords(ms), PerDuration(ms)} {
			back, err := ParseDuration(w)
			if err != nil || back != ms {
				t.Fatalf("%q = %d ms, written %q, read back %d, %v", s, ms, w, back, err)
			}
		}
	})
}
