package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goTestJSON runs `go test -json` on a module of its own whose tests pass, skip (with a reason,
// and a subtest) and, when failing is set, fail with a log line.
func goTestJSON(t *testing.T, failing bool) []byte {
	t.Helper()
	dir := t.TempDir()
	src := `package m

import "testing"

func TestPasses(t *testing.T) { t.Log("nothing to see") }

func TestSkipsItself(t *testing.T) { t.Skip("no chromium on PATH") }

func TestHasASkippedSubtest(t *testing.T) {
	t.Run("postgres", func(t *testing.T) { t.Skipf("PostgreSQL not available: %s", "no initdb") })
}
`
	if failing {
		src += `
func TestPrintsAndPasses(t *testing.T) { fmt.Println("server log: migration 12 failed, continuing") }

func TestFails(t *testing.T) { t.Errorf("admitted %d, want at most %d", 11, 10) }
`
		src = strings.Replace(src, `import "testing"`, "import (\n\t\"fmt\"\n\t\"testing\"\n)", 1)
	}
	for name, text := range map[string]string{"go.mod": "module m\n\ngo 1.22\n", "m_test.go": src} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to produce a real go test -json stream: %v", err)
	}
	cmd := exec.Command(goTool, "test", "-json", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	out, err := cmd.Output()
	var exited *exec.ExitError
	if err != nil && (!failing || !errors.As(err, &exited)) { // a failing test exits 1, nothing else may
		t.Fatalf("go test -json: %v\n%s", err, out)
	}
	return out
}

func TestSkipsAreListedWithTheirReasons(t *testing.T) {
	var out bytes.Buffer
	if !report(bytes.NewReader(goTestJSON(t, false)), &out) {
		t.Fatalf("a run whose tests pass or skip reported a failure:\n%s", out.String())
	}
	got := out.String()
	for _, want := range []string{
		"ok  \tm\t",
		"testreport: 2 SKIPPED:",
		"--- SKIP: m TestSkipsItself\n",
		"no chromium on PATH",
		"--- SKIP: m TestHasASkippedSubtest/postgres\n",
		"PostgreSQL not available: no initdb",
	} {
		if !strings.Contains(got, want) {
			t.Fatalf("the report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "nothing to see") || strings.Contains(got, "=== RUN") {
		t.Fatalf("the report shows a passing test's output, as go test without -v would not:\n%s", got)
	}
}

func TestAFailureIsShownAndFailsTheReport(t *testing.T) {
	var out bytes.Buffer
	if report(bytes.NewReader(goTestJSON(t, true)), &out) {
		t.Fatalf("a run with a failing test reported success:\n%s", out.String())
	}
	got := out.String()
	// go test without -v prints a failing package's whole output: what a passing test printed too.
	for _, want := range []string{"--- FAIL: TestFails", "admitted 11, want at most 10", "FAIL\tm\t", "testreport: 2 SKIPPED:",
		"server log: migration 12 failed, continuing"} {
		if !strings.Contains(got, want) {
			t.Fatalf("the report lacks %q:\n%s", want, got)
		}
	}
}

// TestAFailureInAPackageThatSaysOkIsShown: a TestMain that exits 0 whatever m.Run says makes go
// test print "ok" for a package whose test failed; the report shows the failure and fails. And a
// line a test prints that only looks like -v's framing is the test's own, shown like any.
func TestAFailureInAPackageThatSaysOkIsShown(t *testing.T) {
	stream := `{"Action":"start","Package":"m"}
{"Action":"run","Package":"m","Test":"TestX"}
{"Action":"output","Package":"m","Test":"TestX","Output":"=== RUN   TestX\n"}
{"Action":"output","Package":"m","Test":"TestX","Output":"=== printed by TestX itself\n"}
{"Action":"output","Package":"m","Test":"TestX","Output":"--- FAIL: TestX (0.00s)\n"}
{"Action":"output","Package":"m","Test":"TestX","Output":"    x_test.go:3: failed\n"}
{"Action":"fail","Package":"m","Test":"TestX"}
{"Action":"output","Package":"m","Output":"ok  \tm\t0.1s\n"}
{"Action":"pass","Package":"m"}
`
	var out bytes.Buffer
	if report(strings.NewReader(stream), &out) {
		t.Fatalf("a failed test in a package that says ok reported success:\n%s", out.String())
	}
	got := out.String()
	for _, want := range []string{"--- FAIL: TestX", "x_test.go:3: failed", "=== printed by TestX itself", "reported ok, but a test of it failed"} {
		if !strings.Contains(got, want) {
			t.Fatalf("the report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "=== RUN") {
		t.Fatalf("the report shows -v's framing:\n%s", got)
	}
}

func TestABuildFailureOrACutReportFailsIt(t *testing.T) {
	build := `{"ImportPath":"m [m.test]","Action":"build-output","Output":"./m_test.go:3:1: syntax error\n"}
{"ImportPath":"m [m.test]","Action":"build-fail"}
{"Action":"start","Package":"m"}
{"Action":"output","Package":"m","Output":"FAIL\tm [build failed]\n"}
{"Action":"fail","Package":"m","FailedBuild":"m [m.test]"}
`
	var out bytes.Buffer
	if report(strings.NewReader(build), &out) || !strings.Contains(out.String(), "syntax error") || !strings.Contains(out.String(), "[build failed]") {
		t.Fatalf("a build failure: %s", out.String())
	}
	cut := `{"Action":"start","Package":"m"}
{"Action":"output","Package":"m","Output":"panic: test timed out after 20m0s\n"}
{"Action":"start","Package":"n"}
`
	out.Reset()
	if report(strings.NewReader(cut), &out) || !strings.Contains(out.String(), "test timed out") || !strings.Contains(out.String(), "FAIL\tn\t") {
		t.Fatalf("a report that ends before its package's result: %s", out.String())
	}
}
