package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/sluice-dev/sluice/internal/loop"
)

// group runs the background work of one Run. Each piece gets a context of its own, detached
// from Run's, so that shutdown is ordered: stop ends them one at a time in the reverse order of
// their start, each waited for before the next is told.
type group struct{ stages []stage }

type stage struct {
	name   string
	cancel context.CancelFunc
	done   chan error
}

// start runs fn in the background until stop.
func (g *group) start(parent context.Context, name string, fn func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	s := stage{name: name, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- fn(ctx) }()
	g.stages = append(g.stages, s)
}

// stop ends every piece, last started first, and reports their errors.
func (g *group) stop() error {
	var errs []error
	for i := len(g.stages) - 1; i >= 0; i-- {
		s := g.stages[i]
		s.cancel()
		if err := <-s.done; err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
		}
	}
	return errors.Join(errs...)
}

// sweepDutyCycle is the share of one database connection's time the state sweeper may take; it
// rests between batches for the rest (limiter.Engine.SweepPaced).
const sweepDutyCycle = 0.1

// sweepState deletes limit_state rows that read like no row every SWEEP_INTERVAL (±10%, so
// instances sharing a database spread out). Failures are logged and counted; the next tick tries
// again (a sweep is idempotent).
func (a *App) sweepState(ctx context.Context) error {
	if a.Config.SweepInterval <= 0 {
		a.Log.Info("limit state sweeper disabled (SWEEP_INTERVAL)")
	}
	loop.Every(ctx, a.Config.SweepInterval, 0.1, func(ctx context.Context) {
		start := time.Now()
		n, err := a.Engine.SweepPaced(ctx, a.Config.SweepBatch, sweepDutyCycle)
		a.Metrics.Swept("limit_state", n)
		if err != nil {
			if ctx.Err() != nil {
				return // shutting down
			}
			a.Metrics.SweepFailed()
			a.Log.Warn("sweep failed", "err", err, "limit_state_deleted", n)
			return
		}
		a.Log.Debug("sweep done", "limit_state_deleted", n, "duration", time.Since(start))
	})
	return nil
}

// sweepHolds releases expired holds (and deletes the closed ones' rows past their retention) and
// deletes expired leases every HOLD_SWEEP_INTERVAL (±10%), a batch at a time until none is due. Failures are logged and counted; the next tick tries again.
func (a *App) sweepHolds(ctx context.Context) error {
	loop.Every(ctx, a.Config.HoldSweepInterval, 0.1, func(ctx context.Context) {
		for ctx.Err() == nil {
			holds, moreHolds, err := a.Engine.SweepHolds(ctx, a.Config.SweepBatch)
			a.Metrics.Swept("holds", holds)
			var leases int64
			if err == nil {
				leases, err = a.Engine.SweepLeases(ctx, a.Config.SweepBatch)
				a.Metrics.Swept("leases", int(leases))
			}
			if err != nil {
				if ctx.Err() == nil {
					a.Metrics.SweepFailed()
					a.Log.Warn("hold sweep failed", "err", err)
				}
				return
			}
			if !moreHolds && int(leases) < a.Config.SweepBatch {
				return
			}
		}
	})
	return nil
}

// idempotencySweepInterval is the time between sweeps of expired idempotent answers. It is not
// SWEEP_INTERVAL: turning the limit state sweeper off must not keep every stored answer forever.
const idempotencySweepInterval = time.Minute

// sweepIdempotency deletes the idempotent decisions' stored answers that expired (24 hours after
// their decision) every idempotencySweepInterval (±10%), SWEEP_BATCH rows per transaction until
// none is due. Failures are logged and counted; the next tick tries again.
func (a *App) sweepIdempotency(ctx context.Context) error {
	loop.Every(ctx, a.idemSweep, 0.1, func(ctx context.Context) {
		n, err := a.Engine.SweepIdempotency(ctx, a.Config.SweepBatch)
		a.Metrics.Swept("idempotency_keys", n)
		if err != nil && ctx.Err() == nil {
			a.Metrics.SweepFailed()
			a.Log.Warn("sweep of idempotency keys failed", "err", err, "idempotency_keys_deleted", n)
		}
	})
	return nil
}

// servePprof serves net/http/pprof on SLUICE_PPROF_ADDR (loopback only, checked by config) for
// profiling, until ctx ends.
func (a *App) servePprof(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: a.Config.PprofAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	a.Log.Info("pprof listening", "addr", a.Config.PprofAddr)
	select {
	case err := <-errc:
		a.Log.Error("pprof server", "err", err) // profiling is optional: Sluice keeps serving
		return nil
	case <-ctx.Done():
		_ = srv.Close()
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			a.Log.Error("pprof server", "err", err)
		}
		return nil
	}
}
