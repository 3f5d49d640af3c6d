// Package app is Sluice's composition root: New builds every component from one Config, and Run
// starts the HTTP server and the background work and stops them in reverse order when its
// context ends. `app serve` and every end-to-end and HTTP test use the same New and Run; nothing
// else wires components together.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"runtime/debug"
	"time"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/captcha"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/demo"
	"github.com/sluice-dev/sluice/internal/envoyrls"
	"github.com/sluice-dev/sluice/internal/httpserver"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/mail"
	"github.com/sluice-dev/sluice/internal/metrics"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/ui"
	"github.com/sluice-dev/sluice/internal/usage"
	"github.com/sluice-dev/sluice/internal/webhooks"
	"github.com/sluice-dev/sluice/web"
)

// Version is set at link time (the Dockerfile passes -X …/internal/app.Version=$VERSION) and
// reported by sluice_build_info; empty, the module version from the build info is used.
var Version string

// BuildInfo is the running build, as sluice_build_info reports it (metrics.Build).
func BuildInfo() (version, revision, goVersion string) { return metrics.Build(Version) }

// Options are what is not configuration: where start-up lines go, and the knobs tests turn to
// move time or tighten limits without new environment variables. The zero value is production.
type Options struct {
	// Stdout receives the log and the start-up lines (the address, the setup link); os.Stdout
	// when nil.
	Stdout io.Writer
	// Now is the clock of dashboard sessions, captcha challenges, sessions and tokens, and of
	// the usage aggregator's minutes (charts, top keys, threshold events); time.Now when nil.
	// Limit decisions never read it (they use the engine's clock).
	Now func() time.Time
	// EngineNow, when set, is the time of every limit decision, hold, lease and sweep (the
	// engine's clock, limiter.Options.Now): tests move it to expire holds and leases.
	EngineNow func() time.Time
	// ChallengeIPLimit, ChallengeKeyLimit and the Login limits (failed dashboard logins per
	// account and client address, per client address, per account) replace the built-in limits
	// on Sluice's own endpoints when set.
	ChallengeIPLimit, ChallengeKeyLimit            *limiter.Definition
	LoginPerAccountIP, LoginPerIP, LoginPerAccount *limiter.Definition
	// Widget replaces the vendored captcha widget served by /demo (a test may serve a stub).
	Widget fs.FS
	// AuthCacheTTL replaces how long an API key lookup is reused (tenants.DefaultAuthCacheTTL):
	// a test that must see a change reach another instance by NOTIFY, not by the cache
	// expiring, makes it long.
	AuthCacheTTL time.Duration
	// IdempotencySweepInterval replaces how often expired idempotent answers are deleted
	// (idempotencySweepInterval): a test makes it short to see the sweeper work.
	IdempotencySweepInterval time.Duration
}

// App is one running Sluice: every component, built once. Its fields are for the CLI and tests,
// which call services directly (create a tenant, read a value) beside the HTTP surface.
type App struct {
	Config  config.Config
	Log     *slog.Logger
	DB      *db.DB
	Tenants *tenants.Service
	Engine  *limiter.Engine
	Usage   *usage.Aggregator
	Captcha *captcha.Store
	// Webhooks sends the tenants' webhook deliveries (its outbox is filled by Tenants).
	Webhooks *webhooks.Service
	Metrics  *metrics.Metrics
	API      *api.Server
	UI       *ui.UI
	Demo     *demo.Demo        // nil unless SLUICE_DEMO=true
	Envoy    *envoyrls.Service // nil unless GRPC_ADDR is set
	Router   *gin.Engine

	stdout    io.Writer
	setupPath string        // one-time first-operator link, printed once listening
	idemSweep time.Duration // time between sweeps of expired idempotent answers
	started   chan struct{} // closed once Run serves
	listeners listeners     // bound by New, served by Run
	// front answers on the HTTP listener from New's start: /healthz 200 and everything else 503
	// while the database is opened and migrated (which may wait minutes for another instance's
	// migration), the router once Run hands it over.
	front *httpserver.Server
	// frontMetrics is front for METRICS_ADDR (nil when off): a scrape during the start gets 503.
	frontMetrics *httpserver.Server
}

