//go:build !unix

package procs

import "time"

// processCPU is not read on this system: the controller stays off (Enabled).
func processCPU() (time.Duration, bool) { return 0, false }
