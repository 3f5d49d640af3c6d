package apperr

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestCopiesStillMatchTheirSentinel(t *testing.T) {
	sentinel := New(NotFound, "no such thing")
	wrapped := fmt.Errorf("store: %w", sentinel.Wrap(errors.New("driver said no")).WithField("id"))
	if !errors.Is(wrapped, sentinel) {
		t.Fatal("a wrapped copy no longer matches its sentinel")
	}
	if errors.Is(wrapped, New(NotFound, "no such thing")) {
		t.Fatal("a copy matches another sentinel of the same code")
	}
	got := From(wrapped)
	if got.Field != "id" || got.Status() != http.StatusNotFound || got.Message != "no such thing" {
		t.Fatalf("From = %+v", got)
	}
	if sentinel.Field != "" || sentinel.Err != nil {
		t.Fatal("making a copy changed the sentinel")
	}
}

func TestFromClassifiesForeignErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code Code
	}{
		{errors.New("boom"), Internal},
		{context.DeadlineExceeded, Unavailable},
		{fmt.Errorf("tx: %w", context.Canceled), Unavailable},
		{Invalid("count", "count must be positive"), InvalidRequest},
	} {
		if got := From(tc.err); got.Code != tc.code {
			t.Errorf("From(%v).Code = %s, want %s", tc.err, got.Code, tc.code)
		}
	}
	if From(nil) != nil {
		t.Fatal("From(nil) is not nil")
	}
	if msg := From(errors.New("password=hunter2")).Message; msg != "internal error" {
		t.Fatalf("an internal error leaks its text: %q", msg)
	}
}

func TestEveryCodeHasAStatusAndATitle(t *testing.T) {
	for code, e := range codes {
		if e.status < 400 || e.title == "" {
			t.Errorf("%s: status %d title %q", code, e.status, e.title)
		}
	}
	if Code("nope").Status() != http.StatusInternalServerError {
		t.Fatal("an unknown code is not a 500")
	}
}

func TestSentence(t *testing.T) {
	if got := Invalid("name", "names are 1 to 128 characters").Sentence(); got != "Names are 1 to 128 characters." {
		t.Fatalf("Sentence = %q", got)
	}
}

func TestFieldsReportsEveryJoinedFieldError(t *testing.T) {
	err := fmt.Errorf("store: %w", errors.Join(Invalid("email", "bad email"), Invalid("password", "too short")))
	got := Fields(err)
	if got["email"] != "Bad email." || got["password"] != "Too short." || len(got) != 2 {
		t.Fatalf("Fields = %v", got)
	}
	if got := Fields(New(Conflict, "taken").WithField("email")); got["email"] != "Taken." {
		t.Fatalf("Fields of one error = %v", got)
	}
	if got := Fields(nil); len(got) != 0 {
		t.Fatalf("Fields(nil) = %v", got)
	}
}

// TestAtPutsAProblemsFieldsUnderTheItemsPath: the copy names every field under the prefix and is
// still the sentinel it came from; the original is unchanged; no prefix or no field, no change.
func TestAtPutsAProblemsFieldsUnderTheItemsPath(t *testing.T) {
	base := &Error{Code: InvalidConfig, Message: "bad", Field: "rate", Fields: []FieldError{{Field: "rate"}, {Field: "period"}}}
	got := From(At("limits[1].config.", fmt.Errorf("wrapped: %w", base)))
	if got.Field != "limits[1].config.rate" || got.Fields[0].Field != "limits[1].config.rate" || got.Fields[1].Field != "limits[1].config.period" {
		t.Fatalf("At: %+v", got)
	}
	if base.Field != "rate" || base.Fields[1].Field != "period" {
		t.Fatalf("the original changed: %+v", base)
	}
	notFound := New(NotFound, "no such limit")
	if named := At("limits[0].", notFound.WithField("name")); !errors.Is(named, notFound) || From(named).Field != "limits[0].name" {
		t.Fatalf("At of a sentinel's copy: %+v", named)
	}
	if At("limits[0].", notFound) != error(notFound) || At("", base) != error(base) {
		t.Fatal("At changed a problem without a field, or with no prefix")
	}
}

// TestQuotaReachedCountsInGoodEnglish: "at most 1 override", not "1 overrides".
func TestQuotaReachedCountsInGoodEnglish(t *testing.T) {
	for _, c := range []struct {
		what string
		max  int64
		want string
	}{
		{"overrides", 1, "at most 1 override;"},
		{"API keys", 1, "at most 1 API key;"},
		{"limits", 2, "at most 2 limits;"},
		{"limits", 0, "at most 0 limits;"},
	} {
		if got := QuotaReached(c.what, c.max).Message; !strings.Contains(got, c.want) {
			t.Errorf("QuotaReached(%q, %d): %q, want it to say %q", c.what, c.max, got, c.want)
		}
	}
}
