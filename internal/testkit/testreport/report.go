package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json), build events included.
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output and build-fail
}

type testID struct{ pkg, test string }

// skip is a skipped test and what it said.
type skip struct {
	testID
	said []string
}

type reporter struct {
	out      io.Writer
	tests    map[testID][]string // the output of each running test, "=== RUN" lines left out
	packages map[string][]string // each package's output, its tests' included, until it ends
	skips    []skip
	failed   bool
	failedIn map[string]bool // packages with a failed test
	ended    map[string]bool
}

func newReporter(out io.Writer) *reporter {
	return &reporter{out: out, tests: map[testID][]string{}, packages: map[string][]string{}, failedIn: map[string]bool{}, ended: map[string]bool{}}
}

func (r *reporter) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20) // a test may log long lines
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(r.out, "%s\n", line) // not an event: whatever it is, show it
			continue
		}
		r.handle(e)
	}
	return sc.Err()
}

func (r *reporter) handle(e event) {
	switch {
	case e.Action == "build-output":
		fmt.Fprint(r.out, e.Output)
	case e.Action == "build-fail":
		r.failed = true
	case e.Test != "":
		r.handleTest(testID{e.Package, e.Test}, e)
	default:
		r.handlePackage(e)
	}
}

// handleTest keeps a test's output for its skip, and every line of it but -v's own framing for
// its package's report should the package fail: go test without -v prints a failing package's
// whole output, what its passing tests printed included (a server's log, say). That is a little
// more than go test prints (the t.Log lines of passing tests too), never less.
func (r *reporter) handleTest(id testID, e event) {
	switch e.Action {
	case "output":
		if framing(e.Output, id.test) {
			return
		}
		r.tests[id] = append(r.tests[id], e.Output)
		r.packages[id.pkg] = append(r.packages[id.pkg], e.Output)
	case "fail":
		r.failed = true
		r.failedIn[id.pkg] = true
		delete(r.tests, id)
	case "skip":
		r.skips = append(r.skips, skip{id, r.tests[id]})
		delete(r.tests, id)
	case "pass":
		delete(r.tests, id)
	}
}

func (r *reporter) handlePackage(e event) {
	switch e.Action {
	case "start":
		r.packages[e.Package] = nil // started: it must end with a result
	case "output":
		r.packages[e.Package] = append(r.packages[e.Package], e.Output)
	case "pass", "skip": // skip: a package without tests
		if r.failedIn[e.Package] {
			// A test failed although the package passed (a TestMain that exits 0 whatever
			// m.Run says): show everything, and say so.
			r.printOutput(e.Package)
			fmt.Fprintf(r.out, "testreport: %s reported ok, but a test of it failed (above)\n", e.Package)
		} else {
			for _, l := range r.packages[e.Package] {
				if strings.HasPrefix(l, "ok  ") || strings.HasPrefix(l, "?   ") {
					fmt.Fprint(r.out, l)
				}
			}
		}
		r.end(e.Package)
	case "fail":
		r.failed = true
		r.printOutput(e.Package)
		r.end(e.Package)
	}
}

// printOutput prints all the output of package pkg, as go test does for a failing package.
func (r *reporter) printOutput(pkg string) {
	for _, l := range r.packages[pkg] {
		fmt.Fprint(r.out, l)
	}
}

// framing reports whether a line of test's output is -v's own framing of it: its "=== RUN" and
// kin, and its "--- PASS" and "--- SKIP" result lines (go test without -v prints only "--- FAIL").
// A line the test printed itself that only looks like one is kept.
func framing(line, test string) bool {
	for _, verb := range []string{"=== RUN   ", "=== PAUSE ", "=== CONT  ", "=== NAME  "} {
		if line == verb+test+"\n" {
			return true
		}
	}
	t := strings.TrimLeft(line, " ")
	return strings.HasPrefix(t, "--- PASS: "+test+" (") || strings.HasPrefix(t, "--- SKIP: "+test+" (")
}

// end forgets a package that has its result, and its tests still running when the binary died
// (a panic, the timeout).
func (r *reporter) end(pkg string) {
	delete(r.packages, pkg)
	for id := range r.tests {
		if id.pkg == pkg {
			delete(r.tests, id)
		}
	}
	r.ended[pkg] = true
}

// finish reports the skips, and a package that started and never ended as a failure, and
// says whether everything passed.
func (r *reporter) finish() bool {
	var unended []string
	for pkg := range r.packages {
		if !r.ended[pkg] {
			unended = append(unended, pkg)
		}
	}
	sort.Strings(unended)
	for _, pkg := range unended {
		r.failed = true
		r.printOutput(pkg)
		fmt.Fprintf(r.out, "FAIL\t%s\t(the report ended before its result)\n", pkg)
	}
	if len(r.skips) == 0 {
		fmt.Fprintln(r.out, "testreport: no test skipped")
	} else {
		fmt.Fprintf(r.out, "\ntestreport: %d SKIPPED:\n", len(r.skips))
		for _, s := range r.skips {
			fmt.Fprintf(r.out, "--- SKIP: %s %s\n", s.pkg, s.test)
			for _, l := range s.said {
				fmt.Fprint(r.out, l)
			}
		}
	}
	return !r.failed
}
