package algo

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Nested budgets. A definition may name parents: other limits that every decision on it also
// spends, each under a key filled from the decision's attributes ("org:{org}" with
// {"org": "acme"} is "org:acme"). A parent may have parents of its own, MaxParentDepth
// generations at most, and no limit may be its own ancestor. The engine decides a limit and all
// of its ancestors as one all-or-nothing batch.

// Parent is one parent budget of a definition: the parent limit's name and the template of the
// key it is spent under.
type Parent struct {
	Name string
	Key  string
}

// Bounds on nested budgets.
const (
	MaxParents      = 8  // parents of one definition
	MaxParentDepth  = 4  // generations of ancestors above a limit (parents, their parents, ...)
	MaxAttributes   = 16 // attributes of one decision
	maxAttrValueLen = MaxKeyBytes
)

var attrNameRE = regexp.MustCompile(`^[A-Za-z0-9_]{1,64}$`)

// ValidAttributeName reports whether s can name an attribute (and a {placeholder}).
func ValidAttributeName(s string) bool { return attrNameRE.MatchString(s) }

// parseTemplate splits a key template into literal text and placeholders; placeholders holds
// the attribute names in order. A "{" always opens a placeholder and a "}" always closes one:
// there is no escape, so a key template cannot contain literal braces.
func parseTemplate(t string) (literals []string, placeholders []string, err string) {
	rest := t
	for {
		i := strings.IndexAny(rest, "{}")
		if i < 0 {
			return append(literals, rest), placeholders, ""
		}
		if rest[i] == '}' {
			return nil, nil, `has a "}" that closes no placeholder (braces only mark {attribute} placeholders)`
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return nil, nil, `has a "{" without its closing "}"`
		}
		name := rest[i+1 : i+j]
		if !ValidAttributeName(name) {
			return nil, nil, fmt.Sprintf("placeholder {%s}: attribute names are 1 to 64 characters of [A-Za-z0-9_]", name)
		}
		literals = append(literals, rest[:i])
		placeholders = append(placeholders, name)
		rest = rest[i+j+1:]
	}
}

// parentProblems checks a definition's parents (the graph is checked by CheckParentGraph).
func parentProblems(ps []Parent) []FieldError {
	var fe []FieldError
	if len(ps) > MaxParents {
		return []FieldError{{"parents", fmt.Sprintf("at most %d parents", MaxParents)}}
	}
	for i, p := range ps {
		f := fmt.Sprintf("parents[%d]", i)
		if !ValidName(p.Name) {
			fe = append(fe, FieldError{f + ".name", "must name a limit: ^[A-Za-z0-9_.:-]{1,128}$, not \".\" or \"..\""})
		}
		switch {
		case p.Key == "" || len(p.Key) > MaxKeyBytes || !utf8.ValidString(p.Key) || strings.ContainsRune(p.Key, 0):
			fe = append(fe, FieldError{f + ".key", "must be a key template of 1 to 256 bytes of UTF-8 without NUL, such as \"org:{org}\""})
		default:
			if literals, _, msg := parseTemplate(p.Key); msg != "" {
				fe = append(fe, FieldError{f + ".key", msg})
			} else if ReservedKey(literals[0]) {
				fe = append(fe, FieldError{f + ".key", ReservedKeyRule})
			}
		}
		for _, q := range ps[:i] {
			if q.Name == p.Name && q.Key == p.Key {
				fe = append(fe, FieldError{f, "repeats an earlier parent"})
				break
			}
		}
	}
	return fe
}

// CheckAttributes validates a decision's attributes; field names are "attributes.<name>".
func CheckAttributes(attrs map[string]string) error {
	if len(attrs) > MaxAttributes {
		return InvalidRequest("attributes", fmt.Sprintf("at most %d attributes", MaxAttributes))
	}
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		v := attrs[name]
		if !ValidAttributeName(name) {
			return InvalidRequest("attributes", fmt.Sprintf("attribute name %q: names are 1 to 64 characters of [A-Za-z0-9_]", name))
		}
		if v == "" || len(v) > maxAttrValueLen || !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return InvalidRequest("attributes."+name, "attribute values are 1 to 256 bytes of UTF-8 without NUL characters").because(ErrBadAttributes)
		}
	}
	return nil
}

