// Package strictjson finds, in a JSON body, what encoding/json would decode without complaint
// although the body does not say what the decoded value says: a member named twice (the last
// wins), a member named in another case than its field (encoding/json folds case, Unicode
// look-alikes such as "ſ" for "s" included) and a null array item decoded as a zero value. A
// client, proxy or audit log that reads such a body another way sees another request than the
// one the server acted on.
package strictjson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Problem is one member a strict decoder must refuse.
type Problem struct {
	Path    string // the member's path: "count", "limits[1].key"
	Message string // a sentence for the client, naming the member
	// Number says the member is a number its field cannot hold (a fraction for a whole number).
	Number bool
}

func (p *Problem) Error() string { return p.Message }

// maxNesting is encoding/json's own limit on nesting: it refuses anything deeper, so Check need
// not look further.
const maxNesting = 10000

// Check finds what encoding/json would silently accept in a body decoded into a value of type
// dst: an object member named twice in one object (encoding/json keeps the last), and a
// member named in another case than its field ({"KEY": …} taken as "key", so that
// {"key": "alice", "KEY": "bob"} decides bob, and a proxy or audit log reading the first sees
// another request than the one charged), and a null array item where the item cannot be null
// (encoding/json decodes it as the zero value). The problem names the member's path ("count",
// "limits[1].key"), as it names a member the type does not have (the decoder, with
// DisallowUnknownFields, refuses it too, but without its path). Malformed JSON and JSON nested
// deeper than maxNesting are left for the decoder to describe.
//
// The path is kept as a stack of steps and spelled out only for a problem: building every
// member's full path as it went made a deeply nested body cost time and memory quadratic in its
// depth: 1.6 GB for 64 KiB of nested arrays, 1.4 GB for the 220 KB of 20000 nested objects that
// the 1 MiB bulk route reads (tens of seconds on a busy machine, past the server's WriteTimeout,
// which then dropped the connection unanswered).
func Check(body []byte, dst reflect.Type) *Problem { return check(body, dst, false, nil) }

// Nullable names, for each struct type (without pointers), the JSON members of it that may be an
// explicit null (for CheckNulls).
type Nullable map[reflect.Type][]string

// allows reports whether member of struct type t may be null.
func (n Nullable) allows(t reflect.Type, member string) bool {
	return t != nil && slices.Contains(n[t], member)
}

// CheckNulls is Check that also refuses an explicit null for an object member or a map value
// whose type is known, unless nullable names the member: encoding/json reads {"key": null} as if
// "key" were absent (a pointer stays nil, anything else keeps its zero value), so that a body
// the client meant as "this key" is obeyed as "no key" (a refund of the global key, a reset of
// it). A member whose type decodes itself (json.Unmarshaler, json.RawMessage among them) or is
// an interface sees the null itself and is left alone. The problem is worded as the decoder words
// a value of the wrong type ("count must be a number"), with ", not null".
func CheckNulls(body []byte, dst reflect.Type, nullable Nullable) *Problem {
	return check(body, dst, true, nullable)
}

