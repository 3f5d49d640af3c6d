package apperr

import "errors"

// Fields returns the client-safe sentence of every field error in err's tree (errors.Join
// reports several problems of one form at once), by field name. An error about no field is
// under "".
func Fields(err error) map[string]string {
	out := map[string]string{}
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *Error:
			if _, seen := out[e.Field]; !seen {
				out[e.Field] = e.Sentence()
			}
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
		default:
			if next := errors.Unwrap(err); next != nil {
				walk(next)
			} else if _, seen := out[""]; !seen {
				out[""] = From(err).Sentence()
			}
		}
	}
	walk(err)
	return out
}
