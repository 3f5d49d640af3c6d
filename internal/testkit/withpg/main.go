// Command withpg runs a command with TEST_DATABASE_URL pointing at PostgreSQL: the caller's
// server when the variable is already set, otherwise a throwaway server started for the run.
//
//	go run ./internal/testkit/withpg -- go test ./...
//
// With -createdb it prints the URL of a fresh, empty database on the TEST_DATABASE_URL server
// instead, and with -dropdb URL it drops such a database: tests outside this module (the
// clients', the examples') start a real server on a database of their own this way.
//
//	go run ./internal/testkit/withpg -createdb
//	go run ./internal/testkit/withpg -dropdb postgres://…/t_0123456789ab
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/sluice-dev/sluice/internal/testkit"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && (args[0] == "-createdb" || args[0] == "-dropdb") {
		os.Exit(database(args))
	}
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: withpg -- COMMAND [ARGS...]")
		os.Exit(2)
	}
	os.Exit(run(args))
}

func run(args []string) int {
	if os.Getenv(testkit.EnvURL) == "" {
		srv, err := testkit.Start()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer srv.Stop()
		_ = os.Setenv(testkit.EnvURL, srv.URL)
		fmt.Fprintf(os.Stderr, "withpg: throwaway PostgreSQL on port %d\n", srv.Port)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for s := range sig {
			if cmd.Process != nil {
				_ = cmd.Process.Signal(s)
			}
		}
	}()
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// database creates (-createdb) or drops (-dropdb URL) a database on the TEST_DATABASE_URL server.
func database(args []string) int {
	base := os.Getenv(testkit.EnvURL)
	if base == "" {
		fmt.Fprintf(os.Stderr, "withpg %s: %s is not set\n", args[0], testkit.EnvURL)
		return 2
	}
	switch {
	case args[0] == "-createdb" && len(args) == 1:
		u, err := testkit.CreateDatabase(base)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(u)
	case args[0] == "-dropdb" && len(args) == 2:
		if err := testkit.DropDatabase(base, args[1]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: withpg -createdb | withpg -dropdb URL")
		return 2
	}
	return 0
}