func check(body []byte, dst reflect.Type, nulls bool, nullable Nullable) *Problem {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type step struct {
		key   string
		index int // of an array item, when key is ""; -1 for a member
	}
	var steps []step
	path := func() string {
		var b strings.Builder
		for _, s := range steps {
			if s.index >= 0 {
				b.WriteString("[" + strconv.Itoa(s.index) + "]")
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.key)
		}
		return b.String()
	}
	// shown is path for a message: escaped as Go writes it in ASCII, so that a member name that
	// only looks like another (a Kelvin sign for K) or holds control characters reads as sent.
	// Problem.Path stays the name itself.
	shown := func() string {
		q := strconv.QuoteToASCII(path())
		return q[1 : len(q)-1]
	}
	var problem *Problem
	refuseNull := func(t reflect.Type) bool {
		problem = &Problem{Path: path(), Message: shown() + " must be " + describe(t) + ", not null"}
		return false
	}
	// walk reads one value, whose Go type is t (nil: not known, such as a json.RawMessage's
	// content), an array's item when item is true, an object's member (or a map's value) when
	// nullOK is false and CheckNulls was asked; it returns false on a problem or a decoding
	// error.
	var walk func(t reflect.Type, item, nullOK bool, depth int) bool
	walk = func(t reflect.Type, item, nullOK bool, depth int) bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') && depth >= maxNesting {
			return false
		}
		if tok == nil && item && t != nil && !isNullable(t) {
			// encoding/json decodes it as the zero value: {"counts": [null]} would settle a
			// hold as if nothing was used.
			return refuseNull(t)
		}
		if tok == nil && !item && !nullOK && t != nil && !decodesNull(t) {
			// encoding/json reads it as an absent member: {"key": null} decides the global key.
			return refuseNull(t)
		}
		t = decodedAs(t)
		if len(steps) > 0 && t != nil && tok != nil {
			if says, number := misfit(tok, t); says != "" {
				// encoding/json would refuse it too, but name the member without its array
				// indices ("limits.key"), which tells a client nothing about which item.
				problem = &Problem{Path: path(), Message: shown() + says, Number: number}
				return false
			}
		}
		switch tok {
		case json.Delim('{'):
			fields := membersOf(t)
			seen := map[string]bool{}
			for dec.More() {
				keyTok, err := dec.Token()
				if err != nil {
					return false
				}
				key, _ := keyTok.(string)
				steps = append(steps, step{key: key, index: -1})
				if seen[key] {
					problem = &Problem{Path: path(), Message: shown() + " is given more than once; give each member once"}
					return false
				}
				seen[key] = true
				var elem reflect.Type
				nullOK := !nulls
				switch {
				case t != nil && t.Kind() == reflect.Map:
					elem = t.Elem()
				case fields != nil:
					nullOK = nullOK || nullable.allows(t, key)
					var exact bool
					if elem, exact = fields[key]; !exact {
						for name := range fields {
							if strings.EqualFold(name, key) {
								problem = &Problem{Path: path(), Message: fmt.Sprintf("unknown field %+q: member names are case-sensitive (%q)", key, name)}
								return false
							}
						}
						// The decoder refuses it too (DisallowUnknownFields), but names it
						// without its path ("foo" for "decisions[1].foo").
						problem = &Problem{Path: path(), Message: fmt.Sprintf("unknown field %+q", path())}
						return false
					}
				}
				if !walk(elem, false, nullOK, depth+1) {
					return false
				}
				steps = steps[:len(steps)-1]
			}
			_, err = dec.Token() // '}'
			return err == nil
		case json.Delim('['):
			var elem reflect.Type
			if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
				elem = t.Elem()
			}
			for i := 0; dec.More(); i++ {
				steps = append(steps, step{index: i})
				if !walk(elem, true, true, depth+1) {
					return false
				}
				steps = steps[:len(steps)-1]
			}
			_, err = dec.Token() // ']'
			return err == nil
		}
		return true
	}
	walk(dst, false, true, 0)
	return problem
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsonNumber      = reflect.TypeFor[json.Number]()
)

// notWhole is what misfit says of a whole number written with a fraction or an exponent, which
// encoding/json refuses (whole).
const notWhole = " must be a whole number written without a decimal point or exponent (60000, not 60000.0 or 6e4)"

// whole reports whether number s is written without a fraction or an exponent.
func whole(s string) bool { return !strings.ContainsAny(s, ".eE") }

