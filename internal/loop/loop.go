// Package loop is the one way Sluice runs periodic background work: started by the owner's
// Run(ctx), stopped by ctx, and finished (the call in progress ends) before Run returns.
package loop

import (
	"context"
	"math/rand/v2"
	"time"
)

// Every calls fn every interval until ctx ends, and returns once the call in progress (if any)
// has returned. jitter spreads instances that share a database: each wait is interval ± that
// fraction of it (0 for none). fn receives ctx, so it can stop early on shutdown. An interval of
// zero or less disables the loop: Every waits for ctx and returns.
func Every(ctx context.Context, interval time.Duration, jitter float64, fn func(ctx context.Context)) {
	if interval <= 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTimer(wait(interval, jitter))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn(ctx)
		t.Reset(wait(interval, jitter))
	}
}

func wait(interval time.Duration, jitter float64) time.Duration {
	spread := int64(float64(interval) * jitter)
	if spread <= 0 {
		return interval
	}
	return interval + time.Duration(rand.Int64N(2*spread+1)-spread)
}
