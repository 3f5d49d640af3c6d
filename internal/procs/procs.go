// Package procs adapts Go's processor count (GOMAXPROCS) to the load: one P while the process
// is nearly idle, the runtime's default once it is busy.
//
// Why: at low load, which is most of the day for most services, a decision is a chain of
// wake-ups (the client's request, the database's answer, the answer's write). With a second P
// idle, each wake-up also wakes a thread that spins looking for work and sleeps again. On a
// two-core VM at one connection, one P instead of two cut the app's CPU per decision by a
// quarter to a half and its p50 latency by a tenth to a fifth, while at 32 connections one P or
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

// Thresholds, in cores of CPU the process used over one interval.
const (
	// Busy: at one P, an interval above this (most of that P) restores the default count at once.
	Busy = 0.8
	// Idle: at more than one P, IdleIntervals intervals in a row below this return to one P. A
	// process under half a core is mostly waiting; measured at one connection, Sluice used 0.3
	// to 0.5 cores with two Ps (durable PostgreSQL) and less with one.
	Idle = 0.5
	// IdleIntervals in a row, so that a short lull in a busy process does not flip the count.
	IdleIntervals = 4
	// Interval between looks at the process's CPU time.
	Interval = 250 * time.Millisecond
)

// Controller moves the P count between one and the default. Tests give it CPU and Set of their own.
type Controller struct {
	CPU func() time.Duration // the process's CPU time so far, user and system
	Set func(n int)          // applies a P count; 0 means the runtime's default
}

// Enabled reports whether the count is the controller's to adapt: GOMAXPROCS is not set, the
// runtime's default is more than one P, and the system tells a process its CPU time (Unix).
func Enabled() bool {
	_, ok := processCPU()
	return ok && os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) > 1
}

// New is the controller of this process.
func New() *Controller {
	return &Controller{CPU: func() time.Duration { t, _ := processCPU(); return t }, Set: setProcs}
}

// Run starts the process on one P and adapts the count at every tick until ctx ends; it then
// restores the default. Each tick's time is the end of an interval (time.Ticker's).
func (c *Controller) Run(ctx context.Context, tick <-chan time.Time) {
	one := true
	c.Set(1)
	defer func() {
		if one {
			c.Set(0)
		}
	}()
	lastCPU, lastAt, idle := c.CPU(), time.Time{}, 0
	for {
		var at time.Time
		select {
		case <-ctx.Done():
			return
		case at = <-tick:
		}
		cpu := c.CPU()
		if !lastAt.IsZero() && at.After(lastAt) {
			cores := float64(cpu-lastCPU) / float64(at.Sub(lastAt))
			var change bool
			one, idle, change = next(one, idle, cores)
			if change {
				if one {
					c.Set(1)
				} else {
					c.Set(0)
				}
			}
		}
		lastCPU, lastAt = cpu, at
	}
}

// next is the decision after one interval in which the process used cores of CPU: whether it
// runs on one P, how many idle intervals in a row it has seen at more than one, and whether
// that is a change.
func next(one bool, idle int, cores float64) (bool, int, bool) {
	if one {
		return cores <= Busy, 0, cores > Busy
	}
	if cores >= Idle {
		return false, 0, false
	}
	if idle+1 >= IdleIntervals {
		return true, 0, true
	}
	return false, idle + 1, false
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