// listeners are the service's sockets, bound before the database is opened.
type listeners struct {
	http, metrics, grpc net.Listener // metrics and grpc nil when off
}

// listen binds LISTEN_ADDR, METRICS_ADDR (when set) and GRPC_ADDR (when set).
func listen(cfg config.Config) (listeners, error) {
	var ls listeners
	var err error
	if ls.http, err = net.Listen("tcp", cfg.ListenAddr); err != nil {
		return ls, fmt.Errorf("listen (LISTEN_ADDR): %w", err)
	}
	if cfg.MetricsAddr != "" {
		if ls.metrics, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			ls.close()
			return ls, fmt.Errorf("listen for metrics (METRICS_ADDR): %w", err)
		}
	}
	if cfg.GRPCAddr != "" {
		if ls.grpc, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
			ls.close()
			return ls, fmt.Errorf("listen for the Envoy rate limit service (GRPC_ADDR): %w", err)
		}
	}
	return ls, nil
}

// addrOf is l's bound address ("" for a listener that is off).
func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

func (ls listeners) close() {
	for _, l := range []net.Listener{ls.http, ls.metrics, ls.grpc} {
		if l != nil {
			_ = l.Close()
		}
	}
}

// Close releases what New holds for an App that will not Run: its listeners and its database.
func (a *App) Close() error {
	a.closeFronts()
	a.listeners.close()
	return a.DB.Close()
}

// closeFronts stops the servers New started on the listeners (Close, or New failing).
func (a *App) closeFronts() {
	_ = a.front.Close()
	if a.frontMetrics != nil {
		_ = a.frontMetrics.Close()
	}
}

// Open opens the configured database and makes sure its schema is the one this binary knows:
// SQLite (or MIGRATE=auto, or migrate) migrates, PostgreSQL otherwise requires the migrate command.
func Open(ctx context.Context, cfg config.Config, log *slog.Logger, migrate bool) (*db.DB, error) {
	mode := serverSchema
	if migrate {
		mode = migrateSchema
	}
	d, _, err := open(ctx, cfg, log, mode, false)
	return d, err
}

// schemaMode is what opening the database does to its schema.
type schemaMode int

const (
	serverSchema  schemaMode = iota // SQLite or MIGRATE=auto migrates; otherwise it must be current
	migrateSchema                   // the migrate command: migrate
	commandSchema                   // the other commands: migrate a new database only (db.MigrateEmpty)
)

// OpenWithSecrets is Open for the server and the commands that need the server keys
// (LoadSecrets): it reads them before it migrates, so that a start refused for its secret (none
// on PostgreSQL, or another than an earlier version stored) leaves the schema where the running
// instances of the release before expect it, instead of making them all not ready; and it
// deletes an earlier version's stored copy only once the schema is right.
func OpenWithSecrets(ctx context.Context, cfg config.Config, log *slog.Logger) (*db.DB, Secrets, error) {
	return open(ctx, cfg, log, serverSchema, true)
}

// OpenForCommand is OpenWithSecrets for the tenant, key and user commands: they migrate only a
// new database, whatever MIGRATE says, so that a newer release's command run beside an older
// release's servers (its CLI in a new image, a `go run` after a pull) does not migrate the
// schema under them and make them all not ready at once.
func OpenForCommand(ctx context.Context, cfg config.Config, log *slog.Logger) (*db.DB, Secrets, error) {
	return open(ctx, cfg, log, commandSchema, true)
}

func open(ctx context.Context, cfg config.Config, log *slog.Logger, mode schemaMode, secrets bool) (*db.DB, Secrets, error) {
	d, err := db.Open(ctx, cfg.DatabaseURL, db.Options{Logger: log})
	if err != nil {
		return nil, Secrets{}, err
	}
	keys, err := prepare(ctx, cfg, d, log, mode, secrets)
	if err != nil {
		_ = d.Close()
		return nil, Secrets{}, err
	}
	return d, keys, nil
}

