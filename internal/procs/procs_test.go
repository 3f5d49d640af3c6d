package procs

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"
)

// A controller driven tick by tick: each step says how much CPU the process used in the
// interval that ends at it, in cores, and the P count the controller must have set after it.
func TestControllerFollowsTheLoad(t *testing.T) {
	cpu := make(chan time.Duration) // each reading of the process's CPU time waits for the test
	var set []int
	c := &Controller{CPU: func() time.Duration { return <-cpu }, Set: func(n int) { set = append(set, n) }}
	tick := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx, tick); close(done) }()

	var used time.Duration
	at := time.Unix(1_000_000, 0)
	cpu <- used // Run's first reading
	tick <- at  // the first tick only starts the first interval
	cpu <- used
	steps := []struct {
		cores float64
		want  int // the last count set: 1, or 0 for the runtime's default
	}{
		{0.2, 1}, {0.79, 1}, // nearly idle: one P
		{0.81, 0},                               // one P nearly saturated: all of them at once
		{0.9, 0}, {0.49, 0}, {0.3, 0}, {0.1, 0}, // three idle intervals: not yet
		{0.6, 0},                               // busy again: the idle run starts over
		{0.4, 0}, {0.4, 0}, {0.4, 0}, {0.4, 1}, // four in a row: one P
		{2.0, 0}, // a burst
	}
	check := func(i int) { // step i is decided once the controller takes the next tick
		if got := set[len(set)-1]; got != steps[i].want {
			t.Fatalf("step %d (%.2f cores): P count %d, want %d (calls %v)", i, steps[i].cores, got, steps[i].want, set)
		}
	}
	for i, s := range steps {
		at = at.Add(Interval)
		used += time.Duration(s.cores * float64(Interval))
		tick <- at
		if i > 0 {
			check(i - 1)
		}
		cpu <- used
	}
	tick <- at.Add(Interval)
	check(len(steps) - 1)
	cpu <- used // an idle interval after the last step: not the fourth in a row
	cancel()
	<-done
	if want := []int{1, 0, 1, 0}; !slices.Equal(set, want) {
		t.Fatalf("calls %v, want %v: one per change (the last already the default, which Run restores when it stops on one P)", set, want)
	}
}

// Run on the real runtime: it starts on one P and gives the default back when it stops.
func TestControllerSetsTheRuntime(t *testing.T) {
	if !Enabled() {
		t.Skip("GOMAXPROCS is set or the machine has one core: the controller is off, as in production")
	}
	def := runtime.GOMAXPROCS(0)
	ctx, cancel := context.WithCancel(context.Background())
	tick := make(chan time.Time)
	done := make(chan struct{})
	go func() { New().Run(ctx, tick); close(done) }()
	tick <- time.Now() // handled only after Run has set one P
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Fatalf("running: GOMAXPROCS %d, want 1", n)
	}
	cancel()
	<-done
	if n := runtime.GOMAXPROCS(0); n != def {
		t.Fatalf("stopped: GOMAXPROCS %d, want the default %d", n, def)
	}
}
