package config

import (
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// helperEnv makes the test binary, started again by TestGOMEMLIMITIsTheRuntimesSyntax, print the
// memory limit its runtime read from GOMEMLIMIT.
const helperEnv = "SLUICE_CONFIG_TEST_PRINT_MEMORY_LIMIT"

func TestPrintMemoryLimitHelper(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return // only as TestGOMEMLIMITIsTheRuntimesSyntax's child process
	}
	if _, err := os.Stdout.WriteString("limit=" + strconv.FormatInt(debug.SetMemoryLimit(-1), 10) + "\n"); err != nil {
		t.Fatal(err)
	}
}

// TestGOMEMLIMITIsTheRuntimesSyntax: the Go runtime reads GOMEMLIMIT before main and stops the
// process with a fatal error on a malformed value (GOMEMLIMIT=1GB), so Sluice can never report
// it: the documentation says so, and config reads exactly the runtime's syntax (the same number
// for every value the runtime accepts, an error for every value it refuses).
func TestGOMEMLIMITIsTheRuntimesSyntax(t *testing.T) {
	var doc string
	for _, o := range Options() {
		if o.Name == "GOMEMLIMIT" {
			doc = o.Doc
		}
	}
	for _, want := range []string{"runtime itself reads it", "fatal error", "`512MiB`", "not `1GB`"} {
		if !strings.Contains(doc, want) {
			t.Errorf("GOMEMLIMIT's documentation does not say %q: %s", want, doc)
		}
	}
	for _, v := range []string{"1GiB", "512MiB", "100KiB", "2TiB", "1073741824", "100B", "0", "+1MiB", "off",
		"9223372036854775807", "8589934591GiB",
		"1GB", "1gib", "1G", "1.5GiB", "-1", "1 GiB", "KiB", "1iB", "B", "lots", "8589934592GiB", "9223372036854775808"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPrintMemoryLimitHelper$")
		cmd.Env = append(os.Environ(), helperEnv+"=1", "GOMEMLIMIT="+v)
		out, runErr := cmd.CombinedOutput()
		c, err := FromEnv(env(map[string]string{"GOMEMLIMIT": v}))
		if runErr != nil {
			if !strings.Contains(string(out), "malformed GOMEMLIMIT") {
				t.Fatalf("GOMEMLIMIT=%s: the helper failed otherwise: %v\n%s", v, runErr, out)
			}
			if err == nil || !strings.Contains(err.Error(), "GOMEMLIMIT") {
				t.Errorf("GOMEMLIMIT=%s: the runtime refuses it, config reads %d (%v)", v, c.MemoryLimit, err)
			}
			continue
		}
		_, after, ok := strings.Cut(string(out), "limit=")
		runtimeLimit, perr := strconv.ParseInt(strings.Fields(after + " x")[0], 10, 64)
		if !ok || perr != nil {
			t.Fatalf("GOMEMLIMIT=%s: no limit printed:\n%s", v, out)
		}
		if err != nil || c.MemoryLimit != runtimeLimit {
			t.Errorf("GOMEMLIMIT=%s: the runtime reads %d, config %d (%v)", v, runtimeLimit, c.MemoryLimit, err)
		}
	}
}
