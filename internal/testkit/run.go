package testkit

import (
	"context"
	"testing"
	"time"
)

// Run runs run (a component's Run(ctx) method) until t ends: then it cancels run's context and
// waits for it to return, failing t if it returns an error or takes more than 30 s.
func Run(t testing.TB, run func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("waited 30 s for Run to return after its context ended")
		}
	})
}
