package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/httpserver"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
)

const usage = `usage: app [command]

commands:
  serve                                  run the service (default)
  migrate                                apply database migrations
  tenant create NAME                     create a tenant
  key create --tenant NAME [--label L] [--publishable]
                                         create an API key (the secret is printed once)
  key revoke KEY                         revoke a key by its secret or its ID
  user create --email E --password-stdin [--operator | --tenant NAME]
                                         create a dashboard user
  healthcheck [--ready]                  probe the local server's /healthz (or /readyz)
`

// run is the whole program; main and the end-to-end tests call it.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout io.Writer) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	cfg, err := config.FromEnv(getenv)
	if err != nil {
		return err
	}
	switch cmd {
	case "serve":
		return serve(ctx, cfg, getenv, stdout)
	case "migrate":
		return migrateCmd(ctx, cfg, stdout)
	case "tenant", "key", "user":
		return adminCmd(ctx, cfg, cmd, args, stdin, stdout)
	case "healthcheck":
		return healthcheckCmd(ctx, cfg, args, stdout)
	case "help", "-h", "--help":
		_, _ = io.WriteString(stdout, usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
}

func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: cfg.LogLevel}))
}

// openDatabase opens the database and makes sure its schema is the one this binary knows:
// SQLite (or MIGRATE=auto) migrates at start-up, PostgreSQL otherwise requires `app migrate`.
func openDatabase(ctx context.Context, cfg config.Config, log *slog.Logger, migrate bool) (*db.DB, error) {
	d, err := db.Open(ctx, cfg.DatabaseURL, db.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	if migrate || d.Dialect == db.SQLite || cfg.MigrateAuto {
		err = d.Migrate(ctx)
	} else {
		err = d.CheckSchema(ctx)
	}
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	return d, nil
}

// secrets are the server keys, all derived from SECRET_KEY (or from one generated on first start
// and kept in the database), so that every instance agrees on them.
type secrets struct {
	root   []byte
	pepper []byte // HMAC key for stored API key hashes
}

func (s secrets) derive(purpose string) []byte {
	m := hmac.New(sha256.New, s.root)
	m.Write([]byte("sluice/" + purpose))
	return m.Sum(nil)
}

func loadSecrets(ctx context.Context, cfg config.Config, d *db.DB) (secrets, error) {
	root := cfg.SecretKey
	if root == "" {
		boot := tenants.NewService(d, nil, nil)
		defer boot.Close()
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return secrets{}, err
		}
		stored, err := boot.SetSettingIfAbsent(ctx, "secret_key", base64.RawURLEncoding.EncodeToString(b[:]))
		if err != nil {
			return secrets{}, fmt.Errorf("secret key: %w", err)
		}
		root = stored
	}
	s := secrets{root: []byte(root)}
	s.pepper = s.derive("api-key-pepper")
	return s, nil
}

func serve(ctx context.Context, cfg config.Config, getenv func(string) string, stdout io.Writer) error {
	log := newLogger(cfg, stdout)
	log.Info("starting", "config", cfg.String())
	tuneGC(getenv)
	d, err := openDatabase(ctx, cfg, log, false)
	if err != nil {
		return err
	}
	defer d.Close()
	ops, err := newOps(getenv, d, log) // metrics, decision hook fan-out, sweeper (ops_wiring.go)
	if err != nil {
		return err
	}
	keys, err := loadSecrets(ctx, cfg, d)
	if err != nil {
		return err
	}
	tenantSvc := tenants.NewService(d, keys.pepper, nil)
	defer tenantSvc.Close()
	dash := newDashboard(d, log) // admin UI + usage charts (ui_wiring.go)
	defer dash.close()           // flushes usage counts; runs after the engine stopped, before d.Close
	engine := limiter.NewEngine(d, limiter.Options{OnDecision: fanOut(ops.metrics.OnDecision, dash.onDecision)})
	// The group-commit worker stops after the HTTP server drained, before the database closes.
	engineCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	engineDone := make(chan error, 1)
	go func() { engineDone <- engine.Run(engineCtx) }()
	defer func() { stopEngine(); <-engineDone }()
	ops.metrics.WatchGroups(engine.GroupStats)
	// captcha, anonymous sessions, JWKS and /demo (captcha_wiring.go)
	anon, err := newAnonymousSessions(ctx, cfg, d, keys, tenantSvc, engine, log)
	if err != nil {
		return err
	}
	defer anon.close() // stops its sweeper before the database closes
	apiSrv := api.New(api.Deps{Engine: engine, Auth: tenantSvc, Audit: tenantSvc, Sessions: anon.store, Extra: anon.extra(), Logger: log})
	dashUI, err := dash.surface(ctx, cfg, log, tenantSvc, engine, anon.store, keys)
	if err != nil {
		return err
	}
	router, err := httpserver.NewRouter(httpserver.Options{
		Logger:         log,
		TrustedProxies: cfg.TrustedProxies,
		API:            apiSrv,
		Surfaces:       append([]httpserver.Surface{dashUI}, anon.surfaces()...),
		NotFound:       dash.notFound,
		Metrics:        ops.metrics,
		MetricsToken:   ops.cfg.MetricsToken,
		Ready: func(ctx context.Context) error {
			if err := d.Ping(ctx); err != nil {
				return err
			}
			return d.CheckSchema(ctx)
		},
	})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	base := cfg.BaseURL
	if _, port, _ := net.SplitHostPort(cfg.ListenAddr); port == "0" {
		base = "http://" + l.Addr().String() // tests listen on port 0 and read the real address here
	}
	startPprof(ctx, cfg.PprofAddr, log)
	fmt.Fprintf(stdout, "Sluice is listening on %s (database %s)\n", base, d.Dialect)
	dash.announce(stdout, base)
	anon.listening(base)
	defer ops.startSweeper(ctx, engine)() // stops first on the way out, before the engine stops
	err = httpserver.Serve(ctx, l, router, 20*time.Second)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	log.Info("stopped")
	return err
}

func migrateCmd(ctx context.Context, cfg config.Config, stdout io.Writer) error {
	d, err := openDatabase(ctx, cfg, newLogger(cfg, stdout), true)
	if err != nil {
		return err
	}
	defer d.Close()
	fmt.Fprintln(stdout, "database schema is current")
	return nil
}
