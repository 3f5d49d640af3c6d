// Package procs adapts Go's processor count (GOMAXPROCS) to the load: one P while the process
// is nearly idle, the runtime's default once it is busy.
//
// Why: at low load, which is most of the day for most services, a decision is a chain of
// wake-ups (the client's request, the database's answer, the answer's write). With a second P
// idle, each wake-up also wakes a thread that spins looking for work and sleeps again. On a
// two-core VM at one connection, one P instead of two cut the app's CPU per decision by a
// quarter to a half and its p50 latency by about a quarter, while at 32 connections one P or
// two were level (docs/performance.md). A busy process on a machine with cores to spare wants
// them all, so the count goes back up as soon as one P is nearly saturated.
//
// An operator who sets GOMAXPROCS keeps it: the controller is not started (Enabled).
package procs

import (
	"context"
	"os"
	"runtime"
	"time"
)

// Thresholds, in cores of CPU the process used over one interval (user and system time of all
// its threads, so a thread blocked in a system call without a P counts too).
const (
	// Busy: on one P, an interval above this (most of that P) restores the default at once.
	Busy = 0.8
	// Idle: on the default, IdleIntervals in a row below this return to one P. It is below
	// Busy, so a steady load cannot flip the count back and forth: a load that leaves one P
	// above Busy costs at least as much on more Ps (one P costs no more CPU for the same work),
	// so it stays above Idle there.
	Idle = 0.7
	// IdleIntervals in a row (5 s): a busy process keeps its Ps through a lull, and a load near
	// the thresholds flips the count (a stop-the-world pause each way) at most every few seconds.
	IdleIntervals = 20
	// Interval between looks at the process's CPU time.
	Interval = 250 * time.Millisecond
)

// Controller moves the P count between one and the default. Tests give it functions of their own.
type Controller struct {
	CPU func() (time.Duration, bool) // the process's CPU time so far; false when it cannot be read
	Now func() time.Time             // the time of that reading
	Set func(n int)                  // applies a P count; 0 means the runtime's default

	one    bool          // on one P
	idle   int           // intervals in a row below Idle, on the default
	cpu    time.Duration // the last reading, and when it was taken (zero: none yet)
	readAt time.Time
}

// Enabled reports whether the count is the controller's to adapt: GOMAXPROCS is not set, the
// runtime's default is more than one P, and the system tells a process its CPU time (Unix).
func Enabled() bool {
	_, ok := processCPU()
	return ok && os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) > 1
}

// New is the controller of this process.
func New() *Controller {
	return &Controller{CPU: processCPU, Now: time.Now, Set: setProcs}
}

// Run starts the process on one P and adapts the count at every tick until ctx ends (or tick
// closes); it then restores the default. Ticks only wake it: each interval is measured between
// two readings of the CPU time and the clock, taken together, however late a tick is handled.
func (c *Controller) Run(ctx context.Context, tick <-chan time.Time) {
	c.one, c.idle, c.readAt = true, 0, time.Time{}
	c.Set(1)
	defer func() {
		if c.one {
			c.Set(0)
		}
	}()
	c.observe()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-tick:
			if !ok {
				return
			}
		}
		if n, change := c.observe(); change {
			c.Set(n)
		}
	}
}

// observe reads the CPU time and the clock, and decides on the interval since the last
// reading: the P count to set (1, or 0 for the default) when it changes. An unreadable
// reading, or one that does not move forward, starts a new interval and decides nothing.
func (c *Controller) observe() (n int, change bool) {
	cpu, ok := c.CPU()
	at := c.Now()
	last, lastAt := c.cpu, c.readAt
	c.cpu, c.readAt = cpu, at
	if !ok {
		c.readAt = time.Time{}
		return 0, false
	}
	if lastAt.IsZero() || !at.After(lastAt) || cpu < last {
		return 0, false
	}
	cores := float64(cpu-last) / float64(at.Sub(lastAt))
	switch {
	case c.one:
		if cores > Busy {
			c.one = false
			return 0, true
		}
	case cores >= Idle:
		c.idle = 0
	default:
		c.idle++
		if c.idle >= IdleIntervals {
			c.one, c.idle = true, 0
			return 1, true
		}
	}
	return 0, false
}

// setProcs applies n Ps; 0 restores the runtime's default (and its automatic updates, which
// follow a container's CPU limit).
func setProcs(n int) {
	if n == 0 {
		runtime.SetDefaultGOMAXPROCS()
		return
	}
	runtime.GOMAXPROCS(n)
}
