package api

import "testing"

// TestPerSecondTextReadsAsAPersonWritesIt: a plan's rate in a problem's detail is plain for
// ordinary rates and in exponent form for extreme ones (an operator may set 1e-300 per second,
// which plainly is about 300 zeros).
func TestPerSecondTextReadsAsAPersonWritesIt(t *testing.T) {
	for v, want := range map[float64]string{2.5: "2.5", 100_000: "100000", 0.001: "0.001", 1e-300: "1e-300", 1e300: "1e+300", 123456789.123: "123456789.123", 1.0 / 3: "0.3333333333333333"} {
		if got := perSecondText(v); got != want {
			t.Errorf("perSecondText(%v) = %q, want %q", v, got, want)
		}
	}
}
