package limiter_test

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// The document says period "must not be given" for a concurrency limit (and is at least 1), as
// for a quota; a period of 0 given for one is accepted.
func TestAConcurrencyLimitRefusesAPeriod(t *testing.T) {
	rate, ttl, zero := 2.0, int64(1000), int64(0)
	_, err := limiter.Spec{Kind: "concurrency", Rate: &rate, LeaseTTL: &ttl, Period: &zero}.ToDefinition()
	if err == nil {
		t.Fatal(`{"kind":"concurrency","rate":2,"leaseTtl":1000,"period":0} was accepted; the document says period must not be given`)
	}
	one := int64(1000)
	if _, err := (limiter.Spec{Kind: "quota", Rate: &rate, Period: &one}).ToDefinition(); err == nil {
		t.Fatal("quota with period accepted")
	}
}
