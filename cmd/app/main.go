// Command app is Sluice: `app serve` (the default) runs the service; other subcommands manage
// the database, tenants, keys and users. See `app help`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
	// Quotas' zones come from the limiter's own copy of this data (algo.LoadZone). This is for
	// the zones dependencies load by name, on a machine without /usr/share/zoneinfo too: a
	// timezone parameter of DATABASE_URL (gorm's postgres driver), TZ (time.Local, SQLite's).
	_ "time/tzdata"

	"github.com/sluice-dev/sluice/internal/procs"
)

func main() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal starts a graceful stop (in-flight requests get up to 20 s); a second
		// one ends the process at once, the signal's default, as an operator who sends it wants.
		<-signals
		signal.Stop(signals)
		stop()
		fmt.Fprintln(os.Stderr, "sluice: stopping; a second signal exits at once")
	}()
	// GOMAXPROCS unset: one P while the server is nearly idle, all of them once it is busy. Not
	// for the short-lived commands (a container's healthcheck runs every 10 s).
	cmd, _ := command(os.Args[1:])
	if cmd == "serve" && procs.Enabled() {
		t := time.NewTicker(procs.Interval)
		defer t.Stop()
		go procs.New().Run(ctx, t.C)
	}
	if cmd != "serve" {
		// A write to a closed stdout pipe (`sluice key create … | head -0`) is then an error the
		// command sees, not SIGPIPE ending the process before it can act on it (key create
		// revokes a key whose secret no one received).
		signal.Ignore(syscall.SIGPIPE)
	}
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}
