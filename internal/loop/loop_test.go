package loop

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestEveryRunsUntilCancelledAndWaitsForTheCallInProgress(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls, inside atomic.Int32
	third := make(chan struct{})
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Millisecond, 0.1, func(context.Context) {
			inside.Store(1)
			defer inside.Store(0)
			if calls.Add(1) == 3 {
				close(third)
				<-release
			}
		})
	}()
	select {
	case <-third:
	case <-time.After(30 * time.Second):
		t.Fatal("waited 30 s for the third call")
	}
	cancel()
	select {
	case <-done:
		t.Fatal("Every returned while a call was still running")
	default:
	}
	close(release)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("waited 30 s for Every to return after ctx ended")
	}
	if inside.Load() != 0 || calls.Load() != 3 {
		t.Fatalf("calls %d, a call still inside: %v", calls.Load(), inside.Load() == 1)
	}
}

func TestEveryWithNoIntervalOnlyWaits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	Every(ctx, 0, 0, func(context.Context) { t.Fatal("a disabled loop called fn") })
}

func TestWaitStaysWithinTheJitter(t *testing.T) {
	for range 1000 {
		if w := wait(time.Second, 0.1); w < 900*time.Millisecond || w > 1100*time.Millisecond {
			t.Fatalf("wait %v is outside 1s ± 10%%", w)
		}
	}
}
