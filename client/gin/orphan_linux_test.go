package sluicegin_test

import (
	"os/exec"
	"syscall"
)

// dieWithTests has the kernel kill the server when the test binary dies without stopping it (a
// panicking test ends the binary before TestMain can).
func dieWithTests(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
