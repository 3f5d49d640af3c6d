package api

import "strconv"

// decodeDecisionFast decodes the common shape of a single decision's body, such as
// {"key":"alice","count":2}, without encoding/json's reflection: every decision pays for its
// body, and this is most of them. It accepts only what it fully understands (the fields key,
// session, count, reserve and throws spelled exactly, strings without escapes, plain JSON
// numbers, true and false) and otherwise returns false and leaves d untouched, for the strict
// decoder to accept or explain. Whatever it accepts, encoding/json decodes to the same value
// (TestDecisionFastMatchesEncodingJSON, FuzzDecisionFast). The caller has already checked the
// size and UTF-8.
func decodeDecisionFast(body []byte, d *DecisionBody) bool {
	p := fastParser{b: body}
	var out DecisionBody
	if !p.consume('{') {
		return false
	}
	if !p.consume('}') {
		for {
			field, ok := p.plainString()
			if !ok || !p.consume(':') {
				return false
			}
			switch field {
			case "key", "session":
				v, ok := p.stringOrNull()
				if !ok {
					return false
				}
				if field == "key" {
					out.Key = v
				} else {
					out.Session = v
				}
			case "count":
				v, ok := p.numberOrNull()
				if !ok {
					return false
				}
				out.Count = v
			case "reserve":
				if out.Reserve, ok = p.boolean(); !ok {
					return false
				}
			case "throws":
				if out.Throws, ok = p.boolean(); !ok {
					return false
				}
			default: // config, unknown or differently spelled fields: the strict decoder's job
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

func (p *fastParser) stringOrNull() (*string, bool) {
	if p.literal("null") {
		return nil, true
	}
	s, ok := p.plainString()
	return &s, ok
}

func (p *fastParser) boolean() (bool, bool) {
	if p.literal("true") {
		return true, true
	}
	return false, p.literal("false")
}

// numberOrNull reads a number in JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *fastParser) numberOrNull() (*float64, bool) {
	if p.literal("null") {
		return nil, true
	}
	start := p.i
	p.optional('-')
	switch {
	case p.optional('0'):
	case p.digits() == 0:
		return nil, false
	}
	if p.optional('.') && p.digits() == 0 {
		return nil, false
	}
	if p.optional('e') || p.optional('E') {
		if !p.optional('+') {
			p.optional('-')
		}
		if p.digits() == 0 {
			return nil, false
		}
	}
	v, err := strconv.ParseFloat(string(p.b[start:p.i]), 64)
	if err != nil { // out of range: the strict decoder words the error
		return nil, false
	}
	return &v, true
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
