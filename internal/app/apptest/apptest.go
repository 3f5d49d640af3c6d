// Package apptest starts the real application for tests: app.New and app.Run with a test
// configuration, on a loopback port, stopped (and waited for) when the test ends. Tests use it
// instead of wiring components by hand, so that they exercise what production runs.
package apptest

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
)

// SecretKey is the SECRET_KEY of test applications.
const SecretKey = "apptest-secret-key-0123456789abcdef"

// Config is the configuration of a test application on databaseURL: a loopback port chosen by
// the kernel, a fixed secret, migrations at start, no limit state sweeper (tests sweep by hand;
// expired idempotency keys are still swept every minute, which no test can see) and only
// warnings logged.
func Config(databaseURL string) config.Config {
	c := config.Default()
	c.DatabaseURL = databaseURL
	c.ListenAddr = "127.0.0.1:0"
	c.BaseURL = "http://127.0.0.1"
	c.SecretKey = SecretKey
	c.MigrateAuto = true
	c.SweepInterval = 0
	c.MetricsAddr = "127.0.0.1:0"
	c.LogLevel = slog.LevelWarn
	return c
}

// Start runs the application with cfg and o until the test ends, and returns it once it listens
// (App.BaseURL is then where it answers).
func Start(tb testing.TB, cfg config.Config, o app.Options) *app.App {
	tb.Helper()
	a, _ := StartStoppable(tb, cfg, o)
	return a
}

// StartStoppable is Start with a stop function, for tests that restart the application: stop
// ends Run and waits for it (at the latest when the test ends); calling it again does nothing.
func StartStoppable(tb testing.TB, cfg config.Config, o app.Options) (*app.App, func()) {
	tb.Helper()
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, o)
	if err != nil {
		cancel()
		tb.Fatalf("apptest: app.New: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			// A test that closed the database on purpose (to see Sluice fail closed) has also
			// made the final flushes fail: that is what it asked for, not an error of Run.
			closedByTest := a.DB.SQL.PingContext(context.Background()) != nil
			cancel()
			select {
			case err := <-done:
				if err != nil && !closedByTest {
					tb.Errorf("apptest: Run: %v", err)
				}
			case <-time.After(time.Minute):
				tb.Errorf("apptest: Run had not returned a minute after its context ended")
			}
		})
	}
	tb.Cleanup(stop)
	select {
	case <-a.Started():
	case err := <-done:
		tb.Fatalf("apptest: Run returned before listening: %v", err)
	case <-time.After(time.Minute):
		tb.Fatal("apptest: waited a minute for Run to listen")
	}
	return a, stop
}