// prepare is open's work on the opened database: the keys read (when secrets), the schema
// migrated or checked, then an earlier version's stored secret deleted.
func prepare(ctx context.Context, cfg config.Config, d *db.DB, log *slog.Logger, mode schemaMode, secrets bool) (Secrets, error) {
	var keys Secrets
	var legacy string
	if secrets {
		var err error
		if keys, legacy, err = readSecrets(ctx, cfg, d, mode == serverSchema); err != nil {
			return Secrets{}, err
		}
		warnOpenKeyFile(cfg, d, log)
	}
	schema := d.CheckSchema
	switch {
	case mode == commandSchema:
		schema = d.MigrateEmpty
	case mode == migrateSchema || d.Dialect == db.SQLite || cfg.MigrateAuto:
		schema = d.Migrate
	}
	if err := schema(ctx); err != nil {
		return Secrets{}, err
	}
	if secrets {
		if err := recordSecret(ctx, cfg, d, log, keys, mode == serverSchema, givesUpLegacy(cfg, legacy, string(keys.root))); err != nil {
			return Secrets{}, err
		}
	}
	return keys, dropLegacySecret(ctx, d, log, keys, legacy)
}

// DefaultPlan is the tenants' option of the configured default plan (PLAN_*), for the server and
// the command line alike.
func DefaultPlan(cfg config.Config) tenants.Option {
	return tenants.WithDefaultPlan(tenants.Plan{DecisionsPerSecond: cfg.PlanDecisionsPerSecond,
		MaxLimits: cfg.PlanMaxLimits, MaxKeys: cfg.PlanMaxKeys, MaxOverrides: cfg.PlanMaxOverrides})
}

// CommandTenants is the tenants service of the command line (`tenant`, `key` and `user`): as the
// server's, its audited changes write their webhook events to the outbox in the same
// transaction (a running server delivers them), and its default plan is the configured one.
func CommandTenants(cfg config.Config, d *db.DB, keys Secrets) (*tenants.Service, error) {
	events, err := newWebhooks(cfg, d, keys, nil, nil)
	if err != nil {
		return nil, err
	}
	return tenants.NewService(d, keys.Pepper, nil, tenants.WithEvents(events), DefaultPlan(cfg)), nil
}

// newWebhooks is the webhooks service of the server and of the command line alike: both must
// seal and open endpoints' signing secrets with the same derived key.
func newWebhooks(cfg config.Config, d *db.DB, keys Secrets, log *slog.Logger, onAttempt func(string)) (*webhooks.Service, error) {
	return webhooks.NewService(d, keys.Derive("webhook-secrets"), webhooks.Options{AllowPrivate: cfg.WebhookAllowPrivate, Logger: log, OnAttempt: onAttempt})
}

// countedMailer is a mailer whose every message is counted, sent or not (sluice_emails_total).
type countedMailer struct {
	ui.LinkMailer
	count func(sent bool)
}

func (m countedMailer) Send(ctx context.Context, msg mail.Message) error {
	err := m.LinkMailer.Send(ctx, msg)
	m.count(err == nil)
	return err
}

// NewLogger is the process's logger: text lines at the configured level.
func NewLogger(cfg config.Config, w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: cfg.LogLevel}))
}

