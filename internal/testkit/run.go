package testkit

// This file runs a component's background work (its Run method) for the length of a test.

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Run starts run (a component's Run method) in the background and returns stop, which ends
// run's context and waits for it to return, returning its error. stop may be called more than
// once; t's cleanup calls it too, so that no test leaves background work behind. Cleanups run
// last-registered first, so a component started after its database was opened stops before the
// database closes.
func Run(t testing.TB, run func(ctx context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("testkit: waited 30 s for Run to return after its context ended")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// Await returns what ch receives, failing t, named by what it waited for, unless that comes
// within 30 s (generous, for a busy machine: it bounds a test that went wrong, not a speed).
func Await[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("waited 30 s for %s", what)
		panic("unreachable")
	}
}