// misfit says what is wrong with a value decoded into t (no pointer, no json.Unmarshaler) whose
// first token is tok, as the end of a sentence that begins with the member's path (" must be a
// string"), when encoding/json would refuse it; number says it is a number t cannot hold (written
// with a fraction or exponent for a whole number, or beyond t's range). "" when t takes it.
func misfit(tok json.Token, t reflect.Type) (says string, number bool) {
	mustBe := " must be " + describe(t)
	if t == quotedType {
		if _, ok := tok.(string); ok {
			return "", false
		}
		return mustBe, false
	}
	k := t.Kind()
	if k == reflect.Interface {
		return "", false
	}
	var fits bool
	switch v := tok.(type) {
	case json.Delim:
		fits = v == '{' && (k == reflect.Struct || k == reflect.Map) || v == '[' && (k == reflect.Slice || k == reflect.Array)
	case string:
		fits = k == reflect.String || reflect.PointerTo(t).Implements(textUnmarshaler) ||
			k == reflect.Slice && t.Elem().Kind() == reflect.Uint8 // base64
	case bool:
		fits = k == reflect.Bool
	case json.Number:
		if t == jsonNumber { // the one string type a number decodes into
			return "", false
		}
		s := string(v)
		var err error
		switch k {
		case reflect.Float32, reflect.Float64:
			_, err = strconv.ParseFloat(s, t.Bits())
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if !whole(s) {
				return notWhole, true
			}
			_, err = strconv.ParseInt(s, 10, t.Bits())
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if !whole(s) {
				return notWhole, true
			}
			_, err = strconv.ParseUint(s, 10, t.Bits())
		default:
			return mustBe, false
		}
		if err != nil {
			return " is out of range: it must be " + describe(t) + " that a float64 or int64 can hold", true
		}
		return "", false
	}
	if fits {
		return "", false
	}
	return mustBe, false
}

// isNullable reports whether encoding/json gives a null decoded into t a value of its own (nil),
// rather than t's zero value.
func isNullable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice:
		return true
	}
	return reflect.PointerTo(t).Implements(jsonUnmarshaler)
}

// decodesNull reports whether a null decoded into t is t's own to read: an interface, or a type
// that decodes itself (json.RawMessage keeps the null as its content). Not a pointer: encoding/json
// sets a pointer to nil on null without asking what it points to (a *time.Time reads it as absent).
func decodesNull(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		return false
	}
	return t.Kind() == reflect.Interface || t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler)
}

// decodedAs is the type whose members a JSON value decoded into t is matched against: t without
// its pointers; nil when t is not known or decodes itself (json.Unmarshaler).
func decodedAs(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return nil
	}
	return t
}

// quotedScalar stands, in membersOf, for the type of a member tagged ",string" that encoding/json
// reads from inside a JSON string: it takes a string (or null, read as absent), nothing else.
type quotedScalar struct{}

var quotedType = reflect.TypeFor[quotedScalar]()

// quotable reports whether encoding/json honours ",string" on a field of type t: a string,
// number or bool, or an unnamed pointer to one (on other types it ignores the option).
func quotable(t reflect.Type) bool {
	if t.Name() == "" && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Float32, reflect.Float64,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	}
	return false
}

// members caches membersOf: a body's types are few and fixed.
var members sync.Map // reflect.Type → map[string]reflect.Type

// membersOf is the JSON member names of struct type t, as encoding/json decodes them (the
// members of embedded structs promoted), each with its field's type; nil when t is no struct.
func membersOf(t reflect.Type) map[string]reflect.Type {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	if m, ok := members.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		// As encoding/json reads fields: `json:"-"` is none ("-," names a member "-"); an
		// embedded struct is promoted unless a tag names it, exported or not.
		embeddedStruct := f.Anonymous && decodedAs(f.Type) != nil && decodedAs(f.Type).Kind() == reflect.Struct
		switch {
		case tag == "-":
			continue
		case f.Anonymous && name == "":
			if inner := membersOf(decodedAs(f.Type)); inner != nil {
				for k, v := range inner {
					if _, own := m[k]; !own {
						m[k] = v
					}
				}
				continue
			}
		case !f.IsExported() && !embeddedStruct:
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
		if slices.Contains(strings.Split(opts, ","), "string") && quotable(f.Type) {
			m[name] = quotedType
		}
	}
	members.Store(t, m)
	return m
}

// describe names the JSON value a Go type holds, for a problem's message (as the API's decoder
// words a value of the wrong type).
func describe(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == quotedType {
		return `a string holding its value (the member is quoted: "5")`
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Array, reflect.Slice:
		return "an array"
	}
	return "an object"
}
