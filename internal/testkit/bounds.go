package testkit

// This file checks admission histories observed from outside the engine (by clients that note
// when they sent a request and when its answer came) against the bounds of DESIGN §3.4. Tests in
// several packages share it, so that each states the bound the same way.

import (
	"fmt"
	"time"
)

// Span is one admitted request as a client saw it: the admission happened between Sent and
// Answered.
type Span struct{ Sent, Answered time.Time }

// TokenBucket checks the token bucket bound over every interval: the admissions known to lie
// within [Sent_i, Answered_j] number at most capacity + ratePerSecond × (Answered_j − Sent_i),
// plus one token for the engine's millisecond clock. It returns the first violation found.
func TokenBucket(adm []Span, capacity, ratePerSecond float64) error {
	for _, first := range adm {
		for _, last := range adm {
			if last.Answered.Before(first.Sent) {
				continue
			}
			n := 0
			for _, a := range adm {
				if !a.Sent.Before(first.Sent) && !a.Answered.After(last.Answered) {
					n++
				}
			}
			window := last.Answered.Sub(first.Sent)
			if bound := capacity + ratePerSecond*window.Seconds() + 1; float64(n) > bound {
				return fmt.Errorf("%d admissions within %v, bound %.2f", n, window, bound)
			}
		}
	}
	return nil
}
