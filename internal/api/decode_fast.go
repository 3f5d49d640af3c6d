package api

import "strconv"

// decodeDecisionFast decodes the common shape of a single decision's body, such as
// {"key":"alice","count":2}, without encoding/json's reflection or the strict decoder's
// duplicate-member pass: every decision pays for its body, and this is most of them (profiled
// at 64 connections, the strict path cost 6.3 µs of CPU per decision and this one under 1:
// docs/performance.md, 2026-11-27). It accepts only what it fully understands (the fields key,
// session, ip, count, reserve and throws spelled exactly, each at most once, strings without
// escapes, plain JSON numbers, true and false; never null, which the strict decoder refuses for
// every one of them) and otherwise returns false and leaves d untouched, for the strict decoder
// to accept or explain. Whatever it accepts, the strict
// decoder decodes to the same value (TestDecisionFastMatchesTheStrictDecoder,
// FuzzDecisionFast). The caller has already checked the size, the leading brace and UTF-8.
func decodeDecisionFast(body []byte, d *DecisionBody) bool {
	p := fastParser{b: body}
	var out DecisionBody
	if !p.consume('{') {
		return false
	}
	var seen fastFields
	if !p.consume('}') {
		for {
			field, ok := p.plainString()
			if !ok || !p.consume(':') || !seen.first(field) {
				return false
			}
			switch field {
			case "key", "session", "ip":
				v, ok := p.plainString()
				if !ok {
					return false
				}
				switch field {
				case "key":
					out.Key = &v
				case "session":
					out.Session = &v
				default:
					out.IP = &v
				}
			case "count":
				v, ok := p.number()
				if !ok {
					return false
				}
				out.Count = &v
			case "reserve":
				if out.Reserve, ok = p.boolean(); !ok {
					return false
				}
			case "throws":
				if out.Throws, ok = p.boolean(); !ok {
					return false
				}
			default: // config, attributes, unknown or differently spelled fields: the strict decoder's job
				return false
			}
			if p.consume('}') {
				break
			}
			if !p.consume(',') {
				return false
			}
		}
	}
	p.space()
	if p.i != len(p.b) {
		return false
	}
	*d = out
	return true
}

// fastFields records which of the fast path's fields a body has given: a member given twice is
// the strict decoder's to refuse (encoding/json alone would keep the last).
type fastFields uint8

// first reports whether field is given for the first time (unknown fields are left to the switch).
func (f *fastFields) first(field string) bool {
	var bit fastFields
	switch field {
	case "key":
		bit = 1
	case "session":
		bit = 2
	case "ip":
		bit = 4
	case "count":
		bit = 8
	case "reserve":
		bit = 16
	case "throws":
		bit = 32
	}
	if *f&bit != 0 {
		return false
	}
	*f |= bit
	return true
}

// fastParser reads JSON tokens from b; every method skips leading whitespace.
type fastParser struct {
	b []byte
	i int
}

func (p *fastParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fastParser) consume(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *fastParser) literal(word string) bool {
	p.space()
	if len(p.b)-p.i >= len(word) && string(p.b[p.i:p.i+len(word)]) == word {
		p.i += len(word)
		return true
	}
	return false
}

// plainString reads a string with no escapes and no control characters.
func (p *fastParser) plainString() (string, bool) {
	if !p.consume('"') {
		return "", false
	}
	start := p.i
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			s := string(p.b[start:p.i])
			p.i++
			return s, true
		case c == '\\' || c < 0x20:
			return "", false
		}
	}
	return "", false
}

func (p *fastParser) boolean() (bool, bool) {
	if p.literal("true") {
		return true, true
	}
	return false, p.literal("false")
}

// number reads a number in JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *fastParser) number() (float64, bool) {
	p.space()
	start := p.i
	p.optional('-')
	switch {
	case p.optional('0'):
	case p.digits() == 0:
		return 0, false
	}
	if p.optional('.') && p.digits() == 0 {
		return 0, false
	}
	if p.optional('e') || p.optional('E') {
		if !p.optional('+') {
			p.optional('-')
		}
		if p.digits() == 0 {
			return 0, false
		}
	}
	v, err := strconv.ParseFloat(string(p.b[start:p.i]), 64)
	if err != nil { // out of range: the strict decoder words the error
		return 0, false
	}
	return v, true
}

func (p *fastParser) optional(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *fastParser) digits() int {
	n := 0
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}
