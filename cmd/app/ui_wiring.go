package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/httpserver"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/ui"
	usagestats "github.com/sluice-dev/sluice/internal/usage"
	"github.com/sluice-dev/sluice/web"
)

// dashboard wires the admin UI and the usage aggregator that feeds its charts. serve builds it
// in three steps because of the dependency order: the aggregator exists before the engine (it
// is the engine's OnDecision hook), the UI after it, and the setup link can only be printed
// once the listener knows its address.
type dashboard struct {
	usage     *usagestats.Aggregator
	stopUsage func()
	ui        *ui.UI
	setupPath string
}

func newDashboard(d *db.DB, log *slog.Logger) *dashboard {
	x := &dashboard{usage: usagestats.New(d, usagestats.Options{Logger: log})}
	x.stopUsage = background(log, "usage", x.usage.Run)
	return x
}

// onDecision is limiter.Options.OnDecision.
func (x *dashboard) onDecision(tenantID int64, name string, ok bool) {
	x.usage.Record(tenantID, name, ok)
}

// surface builds the UI and prepares the first start: SLUICE_ADMIN_EMAIL/PASSWORD create the
// first operator, otherwise an empty database gets a one-time setup link (see announce).
// sessions is the captcha store, whose authorized sessions the captcha page lists and revokes.
func (x *dashboard) surface(ctx context.Context, cfg config.Config, log *slog.Logger, svc *tenants.Service, engine *limiter.Engine, sessions ui.CaptchaSessions, keys secrets) (httpserver.Surface, error) {
	u, err := ui.New(ui.Deps{
		Tenants: svc, Engine: engine, Usage: x.usage, Captcha: sessions, Logger: log,
		SessionKey: keys.derive("dashboard-session"),
		BaseURL:    cfg.BaseURL,
		Static:     web.Static(),
	})
	if err != nil {
		return nil, err
	}
	if x.setupPath, err = u.Bootstrap(ctx, cfg.AdminEmail, cfg.AdminPassword); err != nil {
		return nil, err
	}
	x.ui = u
	return u, nil
}

// notFound renders unknown non-API paths as the dashboard's 404 page.
func (x *dashboard) notFound(c *gin.Context) { x.ui.NotFound(c) }

// announce prints the one-time setup link on a first start without SLUICE_ADMIN_EMAIL.
func (x *dashboard) announce(stdout io.Writer, base string) {
	if x.setupPath != "" {
		fmt.Fprintf(stdout, "No users yet. Set up the first operator (this link works once): %s%s\n", base, x.setupPath)
	}
}

// close flushes the usage counts; call it before the database closes.
func (x *dashboard) close() { x.stopUsage() }
