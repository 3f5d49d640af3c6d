package strictjson

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
)

// number is RFC 8259's number: an optional minus, decimal digits without a leading zero, an
// optional fraction and exponent. strconv.ParseFloat reads more, Go's literals: "0x1p4" (16),
// "1_0" (10), "+5", "Inf", "007".
var number = regexp.MustCompile(`^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$`)

var (
	// ErrNotNumber refuses text that is not a finite number as JSON writes one.
	ErrNotNumber = errors.New("not a number written as JSON writes one (decimal digits, such as 12, 0.5 or 2.5e3)")
	// ErrUnderflow refuses a number other than 0 so close to 0 that a float64 reads it as 0
	// ("2e-324"): taken as read it would silently become 0.
	ErrUnderflow = errors.New("a number other than 0 too close to 0 for a float64: it would read as 0 (the smallest above 0 is 5e-324)")
)

// ParseNumber reads s as a finite float64 written as JSON writes numbers, for a number that
// reaches Sluice outside a JSON body (a form field, an environment variable) to be read as the
// API reads one. A zero written any way ("0", "0.0", "-0", "0e5") is 0; a number beyond a
// float64's range is ErrNotNumber.
func ParseNumber(s string) (float64, error) {
	if !number.MatchString(s) {
		return 0, ErrNotNumber
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil { // the grammar leaves only a range error: beyond ±MaxFloat64
		return 0, ErrNotNumber
	}
	if v == 0 {
		if mantissa, _, _ := strings.Cut(strings.ToLower(s), "e"); strings.ContainsAny(mantissa, "123456789") {
			return 0, ErrUnderflow
		}
		return 0, nil // not -0
	}
	return v, nil
}
