package testkit

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestAServerWhoseStarterIsGoneIsReapedByTheNextStart: a server left running by a process that
// ended without stopping it (a test binary that panicked) is stopped and deleted by the next
// Start on the machine; one whose starter still runs is left alone.
func TestAServerWhoseStarterIsGoneIsReapedByTheNextStart(t *testing.T) {
	abandoned, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(abandoned.Stop)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(abandoned.dir, ownerFile), []byte(strconv.Itoa(gone.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	mine, err := Start() // reaps the abandoned one, not itself
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mine.Stop)
	if _, err := os.Stat(abandoned.dir); !os.IsNotExist(err) {
		t.Fatalf("the abandoned server's directory is still there (%v)", err)
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(abandoned.Port), time.Second); err == nil {
		c.Close()
		t.Fatal("the abandoned server still accepts connections")
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(mine.Port), 10*time.Second); err != nil {
		t.Fatalf("the server of a running process was stopped: %v", err)
	} else {
		c.Close()
	}
}
