package ui

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/strictjson"
)

// maxFieldLen bounds each numeric form field; longer input is an error, not a parse attempt.
const maxFieldLen = 40

// formNum is v as a form field is filled in: the shortest decimals that read back as exactly v,
// written plainly ("86400", "0.1") when that fits in maxFieldLen, else with an exponent
// ("1e-39", at most 24 characters), so that float reads every number back unchanged.
func formNum(v float64) string {
	if s := strconv.FormatFloat(v, 'f', -1, 64); len(s) <= maxFieldLen {
		return s
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// postedForm reads a posted form's fields, each trimmed (but those read by exact), keeping what
// was typed (vals: the form shows it again) and each field that does not parse (errs: shown
// beside it).
type postedForm struct {
	c    *gin.Context
	vals map[string]string
	errs map[string]string
}

func readForm(c *gin.Context) postedForm {
	return postedForm{c: c, vals: map[string]string{}, errs: map[string]string{}}
}

// text is field f, trimmed.
func (p postedForm) text(f string) string {
	v := strings.TrimSpace(p.c.PostForm(f))
	p.vals[f] = v
	return v
}

// exact is field f as it was posted, not trimmed: for a value that is an exact byte string (an
// override's match, a key), where " vip" and "vip" are different things.
func (p postedForm) exact(f string) string {
	v := p.c.PostForm(f)
	p.vals[f] = v
	return v
}

// float is field f as a finite number written as the API's JSON writes one (parseNumber); nil
// when empty or when it does not parse.
func (p postedForm) float(f string) *float64 {
	s := p.text(f)
	if s == "" {
		return nil
	}
	v, problem := parseNumber(s)
	if problem != "" {
		p.errs[f] = problem
		return nil
	}
	return &v
}

// integer is field f as a whole number written as the API's JSON writes one (parseWhole); nil
// when empty or when it does not parse.
func (p postedForm) integer(f string) *int64 {
	s := p.text(f)
	if s == "" {
		return nil
	}
	v, ok := parseWhole(s)
	if !ok {
		p.errs[f] = errWhole
		return nil
	}
	return &v
}

// The dashboard reads every number typed into a form as the API reads a number in its JSON body
// (strictjson.ParseNumber; a whole number is its integer part: digits without a leading zero, an
// optional minus), so that the forms accept exactly what the API does. strconv's parsers read
// more, Go's literals: "0x1p4" (16), "1_0" (10), "+5", "Inf", "007".
var jsonWhole = regexp.MustCompile(`^-?(?:0|[1-9][0-9]*)$`)

// The fields' messages when what was typed is not such a number.
const (
	errNumber = "must be a number written in decimal, such as 12, 0.5 or 2.5e3"
	errWhole  = "must be a whole number written in decimal digits without a leading zero, such as 12"
	// errUnderflow: a number other than 0 too close to 0 for a float64 reads as 0, which would
	// silently change what was typed (a plan's 0 is no limit).
	errUnderflow = "is too close to 0 for the server to hold: it would read as 0 (the smallest number above 0 is 5e-324)"
)

// parseNumber reads s as a finite float64 written as JSON writes numbers. problem is the field's
// message when it is not one: not such a number (errNumber), longer than maxFieldLen, beyond a
// float64's range, or a number other than 0 so close to 0 that it would read as 0
// (errUnderflow: "2e-324"); a zero written any way ("0", "0.0", "-0", "0e5") is 0.
func parseNumber(s string) (v float64, problem string) {
	if len(s) > maxFieldLen {
		return 0, errNumber
	}
	v, err := strictjson.ParseNumber(s)
	switch {
	case errors.Is(err, strictjson.ErrUnderflow):
		return 0, errUnderflow
	case err != nil:
		return 0, errNumber
	}
	return v, ""
}

// parseWhole reads s as an int64 written as JSON writes whole numbers: digits, an optional
// minus, no leading zero, no fraction or exponent (the API's whole-number fields refuse those).
func parseWhole(s string) (int64, bool) {
	if len(s) > maxFieldLen || !jsonWhole.MatchString(s) {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}