// New builds every component. It starts nothing but the starting answers on the HTTP and
// metrics ports (httpserver.Starting: /healthz 200, everything else 503), so that a start waiting
// for the database is live but not ready; Run starts the rest. On error everything built so far
// is closed again.
func New(ctx context.Context, cfg config.Config, o Options) (_ *App, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	a := &App{Config: cfg, stdout: o.Stdout, started: make(chan struct{}), idemSweep: idempotencySweepInterval}
	if o.IdempotencySweepInterval > 0 {
		a.idemSweep = o.IdempotencySweepInterval
	}
	a.Log = NewLogger(cfg, o.Stdout)
	// The addresses first: a start that cannot listen (a port in use) is refused before it
	// migrates a shared database under the release still serving it.
	if a.listeners, err = listen(cfg); err != nil {
		return nil, err
	}
	a.front = httpserver.Start(a.listeners.http, httpserver.Starting())
	if a.listeners.metrics != nil {
		a.frontMetrics = httpserver.Start(a.listeners.metrics, httpserver.Starting())
	}
	defer func() {
		if err != nil {
			a.closeFronts()
			a.listeners.close()
		}
	}()
	// A base URL derived from LISTEN_ADDR's port 0 takes the port really listened on, for the
	// start's log, the session tokens' issuer, the dashboard's links and the demo's origin alike.
	if u, perr := url.Parse(cfg.BaseURL); perr == nil && u.Port() == "0" {
		if _, port, _ := net.SplitHostPort(a.Addr()); port != "" {
			u.Host = net.JoinHostPort(u.Hostname(), port)
			a.Config.BaseURL = u.String()
			cfg = a.Config
		}
	}
	var keys Secrets
	a.DB, keys, err = OpenWithSecrets(ctx, cfg, a.Log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = a.DB.Close()
		}
	}()

	if cfg.FastCommit && a.DB.Dialect == db.SQLite {
		a.Log.WarnContext(ctx, "SLUICE_COMMIT=fast has no effect on SQLite: it has one mode (WAL, synchronous=NORMAL; see the README's commit modes)")
	}
	a.Metrics = metrics.New(metrics.Options{DB: a.DB, Version: Version})
	a.Webhooks, err = newWebhooks(cfg, a.DB, keys, a.Log, a.Metrics.OnWebhookAttempt)
	if err != nil {
		return nil, err
	}
	tenantOpts := []tenants.Option{tenants.WithEvents(a.Webhooks), DefaultPlan(cfg)}
	if o.AuthCacheTTL > 0 {
		tenantOpts = append(tenantOpts, tenants.WithAuthCacheTTL(o.AuthCacheTTL))
	}
	a.Tenants = tenants.NewService(a.DB, keys.Pepper, nil, tenantOpts...)
	a.Usage = usage.New(a.DB, usage.Options{Logger: a.Log, Now: o.Now, OnMinute: thresholdEvents(a.Webhooks)})
	a.Engine = limiter.NewEngine(a.DB, limiter.Options{Now: o.EngineNow, FastCommit: cfg.FastCommit, Lanes: cfg.DecisionLanes, Quotas: a.Tenants, OnDecision: a.Metrics.OnDecision,
		OnShadowRefused: a.Metrics.OnShadowRefused, OnKeyOutcome: func(tenantID int64, o limiter.KeyOutcome) {
			a.Usage.Observe(tenantID, usage.Observation{Name: o.Name, Key: o.Key, OK: o.OK, ShadowRefused: o.ShadowRefused, Remaining: o.Remaining, Max: o.Max})
		}, OnHoldOverage: a.Metrics.OnHoldOverage, AfterIdempotentCommit: haltAfterIdempotentCommit(cfg, a.Log)})
	a.Metrics.WatchGroups(func() metrics.GroupCounts {
		s := a.Engine.GroupStats()
		return metrics.GroupCounts{Groups: s.Groups, Jobs: s.Jobs, RoundTrips: s.RoundTrips, Statements: s.Statements, Seconds: s.Busy.Seconds()}
	})
	a.Captcha = captcha.NewStore(a.DB, o.Now, captcha.WithLogger(a.Log))

	// The captcha's keys derive from SECRET_KEY, so every instance and every restart agrees on
	// them; tokens name BASE_URL as their issuer.
	issuer, err := captcha.NewIssuer(keys.Derive("captcha-hmac"), o.Now)
	if err != nil {
		return nil, err
	}
	signer, err := captcha.NewSigner(keys.Derive("session-token"), cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	if o.Now != nil {
		signer = signer.WithClock(o.Now)
	}
	a.API, err = api.New(api.Deps{
		Engine: a.Engine, Auth: a.Tenants, Audit: a.Tenants, Tenants: a.Tenants, Plans: a.Tenants,
		Captcha: a.Captcha, Issuer: issuer, Signer: signer, Webhooks: a.Webhooks, Logger: a.Log,
		ChallengeIPLimit: o.ChallengeIPLimit, ChallengeKeyLimit: o.ChallengeKeyLimit,
	})
	if err != nil {
		return nil, err
	}
	var mailer ui.LinkMailer // a nil *mail.Sender would be a non-nil interface
	if cfg.SMTPAddr != "" {
		sender, err := mail.New(mail.Config{Addr: cfg.SMTPAddr, From: cfg.SMTPFrom, Username: cfg.SMTPUsername,
			Password: cfg.SMTPPassword, TLS: cfg.SMTPTLS})
		if err != nil {
			return nil, err
		}
		mailer = countedMailer{sender, a.Metrics.OnEmail}
	}
	a.UI, err = ui.New(ui.Deps{
		Tenants: a.Tenants, Engine: a.Engine, Usage: a.Usage, Captcha: a.Captcha, Webhooks: a.Webhooks, Logger: a.Log, Mailer: mailer,
		SessionKey: keys.Derive("dashboard-session"), BaseURL: cfg.BaseURL, Static: web.Static(), Now: o.Now,
		LoginPerAccountIP: o.LoginPerAccountIP, LoginPerIP: o.LoginPerIP, LoginPerAccount: o.LoginPerAccount,
	})
	if err != nil {
		return nil, err
	}
	if cfg.Demo {
		widget := o.Widget
		if widget == nil {
			if widget, err = fs.Sub(web.Static(), "altcha"); err != nil {
				return nil, fmt.Errorf("captcha widget: %w", err)
			}
		}
		a.Demo, err = demo.New(demo.Deps{Tenants: a.Tenants, KeySeed: keys.Derive("demo-keys"), Widget: widget, Origins: []string{cfg.BaseURL}, Logger: a.Log})
		if err != nil {
			return nil, err
		}
	}
	if cfg.GRPCAddr != "" {
		a.Envoy = envoyrls.New(a.Tenants, a.Engine, envoyrls.Options{KeyHeader: cfg.GRPCKeyHeader, AllowUnknown: cfg.GRPCAllowUnknown, Logger: a.Log, Plans: a.Tenants})
	}
	// SLUICE_ADMIN_EMAIL/PASSWORD create the first operator; otherwise an empty database gets a
	// one-time setup link, printed once the address is known.
	if a.setupPath, err = a.UI.Bootstrap(ctx, cfg.AdminEmail, cfg.AdminPassword); err != nil {
		return nil, err
	}
	a.Router, err = a.router()
	if err != nil {
		return nil, err
	}
	return a, nil
}

