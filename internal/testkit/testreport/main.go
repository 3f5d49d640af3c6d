// Command testreport reads `go test -json` on its standard input and prints what `go test`
// prints without -v (each package's ok or FAIL line, and the output of every failed test and
// package), then every skipped test with its reason. Without -v, go test says nothing of a skip,
// and a skipped test must never pass unseen: make test pipes every go test run through it.
//
// It exits 1 when a test, a package or a build failed.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	if !report(os.Stdin, os.Stdout) {
		os.Exit(1)
	}
}

// report copies the report of the go test -json stream in to out and says whether everything
// passed.
func report(in io.Reader, out io.Writer) bool {
	r := newReporter(out)
	if err := r.read(in); err != nil {
		fmt.Fprintf(out, "testreport: %v\n", err)
		return false
	}
	return r.finish()
}
