package ui

import (
	"math"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
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

// float is field f as a finite number, in plain or exponent notation ("0.5", "1e-39", "2.5E+3");
// nil when empty or when it does not parse.
func (p postedForm) float(f string) *float64 {
	s := p.text(f)
	if s == "" {
		return nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if len(s) > maxFieldLen || err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		p.errs[f] = "must be a number"
		return nil
	}
	return &v
}

// integer is field f as a whole number; nil when empty or when it does not parse.
func (p postedForm) integer(f string) *int64 {
	s := p.text(f)
	if s == "" {
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if len(s) > maxFieldLen || err != nil {
		p.errs[f] = "must be a whole number"
		return nil
	}
	return &v
}