// router is the one HTTP handler: the operations routes, then each surface's route list.
func (a *App) router() (*gin.Engine, error) {
	surfaces := []httpserver.Surface{a.API, a.UI}
	if a.Demo != nil {
		surfaces = append(surfaces, a.Demo)
	}
	return httpserver.NewRouter(httpserver.Options{
		Logger:         a.Log,
		TrustedProxies: a.Config.TrustedProxies,
		Surfaces:       surfaces,
		NotFound:       a.UI.NotFound,
		Metrics:        a.Metrics,
		MetricsToken:   a.Config.MetricsToken,
		DecisionRoutes: api.DecisionRoutes(),
		Ready: func(ctx context.Context) error {
			if err := a.DB.Ping(ctx); err != nil {
				return err
			}
			if err := a.DB.CheckWritable(ctx); err != nil {
				return err
			}
			return a.DB.CheckSchema(ctx)
		},
	})
}

// Started is closed once Run serves.
func (a *App) Started() <-chan struct{} { return a.started }

// Addr is the address New bound and Run serves (LISTEN_ADDR, with the real port when it was 0).
func (a *App) Addr() string { return addrOf(a.listeners.http) }

// MetricsURL is where the metrics listener serves /metrics once Run serves ("" when it is off).
func (a *App) MetricsURL() string {
	addr := addrOf(a.listeners.metrics)
	if addr == "" {
		return ""
	}
	return "http://" + addr + "/metrics"
}

// GRPCAddr is where the Envoy rate limit service listens once Run serves ("" when it is off).
func (a *App) GRPCAddr() string { return addrOf(a.listeners.grpc) }

// BaseURL is where the server answers: BASE_URL, or the real address when LISTEN_ADDR's port is
// 0 (tests).
func (a *App) BaseURL() string {
	if _, port, _ := net.SplitHostPort(a.Config.ListenAddr); port == "0" && a.Addr() != "" {
		return "http://" + a.Addr()
	}
	return a.Config.BaseURL
}

// shutdownGrace is how long in-flight requests may take to finish once Run's context ends.
const shutdownGrace = 20 * time.Second

