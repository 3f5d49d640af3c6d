package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/metrics"
)

// Operations wiring: metrics, the decision hook fan-out and the background sweeper. serve calls
// newOps once the database is open, feeds ops.metrics to the router, and starts the sweeper
// right before serving; the sweeper's stop function is deferred, so on shutdown it runs after
// the HTTP server has drained and before the engine, the usage flusher and the database close.

// version is set at link time (the Dockerfile passes -X main.version=$VERSION) and reported by
// sluice_build_info; empty, the module version from the build info is used.
var version string

// DefaultSweepInterval is how often the sweeper runs when SWEEP_INTERVAL is unset.
const DefaultSweepInterval = time.Minute

// opsConfig is the operations part of the environment:
//
//	SWEEP_INTERVAL  Go duration between sweeps (default 1m); "0" or "off" disables the sweeper
//	SWEEP_BATCH     rows per sweeping transaction (default limiter.DefaultSweepBatch)
//	METRICS_TOKEN   when set, /metrics requires "Authorization: Bearer <token>"
type opsConfig struct {
	SweepInterval time.Duration
	SweepBatch    int
	MetricsToken  string
}

func opsConfigFromEnv(getenv func(string) string) (opsConfig, error) {
	c := opsConfig{SweepInterval: DefaultSweepInterval, SweepBatch: limiter.DefaultSweepBatch, MetricsToken: getenv("METRICS_TOKEN")}
	if s := strings.TrimSpace(getenv("SWEEP_INTERVAL")); s != "" {
		if s == "off" || s == "0" {
			c.SweepInterval = 0
		} else {
			d, err := time.ParseDuration(s)
			if err != nil || d < time.Second {
				return c, fmt.Errorf("config: SWEEP_INTERVAL must be a duration of at least 1s (e.g. 1m), 0 or off")
			}
			c.SweepInterval = d
		}
	}
	if s := strings.TrimSpace(getenv("SWEEP_BATCH")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			return c, fmt.Errorf("config: SWEEP_BATCH must be a whole number from 1 to 1000")
		}
		c.SweepBatch = n
	}
	if c.MetricsToken != "" && len(c.MetricsToken) < 16 {
		return c, fmt.Errorf("config: METRICS_TOKEN must be at least 16 characters")
	}
	return c, nil
}

// ops holds the operations side of one serve.
type ops struct {
	cfg     opsConfig
	metrics *metrics.Metrics
	log     *slog.Logger
}

func newOps(getenv func(string) string, d *db.DB, log *slog.Logger) (*ops, error) {
	cfg, err := opsConfigFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	return &ops{cfg: cfg, metrics: metrics.New(metrics.Options{DB: d, Version: version}), log: log}, nil
}

// fanOut makes one limiter.Options.OnDecision out of several subscribers (metrics, the usage
// charts), called in order on the deciding goroutine; each must be fast and non-blocking.
func fanOut(subs ...func(tenantID int64, name string, ok bool)) func(tenantID int64, name string, ok bool) {
	var live []func(int64, string, bool)
	for _, s := range subs {
		if s != nil {
			live = append(live, s)
		}
	}
	return func(tenantID int64, name string, ok bool) {
		for _, s := range live {
			s(tenantID, name, ok)
		}
	}
}

// sweepDutyCycle is the share of one database connection's time the background sweeper may
// take; it rests between batches for the rest (limiter.Engine.SweepPaced).
const sweepDutyCycle = 0.1

// startSweeper runs the sweeper every SweepInterval (with ±10% jitter, so instances sharing a
// database spread out) until ctx ends. The returned stop waits for a sweep in progress to end;
// serve defers it, so it runs before the engine and the database close.
func (o *ops) startSweeper(ctx context.Context, e *limiter.Engine) (stop func()) {
	if o.cfg.SweepInterval <= 0 {
		o.log.Info("sweeper disabled")
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			jitter := time.Duration(rand.Int64N(int64(o.cfg.SweepInterval)/5+1)) - o.cfg.SweepInterval/10
			t := time.NewTimer(o.cfg.SweepInterval + jitter)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			o.sweepOnce(ctx, e)
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

// sweepOnce runs one sweep of limit_state; failures are logged and counted, and the next tick
// tries again (a sweep is idempotent). captcha_used and usage_stats are pruned by the packages
// that own them: the captcha store's sweep and the usage flush.
func (o *ops) sweepOnce(ctx context.Context, e *limiter.Engine) {
	start := time.Now()
	n, err := e.SweepPaced(ctx, o.cfg.SweepBatch, sweepDutyCycle)
	o.metrics.Swept("limit_state", n)
	if err != nil {
		if ctx.Err() != nil {
			return // shutting down
		}
		o.metrics.SweepFailed()
		o.log.Warn("sweep failed", "err", err, "limit_state_deleted", n)
		return
	}
	o.log.Debug("sweep done", "limit_state_deleted", n, "duration", time.Since(start))
}

// healthcheckCmd is `app healthcheck [--ready]`: it asks the server listening on LISTEN_ADDR for
// /healthz (or /readyz) and fails unless it answers 200. Distroless images have no shell or
// curl, so the Dockerfile's HEALTHCHECK runs the binary itself.
func healthcheckCmd(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	path := "/healthz"
	for _, a := range args {
		switch a {
		case "--ready", "-ready":
			path = "/readyz"
		default:
			return fmt.Errorf("usage: app healthcheck [--ready]")
		}
	}
	host, port, err := net.SplitHostPort(cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("healthcheck: LISTEN_ADDR: %w", err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1" // listening on every interface: loopback is one of them
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %d", path, resp.StatusCode)
	}
	fmt.Fprintf(stdout, "%s ok\n", path)
	return nil
}
