package procs

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// readings is a fake process: its CPU time and clock, moved by the test (while Run may read
// them: hence the lock).
type readings struct {
	mu  sync.Mutex
	cpu time.Duration
	at  time.Time
	bad bool // the next reading fails
}

func (r *readings) controller(one bool) *Controller {
	r.at = time.Unix(1_000_000, 0)
	return &Controller{
		CPU: func() (time.Duration, bool) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.bad {
				return 0, false // what getrusage's failure would leave
			}
			return r.cpu, true
		},
		Now: func() time.Time { r.mu.Lock(); defer r.mu.Unlock(); return r.at },
		Set: func(int) { panic("observe decides; it never sets") },
		one: one,
	}
}

// spend moves the fake process one interval on, having used cores of CPU in it.
func (r *readings) spend(cores float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at = r.at.Add(Interval)
	r.cpu += time.Duration(cores * float64(Interval))
}

// expect observes one reading and checks the decision: -1 for none, else the count set.
func expect(t *testing.T, c *Controller, what string, want int) {
	t.Helper()
	n, change := c.observe()
	switch {
	case want < 0 && change:
		t.Fatalf("%s: set %d Ps, want no change", what, n)
	case want >= 0 && !change:
		t.Fatalf("%s: no change, want %d Ps set (0: the default)", what, want)
	case want >= 0 && n != want:
		t.Fatalf("%s: set %d Ps, want %d (0: the default)", what, n, want)
	}
}

func TestObserveFollowsTheLoad(t *testing.T) {
	var r readings
	c := r.controller(true)
	r.cpu = time.Hour // a process that has run a long time: the first reading only starts an interval
	expect(t, c, "the first reading", -1)

	for _, cores := range []float64{0.2, 0.5, Busy} {
		r.spend(cores)
		expect(t, c, "one P, nearly idle", -1)
	}
	r.spend(Busy + 0.01)
	expect(t, c, "one P nearly saturated", 0)

	r.spend(Idle) // not below it: not idle
	expect(t, c, "the default, at Idle", -1)
	for i := range IdleIntervals - 1 {
		r.spend(Idle - 0.01)
		expect(t, c, "the default, idle interval "+strconv.Itoa(i+1), -1)
	}
	r.spend(Idle + 0.05) // busy again: the idle run starts over
	expect(t, c, "the default, busy again", -1)
	for i := range IdleIntervals - 1 {
		r.spend(0.1)
		expect(t, c, "the default, idle interval "+strconv.Itoa(i+1)+" after the lull", -1)
	}
	r.spend(0.1)
	expect(t, c, "the default, the last idle interval", 1)

	r.spend(3)
	expect(t, c, "a burst", 0)
}

func TestObserveSkipsBadReadings(t *testing.T) {
	var r readings
	c := r.controller(true)
	expect(t, c, "the first reading", -1)

	r.spend(2)
	r.bad = true
	expect(t, c, "an unreadable CPU time", -1)
	r.bad = false
	r.spend(0)
	expect(t, c, "the reading after it, which only starts an interval", -1)

	r.cpu -= time.Second
	r.spend(0)
	expect(t, c, "a CPU time that went back", -1)

	r.cpu += time.Second // the clock stands still
	expect(t, c, "a clock that did not move", -1)

	r.spend(0.9)
	expect(t, c, "a good interval again", 0)

	// On the default, the first reading must not count as an idle interval either.
	c = r.controller(false)
	expect(t, c, "the first reading on the default", -1)
	for i := range IdleIntervals - 1 {
		r.spend(0)
		expect(t, c, "idle interval "+strconv.Itoa(i+1), -1)
	}
	r.spend(0)
	expect(t, c, "the last idle interval", 1)
}

// Run starts on one P, follows observe at each tick, and restores the default when it stops
// on one P (ctx ended or the ticks closed).
func TestRunSetsAndRestores(t *testing.T) {
	var r readings
	c := r.controller(true)
	sets := make(chan int, 8)
	c.Set = func(n int) { sets <- n }
	want := func(what string, n int) {
		t.Helper()
		select {
		case got := <-sets:
			if got != n {
				t.Fatalf("%s: set %d Ps, want %d (0: the default)", what, got, n)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: waited a minute for Run to set %d Ps", what, n)
		}
	}
	tick := make(chan time.Time)
	send := func(what string) {
		t.Helper()
		select {
		case tick <- time.Time{}:
		case <-time.After(time.Minute):
			t.Fatalf("waited a minute for Run to take the tick of %s", what)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx, tick); close(done) }()
	want("start", 1)
	send("the first interval") // taken only once Run has made its first reading
	r.spend(1.5)
	send("a busy interval")
	want("busy", 0)
	cancel()
	<-done
	if len(sets) != 0 {
		t.Fatalf("Run set %d Ps when it stopped on the default: nothing to restore", <-sets)
	}

	tick = make(chan time.Time)
	done = make(chan struct{})
	go func() { c.Run(context.Background(), tick); close(done) }()
	want("restart", 1)
	close(tick)
	want("ticks closed on one P", 0)
	<-done
}

// Run on the real runtime: it starts on one P and gives the default back when it stops.
// (The process's own readings would make the test depend on its CPU use between two ticks.)
func TestControllerSetsTheRuntime(t *testing.T) {
	if !Enabled() {
		t.Skip("GOMAXPROCS is set or the machine has one core: the controller is off, as in production")
	}
	before := runtime.GOMAXPROCS(0) // go test -cpu N sets N: given back after
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	runtime.SetDefaultGOMAXPROCS()
	def := runtime.GOMAXPROCS(0)
	ctx, cancel := context.WithCancel(context.Background())
	tick := make(chan time.Time)
	done := make(chan struct{})
	var r readings
	fake := r.controller(true)
	c := New() // the real runtime's count, with an idle fake process's readings
	c.CPU, c.Now = fake.CPU, fake.Now
	go func() { c.Run(ctx, tick); close(done) }()
	select {
	case tick <- time.Now(): // taken only after Run has set one P
	case <-time.After(time.Minute):
		t.Fatal("waited a minute for Run to take a tick")
	}
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Fatalf("running: GOMAXPROCS %d, want 1", n)
	}
	cancel()
	<-done
	if n := runtime.GOMAXPROCS(0); n != def {
		t.Fatalf("stopped: GOMAXPROCS %d, want the default %d", n, def)
	}
}