// Run starts the background work and serves on New's listeners until ctx ends; then it stops accepting,
// lets in-flight requests finish, stops the background work in the reverse order of its start
// and closes the database. It returns nil on a clean stop.
func (a *App) Run(ctx context.Context) error {
	defer a.DB.Close() // last: everything below has stopped using it
	tuneGC(a.Config)
	metricsListener, grpcListener := a.listeners.metrics, a.listeners.grpc
	base := a.BaseURL()
	if a.Demo != nil {
		a.Demo.AddOrigin(base) // the demo's tenant must allow the origin the page is really served from
	}

	// Started first, stopped last: the engine serves decisions until the HTTP server has drained;
	// usage, metrics and key last-used times record what the engine decides.
	var bg group
	bg.start(ctx, "tenants", a.Tenants.Run)
	bg.start(ctx, "usage", a.Usage.Run)
	bg.start(ctx, "engine", a.Engine.Run)
	bg.start(ctx, "captcha", a.Captcha.Run)
	bg.start(ctx, "webhooks", a.Webhooks.Run)
	bg.start(ctx, "state sweeper", a.sweepState)
	bg.start(ctx, "idempotency key sweeper", a.sweepIdempotency)
	bg.start(ctx, "hold and lease sweeper", a.sweepHolds)
	if a.Config.PprofAddr != "" {
		bg.start(ctx, "pprof", a.servePprof)
	}
	if metricsListener != nil {
		bg.start(ctx, "metrics listener", func(ctx context.Context) error {
			a.frontMetrics.Ready(httpserver.MetricsHandler(a.Metrics, a.Config.MetricsToken))
			return a.frontMetrics.Run(ctx, 5*time.Second)
		})
	}

	if grpcListener != nil {
		// Started last, stopped first: its calls still reach a running engine while it drains.
		// It stops accepting when the shutdown begins, as the HTTP server does, not only once
		// that one has drained.
		bg.start(ctx, "envoy rate limit service", func(stage context.Context) error {
			serve, stop := context.WithCancel(stage)
			defer stop()
			defer context.AfterFunc(ctx, stop)()
			return a.Envoy.Serve(serve, grpcListener)
		})
	}

	// The router serves before the start is announced: whoever waits for the announcement (a
	// person, a script, a test) finds every route answering.
	a.front.Ready(a.Router)
	a.Log.Info("starting", "config", a.Config.String())
	fmt.Fprintf(a.stdout, "Sluice is listening on %s (database %s)\n", base, a.DB.Dialect)
	if u := a.MetricsURL(); u != "" {
		fmt.Fprintf(a.stdout, "Metrics for Prometheus are on %s\n", u)
	}
	if addr := a.GRPCAddr(); addr != "" {
		fmt.Fprintf(a.stdout, "Envoy rate limit service on %s\n", addr)
	}
	if a.Demo != nil {
		fmt.Fprintf(a.stdout, "The captcha demo is on %s/demo\n", base)
	}
	if a.setupPath != "" {
		fmt.Fprintf(a.stdout, "No users yet. Set up the first operator (this link works once): %s%s\n", base, a.setupPath)
	}
	close(a.started)
	err := a.front.Run(ctx, shutdownGrace)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	err = errors.Join(err, bg.stop())
	a.Log.Info("stopped")
	return err
}

// tuneGC applies GOGC and GOMEMLIMIT as configured (config: Sluice's defaults when unset).
func tuneGC(cfg config.Config) {
	debug.SetGCPercent(cfg.GCPercent)
	debug.SetMemoryLimit(cfg.MemoryLimit)
}

// thresholdEvents turns the usage aggregator's minutes into the webhooks' threshold events.
func thresholdEvents(w *webhooks.Service) func(tx *gorm.DB, tenantID int64, limits []usage.LimitMinute) error {
	return func(tx *gorm.DB, tenantID int64, limits []usage.LimitMinute) error {
		ms := make([]webhooks.LimitMinute, len(limits))
		for i, l := range limits {
			ms[i] = webhooks.LimitMinute{Name: l.Name, Minute: l.Minute, Refused: l.Refused}
			for _, k := range l.Near {
				ms[i].NearKeys = append(ms[i].NearKeys, webhooks.NearKey{Key: k.Key, Decisions: k.Hits})
			}
		}
		return w.ThresholdEvents(tx, tenantID, ms)
	}
}
