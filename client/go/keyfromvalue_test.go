package sluice_test

import (
	"context"
	"net/http"
	"testing"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// user is an authenticated user whose String has a pointer receiver: a nil *user stored in the
// context (an authentication middleware that found no user) cannot be asked for it.
type user struct{ id string }

func (u *user) String() string { return u.id }

type (
	namedID    int64
	namedEmail string
	namedUint  uint16
)

// TestANilUserIsNoUser: a nil pointer (or a typed nil of another kind) stored as the user is a
// request without one (400), not a panic of the key function.
func TestANilUserIsNoUser(t *testing.T) {
	c := newClient(t)
	name := limitName(t, "mw")
	putLimit(t, c, name, 5)
	next := &okHandler{}
	limited := sluice.Middleware(c, name, sluice.WithKeyFunc(sluice.KeyByContextValue(userKey{})))(next)
	for _, v := range []any{(*user)(nil), (fmtStringer)(nil), []byte(nil), map[string]string(nil)} {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			limited.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, v)))
		})
		w := serve(h, "198.51.100.7:1")
		if p := decodeProblem(t, w); w.Code != http.StatusBadRequest || p["code"] != sluice.CodeInvalidRequest {
			t.Errorf("the user %#v: %d %v, want 400 invalid_request (no user)", v, w.Code, p)
		}
	}
	if next.calls != 0 {
		t.Fatalf("the handler ran %d times for requests without a user", next.calls)
	}
	if got, err := sluice.KeyFromValue(&user{id: "u-1"}, "user"); err != nil || got != "u-1" {
		t.Fatalf("a *user: %q, %v", got, err)
	}
}

// fmtStringer is an interface type whose nil value the test stores.
type fmtStringer interface{ String() string }

// TestKeyFromValueTakesNamedStringsAndIntegers: a value of a named type whose kind is a string or
// an integer is keyed by its text, as the README's "a string, a fmt.Stringer or an integer" says
// (a type UserID int64 was refused: every request 400).
func TestKeyFromValueTakesNamedStringsAndIntegers(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{{namedID(-42), "-42"}, {namedEmail("ann@example.com"), "ann@example.com"}, {namedUint(7), "7"}, {userID(3), "user-3"}} {
		if got, err := sluice.KeyFromValue(tc.v, "user"); err != nil || got != tc.want {
			t.Errorf("%T %#v: %q, %v; want %q", tc.v, tc.v, got, err, tc.want)
		}
	}
	if got, err := sluice.KeyFromValue(namedEmail(""), "user"); err == nil {
		t.Errorf("an empty namedEmail: key %q, want an error", got)
	}
}
