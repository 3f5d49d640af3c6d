package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CPU time from /proc, to report what each decision costs the app and PostgreSQL separately.
// /proc/PID/stat counts in clock ticks of USER_HZ, which Linux fixes at 100 per second.
const ticksPerSecond = 100

// procTicks reads utime, stime, cutime and cstime (fields 14–17) of one process.
func procTicks(pid int) (own, children int64, ppid int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	// The command name (field 2) is in parentheses and may contain spaces: split after it.
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[end+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	n := func(field int) int64 { v, _ := strconv.ParseInt(f[field-3], 10, 64); return v }
	return n(14) + n(15), n(16) + n(17), int(n(4)), nil
}

// cpuSeconds is a process's CPU time so far (user + system), 0 when it cannot be read.
func cpuSeconds(pid int) float64 {
	own, _, _, err := procTicks(pid)
	if err != nil {
		return 0
	}
	return float64(own) / ticksPerSecond
}

// postgresCPUSeconds is the CPU time of a PostgreSQL server so far: its postmaster, the backends
// and helpers running now, and those that have exited (the postmaster reaps them, which adds
// their time to its children's). 0 when pid is 0.
func postgresCPUSeconds(pid int) float64 {
	if pid == 0 {
		return 0
	}
	own, children, _, err := procTicks(pid)
	if err != nil {
		return 0
	}
	total := own + children
	entries, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, e := range entries {
		child, err := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		if err != nil {
			continue
		}
		if o, _, ppid, err := procTicks(child); err == nil && ppid == pid {
			total += o
		}
	}
	return float64(total) / ticksPerSecond
}

// machineTicks reads the machine's CPU time so far from /proc/stat, all cores together: idle
// (idle and iowait: a core with nothing to run) and the total. Their change over a run is the
// share of the machine's cores left idle, which tells a ceiling in the app (cores idle while
// requests wait) from a saturated machine. Zeros when /proc/stat cannot be read.
func machineTicks() (idle, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // "cpu" user nice system idle iowait irq softirq steal guest guest_nice
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	// guest and guest_nice are already counted in user and nice: stop at steal.
	for i, s := range f[1:9] {
		v, _ := strconv.ParseInt(s, 10, 64)
		total += v
		if i == 3 || i == 4 {
			idle += v
		}
	}
	return idle, total
}

// idleShare is the share of the machine's CPU time left idle between two machineTicks readings
// (0 to 1; 0 when nothing was counted).
func idleShare(idleBefore, totalBefore, idleAfter, totalAfter int64) float64 {
	if totalAfter <= totalBefore {
		return 0
	}
	return float64(idleAfter-idleBefore) / float64(totalAfter-totalBefore)
}
