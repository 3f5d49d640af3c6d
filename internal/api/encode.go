package api

import (
	"math"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
)

// Decision responses are the hot path of the whole service, so they are written by hand instead
// of through encoding/json's reflection: the bytes are exactly what json.Marshal writes for the
// same value (TestDecisionJSONMatchesEncodingJSON and FuzzDecisionJSON compare them), anything
// unusual (a string needing escapes, a non-finite number) simply takes encoding/json's path.

const contentTypeJSON = "application/json; charset=utf-8"

// writeDecisionJSON writes a decision or batch response (DecisionResponse or BatchResponse).
func writeDecisionJSON(c *gin.Context, v any) {
	var buf []byte
	var ok bool
	switch r := v.(type) {
	case DecisionResponse:
		buf, ok = appendDecision(make([]byte, 0, 128), r)
	case BatchResponse:
		buf, ok = appendBatch(make([]byte, 0, 64+128*len(r.Results)), r)
	}
	if !ok {
		c.JSON(http.StatusOK, v)
		return
	}
	c.Data(http.StatusOK, contentTypeJSON, buf)
}

func appendBatch(b []byte, r BatchResponse) ([]byte, bool) {
	b = append(b, `{"ok":`...)
	b = strconv.AppendBool(b, r.OK)
	b = append(b, `,"retryAfter":`...)
	b = appendOptionalInt(b, r.RetryAfter)
	b = append(b, `,"results":`...)
	if r.Results == nil {
		return append(b, "null}"...), true
	}
	b = append(b, '[')
	for i, d := range r.Results {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendDecision(b, d); !ok {
			return nil, false
		}
	}
	return append(b, "]}"...), true
}

// appendDecision appends d as json.Marshal would; false means d needs encoding/json.
func appendDecision(b []byte, d DecisionResponse) ([]byte, bool) {
	if math.IsNaN(d.Remaining) || math.IsInf(d.Remaining, 0) || !plainJSONString(d.Name) ||
		(d.Key != nil && !plainJSONString(*d.Key)) {
		return nil, false
	}
	b = append(b, `{"ok":`...)
	b = strconv.AppendBool(b, d.OK)
	b = append(b, `,"retryAfter":`...)
	b = appendOptionalInt(b, d.RetryAfter)
	b = append(b, `,"remaining":`...)
	b = appendJSONFloat(b, d.Remaining)
	b = append(b, `,"name":"`...)
	b = append(b, d.Name...)
	b = append(b, `","key":`...)
	if d.Key == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = append(b, *d.Key...)
		b = append(b, '"')
	}
	return append(b, '}'), true
}

func appendOptionalInt(b []byte, v *int64) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, *v, 10)
}

// appendJSONFloat formats a finite float64 the way encoding/json does: shortest representation,
// exponent form below 1e-6 and from 1e21, with "e-07" cleaned up to "e-7".
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// plainJSONString reports whether json.Marshal writes s as itself between quotes: printable
// ASCII other than the quote, the backslash and the characters it HTML-escapes.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
