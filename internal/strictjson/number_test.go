package strictjson

import (
	"errors"
	"testing"
)

// TestParseNumberReadsWhatJSONWrites: decimal numbers as JSON writes them, a zero written any way
// as 0 (not -0); Go's other literals, text beyond a float64 and a non-zero number that would read
// as 0 are refused, each with its error.
func TestParseNumberReadsWhatJSONWrites(t *testing.T) {
	for s, want := range map[string]float64{"12": 12, "-3": -3, "0.5": 0.5, "2.5e3": 2500, "1E-2": 0.01, "0": 0, "0.0": 0, "-0": 0, "0e5": 0, "5e-324": 5e-324} {
		v, err := ParseNumber(s)
		if err != nil || v != want || (want == 0 && 1/v < 0) {
			t.Errorf("ParseNumber(%q) = %v, %v; want %v", s, v, err, want)
		}
	}
	for s, want := range map[string]error{"0x1p4": ErrNotNumber, "1_0": ErrNotNumber, "+5": ErrNotNumber, "Inf": ErrNotNumber, "NaN": ErrNotNumber,
		".5": ErrNotNumber, "1.": ErrNotNumber, "007": ErrNotNumber, " 5": ErrNotNumber, "": ErrNotNumber, "1e400": ErrNotNumber,
		"2e-324": ErrUnderflow, "-1e-400": ErrUnderflow} {
		if _, err := ParseNumber(s); !errors.Is(err, want) {
			t.Errorf("ParseNumber(%q): %v; want %v", s, err, want)
		}
	}
}
