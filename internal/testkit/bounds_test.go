package testkit

import (
	"testing"
	"time"
)

func TestTokenBucket(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	at := func(ms int) Span {
		return Span{t0.Add(time.Duration(ms) * time.Millisecond), t0.Add(time.Duration(ms+1) * time.Millisecond)}
	}
	// capacity 2, 10 per second: 3 at once is the most (2 + the clock's token), then one per 100 ms.
	ok := []Span{at(0), at(0), at(0), at(100), at(200)}
	if err := TokenBucket(ok, 2, 10); err != nil {
		t.Fatalf("within the bound: %v", err)
	}
	over := append(ok, at(200), at(201))
	if err := TokenBucket(over, 2, 10); err == nil {
		t.Fatal("7 admissions in 202 ms with capacity 2 at 10/s passed")
	}
	if err := TokenBucket(nil, 0, 0); err != nil {
		t.Fatal(err)
	}
}
