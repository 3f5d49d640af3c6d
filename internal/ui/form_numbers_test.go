package ui_test

import (
	"context"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"testing"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// extremeAmounts are rates, capacities and maxReserved values the API accepts, from the
// smallest positive float64 to MaxAmount, with some whose plain decimal form is long.
var extremeAmounts = []float64{math.SmallestNonzeroFloat64, 2.2250738585072014e-308, 1e-39, 1.2345678901234567e-20, 0.1, 1.0 / 3,
	123456789.123, 999999999999999.9, 1e15}

// TestEditFormsSaveExtremeNumbersUnchanged: the edit form of a limit, and of an override, whose
// numbers are any the API accepts saves unchanged to the identical definition: each number is
// filled in a form that the form's own parser reads back exactly (a rate of 1e-39 written out
// in plain decimals is 41 characters, which the parser refused as "must be a number").
func TestEditFormsSaveExtremeNumbersUnchanged(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	ctx := context.Background()
	c := e.login(opEmail, opPassword)
	for i, v := range extremeAmounts {
		name := "l" + strconv.Itoa(i)
		v := v
		def := limiter.Definition{Kind: limiter.TokenBucket, Rate: v, Period: 60_000, Capacity: &v, MaxReserved: &v}
		if _, _, err := e.engine.PutDefinition(ctx, tn.ID, name, def, nil); err != nil {
			t.Fatalf("%g: %v", v, err)
		}
		before, err := e.engine.GetDefinition(ctx, tn.ID, name)
		if err != nil {
			t.Fatal(err)
		}
		edit := c.get(tpath(tn, "/limits/"+name+"/edit"))
		wantStatus(t, edit, http.StatusOK)
		action, form := postedFields(t, edit.doc(t), "#limit-form")
		if res := c.post(action, form); res.StatusCode != http.StatusSeeOther {
			t.Errorf("%g: saving the unchanged limit form (%v): status %d, errors %q %q %q", v, form, res.StatusCode,
				text(res.doc(t), "#rate-error"), text(res.doc(t), "#capacity-error"), text(res.doc(t), "#maxReserved-error"))
			continue
		}
		after, err := e.engine.GetDefinition(ctx, tn.ID, name)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(after.Definition, before.Definition) {
			t.Errorf("%g: saving the unchanged limit form made %+v of %+v", v, after.Definition, before.Definition)
		}

		// An override of the limit with the same numbers.
		o := limiter.Override{Match: "k:*", Rate: &v, Capacity: &v, MaxReserved: &v}
		if _, _, err := e.engine.PutOverride(ctx, tn.ID, name, o, nil); err != nil {
			t.Fatalf("%g: override: %v", v, err)
		}
		obefore, err := e.engine.GetOverride(ctx, tn.ID, name, "k:*")
		if err != nil {
			t.Fatal(err)
		}
		edit = c.get(tpath(tn, "/limits/"+name+"/overrides/edit?match="+url.QueryEscape("k:*")))
		wantStatus(t, edit, http.StatusOK)
		action, form = postedFields(t, edit.doc(t), "#override-form")
		if res := c.post(action, form); res.StatusCode != http.StatusSeeOther {
			t.Errorf("%g: saving the unchanged override form (%v): status %d, errors %q %q %q", v, form, res.StatusCode,
				text(res.doc(t), "#rate-error"), text(res.doc(t), "#capacity-error"), text(res.doc(t), "#maxReserved-error"))
			continue
		}
		oafter, err := e.engine.GetOverride(ctx, tn.ID, name, "k:*")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(oafter.Override, obefore.Override) {
			t.Errorf("%g: saving the unchanged override form made %+v of %+v", v, oafter.Override, obefore.Override)
		}
	}
}

// TestLimitFormTakesExponentNotation: a number typed with an exponent is read as the API reads
// it.
func TestLimitFormTakesExponentNotation(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)
	wantStatus(t, c.post(tpath(tn, "/limits"), url.Values{"name": {"tiny"}, "kind": {"token bucket"}, "rate": {"1e-39"}, "period": {"1m"},
		"capacity": {"2.5E+3"}, "maxReserved": {"1e15"}}), http.StatusSeeOther)
	d, err := e.engine.GetDefinition(context.Background(), tn.ID, "tiny")
	if err != nil || d.Definition.Rate != 1e-39 || d.Definition.Capacity == nil || *d.Definition.Capacity != 2500 ||
		d.Definition.MaxReserved == nil || *d.Definition.MaxReserved != 1e15 {
		t.Fatalf("stored %+v, %v", d.Definition, err)
	}
}