// FillKey fills a parent's key template from a decision's attributes. A placeholder without an
// attribute is an invalid_request naming "attributes.<name>"; a filled key that is not a valid
// key (too long), or that lands under a reserved prefix (a template "{org}" filled with
// "session:…"), names "attributes".
func FillKey(child string, p Parent, attrs map[string]string) (string, error) {
	literals, names, msg := parseTemplate(p.Key)
	if msg != "" { // stored definitions were validated; only a damaged row gets here
		return "", &ValidationError{Code: CodeInvalidConfig, Fields: []FieldError{{"parents", "key template " + msg}}}
	}
	var b strings.Builder
	for i, lit := range literals {
		b.WriteString(lit)
		if i < len(names) {
			v, ok := attrs[names[i]]
			if !ok {
				return "", InvalidRequest("attributes."+names[i],
					fmt.Sprintf("is required: limit %q spends parent %q under the key %q", child, p.Name, p.Key)).because(ErrBadAttributes)
			}
			b.WriteString(v)
		}
	}
	key := b.String()
	var problem string
	switch {
	case !ValidKey(key):
		problem = fmt.Sprintf("the key of parent %q filled from the attributes is not a valid key (%s)", p.Name, KeyRule)
	case ReservedKey(key):
		problem = fmt.Sprintf("the key of parent %q filled from the attributes is reserved (%s)", p.Name, ReservedKeyRule)
	default:
		return key, nil
	}
	return "", InvalidRequest("attributes", problem).because(ErrBadAttributes)
}

// CheckParentGraph checks a tenant's parent graph (each limit's parent names; a name without an
// entry has no parents): no limit may be its own ancestor, and no chain of parents above a limit
// may be longer than MaxParentDepth. The problem names the chain, as an invalid_config of field
// "parents"; the walk begins at from (the limit being changed), so a cycle reads from there.
func CheckParentGraph(parents map[string][]string, from string) error {
	const (
		unvisited = iota
		visiting
		done
	)
	state := map[string]int{}
	height := map[string]int{}
	var path []string
	var problem string
	var visit func(n string) int
	visit = func(n string) int {
		switch state[n] {
		case done:
			return height[n]
		case visiting:
			i := slices.Index(path, n)
			problem = "a limit cannot be its own ancestor: " + strings.Join(append(slices.Clone(path[i:]), n), " → ")
			return 0
		}
		state[n] = visiting
		path = append(path, n)
		h := 0
		for _, p := range parents[n] {
			h = max(h, 1+visit(p))
			if problem != "" {
				return 0
			}
		}
		if h > MaxParentDepth && problem == "" {
			problem = fmt.Sprintf("at most %d generations of parents above a limit: %s", MaxParentDepth, longestChain(n, parents, height))
		}
		path = path[:len(path)-1]
		state[n], height[n] = done, h
		return h
	}
	for _, n := range append([]string{from}, slices.Sorted(maps.Keys(parents))...) {
		if visit(n); problem != "" {
			return &ValidationError{Code: CodeInvalidConfig, Fields: []FieldError{{"parents", problem}}}
		}
	}
	return nil
}

// longestChain spells the longest chain of parents above n (heights of the parents known).
func longestChain(n string, parents map[string][]string, height map[string]int) string {
	chain := []string{n}
	for len(parents[n]) > 0 {
		best := parents[n][0]
		for _, p := range parents[n] {
			if height[p] > height[best] {
				best = p
			}
		}
		chain = append(chain, best)
		n = best
	}
	return strings.Join(chain, " → ")
}
