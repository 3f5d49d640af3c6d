package ui_test

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
)

// TestDefaultKeyCanBeReset: the limit page lists the default (global) key, "(default key)", and
// looks it up with ?key=, and offers its reset like any other key's, as the API's reset does
// with no key: POST …/reset with key= (empty) resets the global key, audited as such (it was 422
// "keys are 1 to 256 bytes"). A form without the key field resets nothing.
func TestDefaultKeyCanBeReset(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	ctx := context.Background()
	if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "api", dailyBucket, nil); err != nil {
		t.Fatal(err)
	}
	e.consume(tn, "api", "", 4)
	e.consume(tn, "api", "alice", 4)
	c := e.login(opEmail, opPassword)
	value := func(key string) float64 {
		t.Helper()
		v, err := e.engine.GetValue(ctx, tn.ID, "api", key)
		if err != nil {
			t.Fatal(err)
		}
		return math.Round(v.Value*1000) / 1000 // the bucket refills a little while the test runs
	}

	// No key named: nothing is reset.
	wantStatus(t, c.post(tpath(tn, "/limits/api/reset"), nil), http.StatusUnprocessableEntity)
	if value("") != 6 {
		t.Fatalf("a reset naming no key reset the default key: %v", value(""))
	}

	// The recent keys' row of the default key has its reset button, which resets it alone.
	page := c.get(tpath(tn, "/limits/api"))
	wantStatus(t, page, http.StatusOK)
	d := page.doc(t)
	if got := text(d, `#key-rows tr[data-key=""] td`); got != "(default key)" {
		t.Fatalf("the default key's row is labelled %q", got)
	}
	action, form := postedFields(t, d, `#key-rows tr[data-key=""] form`)
	res := c.post(action, form)
	wantStatus(t, res, http.StatusSeeOther)
	if value("") != 10 || value("alice") != 6 {
		t.Fatalf("after resetting the default key: default %v, alice %v", value(""), value("alice"))
	}
	after := c.get(res.Header.Get("Location")).doc(t)
	if got := text(after, "#lookup-value"); got != "10" {
		t.Fatalf("after the reset the page shows the default key at %q", got)
	}
	if got := text(after, "#flash"); !strings.Contains(got, "full again") {
		t.Fatalf("flash = %q", got)
	}

	// Its lookup (?key=) offers the reset too.
	e.consume(tn, "api", "", 3)
	lookup := c.get(tpath(tn, "/limits/api?key=")).doc(t)
	if lookup.Find("#lookup-reset").Length() != 1 {
		t.Fatal("the default key's lookup offers no reset")
	}
	action, form = postedFields(t, lookup, `#lookup form`)
	wantStatus(t, c.post(action, form), http.StatusSeeOther)
	if value("") != 10 {
		t.Fatalf("the lookup's reset left the default key at %v", value(""))
	}

	audit := c.get(tpath(tn, "/audit?action=limit.reset")).doc(t)
	if n := audit.Find(`#audit tbody tr .target:contains("api (global key)")`).Length(); n != 2 {
		t.Fatalf("%d limit.reset entries for api (global key), want 2:\n%s", n, audit.Find("#audit").Text())
	}
}
