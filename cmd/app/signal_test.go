package main

import (
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestASecondSignalEndsTheProcessAtOnce: SIGTERM starts a graceful stop, which waits for the
// requests in flight (here, decisions held behind a lock); a second SIGTERM ends the process at
// once, killed by the signal, instead of being swallowed while the drain goes on.
func TestASecondSignalEndsTheProcessAtOnce(t *testing.T) {
	bin := buildBinary(t)
	dbURL := postgresForTest(t)
	env := appEnv(dbURL)
	p := startApp(t, bin, env)
	c := newClient(tenantAndKey(t, bin, env, "acme"))
	c.mustDo(t, "PUT", p.base+"/v1/limits/slow", map[string]any{"kind": "token bucket", "rate": 100, "period": 1000}, 200)

	admin, _ := lockStateTable(t, dbURL)
	for i := range 3 {
		go func() {
			_, _, _ = c.do("POST", p.base+"/v1/limits/slow/limit", map[string]any{"key": fmt.Sprint("k", i)})
		}()
	}
	testkit.WaitForLockWaiter(t, admin, 30*time.Second, "a decision")
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.out.waitFor(t, regexp.MustCompile(`a second signal exits at once`), 30*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("no exit 60 s after the second SIGTERM; output:\n%s", p.out)
	}
	var exit *exec.ExitError
	if !errors.As(p.err, &exit) || !exit.Sys().(syscall.WaitStatus).Signaled() || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("after a second SIGTERM the process ended with %v, want killed by SIGTERM (the graceful stop was still waiting); output:\n%s",
			p.err, strings.TrimSpace(p.out.String()))
	}
}
