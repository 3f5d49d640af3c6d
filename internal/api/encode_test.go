package api

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

// The hand-written decision encoder must write exactly what encoding/json writes.
func TestDecisionJSONMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	floats := []float64{0, math.Copysign(0, -1), 1, -1, 9, 0.5, 9.999999999, 1e-6, 9.99e-7, 1e-7, 1.5e-9, -2e-8,
		1e20, 1e21, 1.2345e22, -3e25, 123456789.123, math.MaxFloat64, math.SmallestNonzeroFloat64, 1.0 / 3}
	strs := []string{"", "alice", "api", "user:42", `quo"te`, `back\slash`, "<b>", "a&b", "tab\t", "nul\x00",
		"ümlaut", "\u2028", "\xff", "emoji 🙂", "~!@#$%^*()_+-=[]{}|;':,./?"}
	check := func(v any) {
		t.Helper()
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		var ok bool
		switch r := v.(type) {
		case DecisionResponse:
			got, ok = appendDecision(nil, r)
		case BatchResponse:
			got, ok = appendBatch(nil, r)
		}
		if ok && !bytes.Equal(got, want) {
			t.Fatalf("%#v:\n got %s\nwant %s", v, got, want)
		}
	}
	random := func() DecisionResponse {
		d := DecisionResponse{OK: rng.IntN(2) == 0, Remaining: floats[rng.IntN(len(floats))], Name: strs[rng.IntN(len(strs))]}
		if rng.IntN(2) == 0 {
			ra := rng.Int64N(1<<40) - 5
			d.RetryAfter = &ra
		}
		if rng.IntN(3) > 0 {
			k := strs[rng.IntN(len(strs))]
			d.Key = &k
		}
		if rng.IntN(4) == 0 {
			d.Remaining = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(50)-25))
		}
		return d
	}
	plain := 0
	for range 5000 {
		d := random()
		if _, ok := appendDecision(nil, d); ok {
			plain++
		}
		check(d)
		b := BatchResponse{OK: d.OK, RetryAfter: d.RetryAfter}
		for range rng.IntN(4) {
			b.Results = append(b.Results, random())
		}
		check(b)
	}
	if plain < 500 {
		t.Fatalf("only %d of 5000 responses took the hand-written path", plain)
	}
	// What falls back really falls back.
	for _, d := range []DecisionResponse{{Name: "a<b"}, {Name: "a", Remaining: math.NaN()}} {
		if _, ok := appendDecision(nil, d); ok {
			t.Fatalf("%#v took the hand-written path", d)
		}
	}
}

func FuzzDecisionJSON(f *testing.F) {
	f.Add(true, int64(5), 9.5, "api", "alice", false)
	f.Add(false, int64(-1), 1e-7, "a.b:c", "ü\"<", true)
	f.Fuzz(func(t *testing.T, ok bool, retry int64, remaining float64, name, key string, noKey bool) {
		d := DecisionResponse{OK: ok, RetryAfter: &retry, Remaining: remaining, Name: name, Key: &key}
		if noKey {
			d.Key, d.RetryAfter = nil, nil
		}
		got, handled := appendDecision(nil, d)
		want, err := json.Marshal(d)
		if !handled {
			return
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%#v:\n got %s\nwant %s (%v)", d, got, want, err)
		}
	})
}
