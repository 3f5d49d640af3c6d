// Package config turns the process environment into a typed, validated Config. Every variable
// the server reads is one row of the options table below (name, default, meaning, whether it is
// a secret, parser); the README's configuration table is checked against it by a test.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/strictjson"
)

// DefaultDatabaseURL is the zero-setup embedded database.
const DefaultDatabaseURL = "sqlite:data/sluice.db"

// Config is everything the process reads from its environment.
type Config struct {
	DatabaseURL    string   // postgres://... or sqlite:PATH
	ListenAddr     string   // host:port the HTTP server binds
	BaseURL        string   // public URL, used in printed links
	SecretKey      string   // the root secret; on SQLite generated into a file beside the database when empty
	TrustedProxies []string // CIDRs or IPs whose X-Forwarded-For is believed; empty trusts none
	LogLevel       slog.Level
	MigrateAuto    bool // run migrations at start-up on PostgreSQL (always done on SQLite)
	AdminEmail     string
	AdminPassword  string
	PprofAddr      string // when set (loopback only), net/http/pprof listens there for profiling
	// Demo serves /demo, which creates and uses a tenant of its own.
	Demo bool
	// DiscardLegacySecret deletes a root secret an earlier version stored in the database when
	// it differs from the one in use (SLUICE_DISCARD_LEGACY_SECRET); otherwise Sluice refuses to
	// start rather than delete the only copy.
	DiscardLegacySecret bool
	// RotateSecret accepts a root secret other than the one the database was last used with, and
	// records it as the database's (SLUICE_ROTATE_SECRET); otherwise such a start is refused.
	RotateSecret bool
	// FastCommit is SLUICE_COMMIT=fast: decisions on PostgreSQL commit without waiting for disk.
	FastCommit bool
	// DecisionLanes is SLUICE_DECISION_LANES: how many group transactions of decisions may be in
	// flight at once on PostgreSQL (0: the engine's default).
	DecisionLanes int
	// MetricsAddr is the listener of /metrics (loopback by default); "" when off.
	MetricsAddr string
	// MetricsToken, when set, is the bearer token /metrics requires, and puts /metrics on the
	// public listener too.
	MetricsToken string
	// SweepInterval is the time between sweeps of limit_state; 0 disables that sweeper (not the
	// one of idempotency keys).
	SweepInterval time.Duration
	// SweepBatch is the number of rows one sweeping transaction deletes at most.
	SweepBatch int
	// HoldSweepInterval is the time between sweeps of expired holds (released) and leases
	// (deleted): a hold's capacity is back at most this long after its expiry.
	HoldSweepInterval time.Duration
	// GCPercent is the garbage collector's target (GOGC); -1 turns the collector off.
	GCPercent int
	// MemoryLimit is the Go runtime's soft memory limit in bytes (GOMEMLIMIT); math.MaxInt64
	// is none.
	MemoryLimit int64
	// GRPCAddr is the listener of the Envoy rate limit service (gRPC); "" when off.
	GRPCAddr string
	// GRPCKeyHeader is the gRPC metadata header that carries the tenant's secret key.
	GRPCKeyHeader string
	// GRPCAllowUnknown answers OK, without counting, for a descriptor that names no stored
	// definition (GRPC_UNKNOWN_LIMIT=allow); by default such a descriptor is over the limit.
	GRPCAllowUnknown bool
	// WebhookAllowPrivate lets webhook endpoints be loopback, private or link-local addresses
	// (WEBHOOK_ALLOW_PRIVATE); by default only public addresses are reached.
	WebhookAllowPrivate bool
	// TestHaltAfterIdempotentCommit (test-only) stops a lane of decisions for good after it
	// commits a group that stored idempotent answers, before it answers them, so that a test can
	// kill the process between the commit and the answer.
	TestHaltAfterIdempotentCommit bool
	// PlanDecisionsPerSecond, PlanMaxLimits, PlanMaxKeys and PlanMaxOverrides are the plan of
	// every tenant whose operator set no other (PLAN_*); 0 is no limit.
	PlanDecisionsPerSecond                       float64
	PlanMaxLimits, PlanMaxKeys, PlanMaxOverrides int64
	// SMTPAddr is the SMTP server (host:port) that emails invite and password reset links; ""
	// (the default) sends no email. SMTPFrom is the sender address; SMTPUsername and
	// SMTPPassword authenticate (PLAIN, only over TLS or to a loopback relay); SMTPTLS is
	// starttls (required), tls (implicit, port 465) or plain (no TLS, for a local relay).
	SMTPAddr, SMTPFrom, SMTPUsername, SMTPPassword, SMTPTLS string
}

// Defaults of the options whose default is a number or a duration.
const (
	DefaultSweepInterval = time.Minute
	DefaultSweepBatch    = 500
	// DefaultGCPercent and DefaultMemoryLimit trade a little memory for much less collection
	// CPU: Sluice's live heap is small while every request allocates (docs/performance.md).
	DefaultGCPercent   = 400
	DefaultMemoryLimit = 256 << 20
	// The default plan: counts high enough that one tenant alone never meets them, low enough that
	// no tenant can create rows without bound. The decision rate is off by default: enforcing it
	// writes one row per tenant in every decision, which costs a tenant spread over several
	// instances a quarter to a third of its throughput (docs/performance.md); operators of shared
	// instances turn it on (PLAN_DECISIONS_PER_SECOND, or a tenant's own plan).
	DefaultPlanDecisionsPerSecond = 0
	DefaultPlanMaxLimits          = 1_000
	DefaultPlanMaxKeys            = 100
	DefaultPlanMaxOverrides       = 100_000
)

// planCount is the parser of a PLAN_MAX_* option: a whole number from 0 (no limit) to 10^9.
func planCount(name string, field func(c *Config) *int64) func(c *Config, v string) error {
	return func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > 1_000_000_000 {
			return errors.New(name + " must be a whole number from 0 (no limit) to 1000000000")
		}
		*field(c) = n
		return nil
	}
}

// boolean is the parser of a true/false option.
func boolean(name string, field func(c *Config) *bool) func(c *Config, v string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New(name + " must be true or false")
		}
		*field(c) = b
		return nil
	}
}

// Option describes one environment variable.
type Option struct {
	Name    string
	Default string // as documented: a literal value, or a description in parentheses
	Doc     string
	Secret  bool // never printed
	parse   func(c *Config, v string) error
}

const defaultListenAddr = ":8080"

// set is an Option's parser for a plain string field.
func set(field func(c *Config) *string) func(c *Config, v string) error {
	return func(c *Config, v string) error { *field(c) = v; return nil }
}

var options = []Option{
	{Name: "DATABASE_URL", Default: DefaultDatabaseURL, Doc: "`postgres://…` or `sqlite:PATH`",
		parse: func(c *Config, v string) error {
			if !strings.HasPrefix(v, "sqlite:") && !strings.HasPrefix(v, "postgres://") && !strings.HasPrefix(v, "postgresql://") {
				return errors.New("DATABASE_URL must be postgres://… or sqlite:PATH")
			}
			if rest, ok := strings.CutPrefix(v[strings.Index(v, ":")+1:], "//"); ok {
				// pgx reads the host from the first '@', so a password holding an unencoded one
				// would be taken for part of the host name, which its connect error then prints.
				if authority, _, _ := strings.Cut(rest, "/"); strings.Count(authority, "@") > 1 {
					return errors.New("DATABASE_URL: percent-encode each '@' of the user name or password as %40 (postgres://user:p%40ss@host/db)")
				}
			}
			if path, ok := strings.CutPrefix(v, "sqlite:"); ok {
				if strings.TrimSpace(path) == "" {
					return errors.New("DATABASE_URL=sqlite:PATH needs the path of a database file, e.g. sqlite:data/sluice.db")
				}
				if sqliteInMemory(path) {
					return fmt.Errorf("DATABASE_URL=%s is an in-memory SQLite database, which Sluice refuses: each pooled connection "+
						"would get an empty database of its own and everything would be lost at exit; "+
						"give the path of a database file, e.g. sqlite:data/sluice.db", v)
				}
			}
			c.DatabaseURL = v
			return nil
		}},
	{Name: "LISTEN_ADDR", Default: defaultListenAddr, Doc: "where the HTTP server listens",
		parse: func(c *Config, v string) error {
			// A service name ("localhost:http") listens, but BASE_URL's default is made from
			// the port, and a URL's port is a number.
			if err := listenAddr("LISTEN_ADDR", v); err != nil {
				return err
			}
			c.ListenAddr = v
			return nil
		}},
	{Name: "BASE_URL", Default: "(from LISTEN_ADDR)", Doc: "the public URL, `http(s)://host[:port]` without a path (Sluice is served at the root; one trailing `/` is dropped): printed links, token issuer, trusted origin",
		parse: func(c *Config, v string) error {
			// A port given here is printed in every link; one made from LISTEN_ADDR may be 0 (a
			// port the system picks, which the server puts in its links once it listens).
			if u, err := url.Parse(v); err == nil && u.Port() != "" {
				if n, err := strconv.ParseUint(u.Port(), 10, 16); err != nil || n == 0 {
					return fmt.Errorf("BASE_URL: the port %q must be a number from 1 to 65535", u.Port())
				}
			}
			// Links are made as BASE_URL + "/path": a trailing "/" would double it, which the
			// router answers with 404.
			c.BaseURL = strings.TrimSuffix(v, "/")
			return nil
		}},
	{Name: "SECRET_KEY", Default: "(required on PostgreSQL; on SQLite generated into `PATH.secret` beside the database, mode 0600; a given one is written there, one that differs from the file is refused)", Secret: true,
		Doc: "the root secret (32+ characters): signs dashboard sessions, captcha challenges and session tokens, peppers API key hashes; never stored in the database; changing it invalidates every API key and session",
		parse: func(c *Config, v string) error {
			if v != "" && len(v) < 32 {
				return errors.New("SECRET_KEY must be at least 32 characters")
			}
			c.SecretKey = v
			return nil
		}},
	{Name: "SLUICE_DISCARD_LEGACY_SECRET", Default: "false", Doc: "a root secret an earlier version stored in the database that differs from `SECRET_KEY` (or the SQLite key file) makes Sluice refuse to start; `true` deletes it instead (the API keys, sessions and webhook signing secrets made under it stop working)",
		parse: boolean("SLUICE_DISCARD_LEGACY_SECRET", func(c *Config) *bool { return &c.DiscardLegacySecret })},
	{Name: "SLUICE_ROTATE_SECRET", Default: "false", Doc: "a root secret other than the one the database was last used with (it keeps a fingerprint, never the secret; without one, a secret its webhook secrets refute; on SQLite, a missing key file) makes Sluice and its commands refuse to start; `true` lets the server (not the commands) accept it and record it as the database's: a rotation after a leak (the API keys, sessions and webhook signing secrets made under the old one stop working). The server warns on every start while it is set: unset it once every instance runs with the new secret",
		parse: boolean("SLUICE_ROTATE_SECRET", func(c *Config) *bool { return &c.RotateSecret })},
	{Name: "TRUSTED_PROXIES", Default: "(none)", Doc: "comma-separated IPs/CIDRs whose `X-Forwarded-For` is believed",
		parse: func(c *Config, v string) error {
			var errs []error
			for _, p := range strings.Split(v, ",") {
				if p = strings.TrimSpace(p); p == "" {
					continue
				}
				if err := checkTrustedProxy(p); err != nil {
					errs = append(errs, err)
					continue
				}
				c.TrustedProxies = append(c.TrustedProxies, p)
			}
			return errors.Join(errs...)
		}},
	{Name: "LOG_LEVEL", Default: "info", Doc: "`debug`, `info`, `warn`, `error`. The server and `migrate` log to stdout; the `tenant`, `key` and `user` commands log to stderr, keeping stdout for their output (a new key's secret)",
		parse: func(c *Config, v string) error {
			if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
				return fmt.Errorf("LOG_LEVEL must be debug, info, warn or error, not %q", v)
			}
			return nil
		}},
	{Name: "MIGRATE", Default: "", Doc: "`auto` migrates PostgreSQL at start-up (SQLite always migrates); unset, it does not; any other value is refused. The server binds `LISTEN_ADDR`, `METRICS_ADDR` and `GRPC_ADDR` first: a start that cannot listen is refused before it migrates (connections made meanwhile are answered: `/healthz` 200, every other route 503, until it serves)",
		parse: func(c *Config, v string) error {
			switch v {
			case "":
				c.MigrateAuto = false
			case "auto":
				c.MigrateAuto = true
			default:
				return errors.New("MIGRATE must be auto or unset")
			}
			return nil
		}},
	{Name: "SLUICE_ADMIN_EMAIL", Default: "", Doc: "with `SLUICE_ADMIN_PASSWORD`: the first operator, created at start instead of printing a setup link",
		parse: set(func(c *Config) *string { return &c.AdminEmail })},
	{Name: "SLUICE_ADMIN_PASSWORD", Default: "", Secret: true, Doc: "the first operator's password (with `SLUICE_ADMIN_EMAIL`)",
		parse: set(func(c *Config) *string { return &c.AdminPassword })},
	{Name: "METRICS_ADDR", Default: "127.0.0.1:9090", Doc: "the listener that serves `/metrics` alone, for the scraper (`off` for none)",
		parse: func(c *Config, v string) error {
			if v == "off" {
				c.MetricsAddr = ""
				return nil
			}
			if err := listenAddr("METRICS_ADDR", v); err != nil {
				return err
			}
			c.MetricsAddr = v
			return nil
		}},
	{Name: "METRICS_TOKEN", Default: "", Secret: true, Doc: "bearer token `/metrics` then requires on both listeners; only with it is `/metrics` served on the public listener (at least 16 characters)",
		parse: func(c *Config, v string) error {
			if v != "" && len(v) < 16 {
				return errors.New("METRICS_TOKEN must be at least 16 characters")
			}
			c.MetricsToken = v
			return nil
		}},
	{Name: "SWEEP_INTERVAL", Default: "1m", Doc: "time between sweeps of expired limit state (a Go duration of at least 1s; `0` or `off` disables that sweeper: expired idempotency keys are still swept every minute)",
		parse: func(c *Config, v string) error {
			if v == "off" || v == "0" {
				c.SweepInterval = 0
				return nil
			}
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Second {
				return errors.New("SWEEP_INTERVAL must be a duration of at least 1s (e.g. 1m), 0 or off")
			}
			c.SweepInterval = d
			return nil
		}},
	{Name: "HOLD_SWEEP_INTERVAL", Default: "1s", Doc: "time between sweeps of expired holds (released, their amounts given back) and expired leases (deleted; their slots are free at expiry anyway): the documented sweep delay, a Go duration from 100ms to 1h",
		parse: func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < 100*time.Millisecond || d > time.Hour {
				return errors.New("HOLD_SWEEP_INTERVAL must be a duration from 100ms to 1h (e.g. 1s)")
			}
			c.HoldSweepInterval = d
			return nil
		}},
	{Name: "SWEEP_BATCH", Default: strconv.Itoa(DefaultSweepBatch), Doc: "rows per sweeping transaction (1 to 1000)",
		parse: func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1000 {
				return errors.New("SWEEP_BATCH must be a whole number from 1 to 1000")
			}
			c.SweepBatch = n
			return nil
		}},
	{Name: "SLUICE_COMMIT", Default: "durable", Doc: "`durable`: every acknowledged decision survives a database crash; `fast` (PostgreSQL): decisions commit without waiting for the disk, so a database crash can lose (and admit again) the decisions of its last moments, never corrupting state; definitions, keys, users and audit are always durable",
		parse: func(c *Config, v string) error {
			switch v {
			case "durable":
				c.FastCommit = false
			case "fast":
				c.FastCommit = true
			default:
				return errors.New("SLUICE_COMMIT must be durable or fast")
			}
			return nil
		}},
	{Name: "SLUICE_DECISION_LANES", Default: "1", Doc: "PostgreSQL: how many group transactions of decisions one instance keeps in flight at once (1 to 64; more was slower on 2 cores shared with PostgreSQL: measure first); a request goes to the lane of its first row (or of its tenant's plan), so a key decided alone and inside a batch led by another key can be in two lanes, which then conflict on it and retry. SQLite always uses one",
		parse: func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 64 {
				return errors.New("SLUICE_DECISION_LANES must be a whole number from 1 to 64")
			}
			c.DecisionLanes = n
			return nil
		}},
	{Name: "SLUICE_DEMO", Default: "false", Doc: "`true` serves `/demo`, the captcha flow in a browser, on a tenant the demo creates (named `demo`); `make run` sets it",
		parse: boolean("SLUICE_DEMO", func(c *Config) *bool { return &c.Demo })},
	{Name: "SLUICE_PPROF_ADDR", Default: "", Doc: "loopback `IP:port` (`127.0.0.1:6060`, `[::1]:6060`; not a host name) serving `net/http/pprof`",
		parse: func(c *Config, v string) error {
			if v != "" {
				host, _, err := net.SplitHostPort(v)
				if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
					return errors.New("SLUICE_PPROF_ADDR must be a loopback IP:port (not a host name), e.g. 127.0.0.1:6060")
				}
			}
			c.PprofAddr = v
			return nil
		}},
	{Name: "SLUICE_TEST_HALT_AFTER_IDEMPOTENT_COMMIT", Default: "false", Doc: "test-only, never in production: `true` stops a lane of decisions for good after it commits idempotent decisions and before it answers them (the crash test kills the process there)",
		parse: boolean("SLUICE_TEST_HALT_AFTER_IDEMPOTENT_COMMIT", func(c *Config) *bool { return &c.TestHaltAfterIdempotentCommit })},
	{Name: "GOGC", Default: strconv.Itoa(DefaultGCPercent), Doc: "the Go garbage collector's target percentage (`off` disables it)",
		parse: func(c *Config, v string) error {
			if v == "off" {
				c.GCPercent = -1
				return nil
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return errors.New("GOGC must be a positive whole number or off")
			}
			c.GCPercent = n
			return nil
		}},
	{Name: "GOMEMLIMIT", Default: "256MiB", Doc: "the Go runtime's soft memory limit: a whole number of bytes with an optional `B`, `KiB`, `MiB`, `GiB` or `TiB` suffix (e.g. `512MiB`, `1GiB`; not `1GB` nor `1.5GiB`), or `off`; the Go runtime itself reads it when the process starts and stops the process with a fatal error (`malformed GOMEMLIMIT`) on any other value, before Sluice can report it",
		parse: func(c *Config, v string) error {
			// The runtime parsed GOMEMLIMIT before main, with the syntax parseBytes reads, and
			// threw on a malformed value: in a running process this error never fires. It stays
			// for FromEnv given another environment than the process's (tests, tools).
			n, err := parseBytes(v)
			if err != nil {
				return fmt.Errorf("GOMEMLIMIT: %w", err)
			}
			c.MemoryLimit = n
			return nil
		}},
	{Name: "GRPC_ADDR", Default: "off", Doc: "where the Envoy rate limit service (gRPC `ShouldRateLimit`, docs/envoy.md) listens, `host:port` (`off` for none); it speaks cleartext HTTP/2 (h2c) and its calls carry a tenant's secret key, so bind it to loopback or a private network",
		parse: func(c *Config, v string) error {
			if v == "off" {
				c.GRPCAddr = ""
				return nil
			}
			if err := listenAddr("GRPC_ADDR", v); err != nil {
				return err
			}
			c.GRPCAddr = v
			return nil
		}},
	{Name: "GRPC_KEY_HEADER", Default: "authorization", Doc: "the gRPC metadata header carrying the tenant's secret key (`Bearer sk_live_…` or the bare key); the headers gRPC or HTTP/2 set themselves (`content-type`, `user-agent`, `te`, `host`, the connection-specific ones), `grpc-*` and `*-bin` are refused",
		parse: func(c *Config, v string) error {
			if !grpcHeaderRE.MatchString(v) || strings.HasPrefix(v, "grpc-") || strings.HasSuffix(v, "-bin") {
				return errors.New("GRPC_KEY_HEADER must be a lower-case metadata header name such as authorization or x-sluice-key")
			}
			if grpcTransportHeaders[v] {
				return fmt.Errorf("GRPC_KEY_HEADER %s is a header gRPC or HTTP/2 sets or drops itself, which can never carry the key: use authorization or a name of your own such as x-sluice-key", v)
			}
			c.GRPCKeyHeader = v
			return nil
		}},
	{Name: "GRPC_UNKNOWN_LIMIT", Default: "deny", Doc: "a descriptor naming no stored definition: `deny` answers it (and the request) `OVER_LIMIT`, `allow` answers it `OK` without counting",
		parse: func(c *Config, v string) error {
			switch v {
			case "deny":
				c.GRPCAllowUnknown = false
			case "allow":
				c.GRPCAllowUnknown = true
			default:
				return errors.New("GRPC_UNKNOWN_LIMIT must be deny or allow")
			}
			return nil
		}},
	{Name: "WEBHOOK_ALLOW_PRIVATE", Default: "false", Doc: "`true` lets webhook endpoints be loopback, private, link-local or other non-public addresses (checked after DNS); leave it off unless every receiver is on your own network",
		parse: boolean("WEBHOOK_ALLOW_PRIVATE", func(c *Config) *bool { return &c.WebhookAllowPrivate })},
	{Name: "PLAN_DECISIONS_PER_SECOND", Default: strconv.Itoa(DefaultPlanDecisionsPerSecond), Doc: "the default plan's most decisions per second per tenant, over all instances (a burst of one second's worth), a decimal number as JSON writes it (`20000`, `0.5`); `0`, the default, for no limit (the rate costs throughput across instances: set it on a shared instance); an operator sets a tenant's own plan on its dashboard page",
		parse: func(c *Config, v string) error {
			// Written as JSON writes a number (the dashboard's plan form reads it alike): not Go's
			// other literals, which ParseFloat also takes (0x1p4, 1_0, Inf). A positive number
			// below the smallest double ("1e-400") would read as 0, no limit: refused.
			n, err := strictjson.ParseNumber(v)
			if errors.Is(err, strictjson.ErrUnderflow) {
				return fmt.Errorf("PLAN_DECISIONS_PER_SECOND=%s is too close to 0 for the server to hold and would read as 0, no limit: set 0 for no limit, or a rate of at least 5e-324", v)
			}
			if err != nil || n < 0 || n > 1_000_000_000 {
				return fmt.Errorf("PLAN_DECISIONS_PER_SECOND must be a decimal number from 0 (no limit) to 1000000000, such as 20000 or 0.5: %q is not", v)
			}
			c.PlanDecisionsPerSecond = n
			return nil
		}},
	{Name: "PLAN_MAX_LIMITS", Default: strconv.Itoa(DefaultPlanMaxLimits), Doc: "the default plan's most limit definitions per tenant (`0` for no limit)",
		parse: planCount("PLAN_MAX_LIMITS", func(c *Config) *int64 { return &c.PlanMaxLimits })},
	{Name: "PLAN_MAX_KEYS", Default: strconv.Itoa(DefaultPlanMaxKeys), Doc: "the default plan's most API keys (not revoked) per tenant (`0` for no limit)",
		parse: planCount("PLAN_MAX_KEYS", func(c *Config) *int64 { return &c.PlanMaxKeys })},
	{Name: "PLAN_MAX_OVERRIDES", Default: strconv.Itoa(DefaultPlanMaxOverrides), Doc: "the default plan's most overrides per tenant, over all its limits (`0` for no limit)",
		parse: planCount("PLAN_MAX_OVERRIDES", func(c *Config) *int64 { return &c.PlanMaxOverrides })},
	{Name: "SMTP_ADDR", Default: "", Doc: "the SMTP server (`host:port`) that emails invite and password reset links (they are still shown once on the page); empty sends no email",
		parse: func(c *Config, v string) error {
			if v != "" {
				if host, port, err := net.SplitHostPort(v); err != nil || host == "" || port == "" {
					return errors.New("SMTP_ADDR must be host:port, e.g. smtp.example.com:587")
				}
			}
			c.SMTPAddr = v
			return nil
		}},
	{Name: "SMTP_FROM", Default: "", Doc: "the sender address of those emails, a bare address such as `sluice@example.com` (required with `SMTP_ADDR`)",
		parse: set(func(c *Config) *string { return &c.SMTPFrom })},
	{Name: "SMTP_USERNAME", Default: "", Doc: "with `SMTP_PASSWORD`: PLAIN authentication to the SMTP server (only over TLS, or to a loopback relay)",
		parse: set(func(c *Config) *string { return &c.SMTPUsername })},
	{Name: "SMTP_PASSWORD", Default: "", Secret: true, Doc: "the SMTP password (with `SMTP_USERNAME`)",
		parse: set(func(c *Config) *string { return &c.SMTPPassword })},
	{Name: "SMTP_TLS", Default: "starttls", Doc: "`starttls`: upgrade with STARTTLS and refuse to send when the server does not offer it; `tls`: TLS from the first byte (port 465); `plain`: no TLS, only for a relay on the same host or a trusted network",
		parse: func(c *Config, v string) error {
			switch v {
			case "starttls", "tls", "plain":
				c.SMTPTLS = v
				return nil
			}
			return errors.New("SMTP_TLS must be starttls, tls or plain")
		}},
}

// sqliteInMemory reports whether the PATH of sqlite:PATH asks for an in-memory (or temporary)
// database rather than a file, in any spelling SQLite or its Go driver reads as one: ":memory:",
// a file: URI whose path is ":memory:" or empty, or a mode=memory or vfs=memdb parameter, in any
// case and with any percent-encoding. Such a database is private to one connection of the pool
// (or gone when the last one closes). Sluice opens PATH as a file name, never as a URI, so none
// of these would be in memory any more; they are refused because they cannot mean a file.
func sqliteInMemory(path string) bool {
	p := strings.ToLower(strings.TrimSpace(path))
	for range 3 { // %253A is %3A is ':'
		u := percentDecode(p)
		if u == p {
			break
		}
		p = strings.ToLower(u)
	}
	if strings.Contains(p, "mode=memory") || strings.Contains(p, "vfs=memdb") {
		return true
	}
	if rest, ok := strings.CutPrefix(p, "file:"); ok {
		if i := strings.IndexAny(rest, "?#"); i >= 0 {
			rest = rest[:i]
		}
		if auth, ok := strings.CutPrefix(rest, "//"); ok { // file://[localhost]/path
			if i := strings.IndexByte(auth, '/'); i >= 0 {
				rest = auth[i:]
			} else {
				rest = ""
			}
		}
		p = rest
	}
	return p == "" || p == ":memory:"
}

// percentDecode decodes every valid %HH of s as SQLite does, leaving any other '%' as it is.
func percentDecode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// smtpAddressRE is a bare email address, as SMTP_FROM must be: no display name, no line break.
var smtpAddressRE = regexp.MustCompile(`^[^\s@<>,;:"()\[\]\\]+@[^\s@<>,;:"()\[\]\\]+$`)

// grpcHeaderRE is a gRPC metadata key (lower case); gRPC's own "grpc-" keys and binary "-bin"
// keys are refused beside it.
var grpcHeaderRE = regexp.MustCompile(`^[a-z0-9_.-]+$`)

// grpcTransportHeaders are the headers whose value a call's metadata cannot set: gRPC writes
// content-type, te and user-agent itself (grpc-go's transport drops them from a call's metadata
// and sends its own; Envoy's gRPC client sends its own user-agent), and HTTP/2 replaces host with
// :authority and forbids the connection-specific ones (RFC 9113, 8.2.2). A key header among them
// would start and then leave every call UNAUTHENTICATED. Pseudo-headers (":path") fail
// grpcHeaderRE.
var grpcTransportHeaders = map[string]bool{
	"content-type": true, "te": true, "user-agent": true, "host": true,
	"connection": true, "keep-alive": true, "proxy-connection": true, "transfer-encoding": true, "upgrade": true,
}

// parseBytes reads the Go runtime's GOMEMLIMIT syntax: a whole number of bytes with an optional
// B, KiB, MiB, GiB or TiB suffix, or "off" (TestGOMEMLIMITIsTheRuntimesSyntax compares the two).
func parseBytes(v string) (int64, error) {
	if v == "off" {
		return math.MaxInt64, nil
	}
	mult := int64(1)
	for i, suffix := range []string{"TiB", "GiB", "MiB", "KiB", "B"} {
		if strings.HasSuffix(v, suffix) {
			v, mult = strings.TrimSuffix(v, suffix), int64(1)<<(10*(4-i))
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, errors.New("must be a whole number of bytes with an optional B, KiB, MiB, GiB or TiB suffix (e.g. 512MiB, 1GiB), or off")
	}
	return n * mult, nil
}

// Options lists every environment variable the server reads, in the README's order.
func Options() []Option { return options }

// FromEnv reads a Config from getenv. Unset variables take their defaults; every problem is
// reported at once. Values are trimmed of surrounding whitespace, except secrets: a password,
// token or key is used exactly as given, so one that starts or ends with whitespace (most likely
// the line break a file or a secret store left) is refused, naming the variable, rather than
// trimmed into something other than what was typed or kept with a character nobody meant.
func FromEnv(getenv func(string) string) (Config, error) {
	var c Config
	var errs []error
	for _, o := range options {
		v := getenv(o.Name)
		if !o.Secret {
			v = strings.TrimSpace(v)
		} else if strings.TrimSpace(v) != v {
			errs = append(errs, fmt.Errorf("%s starts or ends with whitespace (a line break left by a file or secret store?): a secret is used exactly as given, so remove it", o.Name))
		}
		if v == "" && !strings.HasPrefix(o.Default, "(") {
			v = o.Default
		}
		if err := o.parse(&c, v); err != nil {
			errs = append(errs, err)
		}
	}
	if c.BaseURL == "" {
		// A LISTEN_ADDR that was refused has said so: its default stands in, so that the
		// BASE_URL nobody set is not reported as a second problem.
		c.BaseURL = defaultBaseURL(cmp.Or(c.ListenAddr, defaultListenAddr))
	}
	if errs = append(errs, c.crossErrors()...); len(errs) > 0 {
		return c, fmt.Errorf("config: %w", errors.Join(errs...))
	}
	return c, nil
}

// listenAddr checks the listener address of the variable name: host:port with a numeric port,
// refused at start with the variable's name rather than when the listener fails to open (after
// the database was migrated).
func listenAddr(name, v string) error {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%s: the port %q must be a number from 0 to 65535", name, port)
	}
	return nil
}

func defaultBaseURL(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://localhost:8080"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// Validate checks a Config built in code (tests start from Default and change fields) as FromEnv
// checks the environment.
func (c Config) Validate() error {
	errs := c.crossErrors()
	checks := map[string]string{"DATABASE_URL": c.DatabaseURL, "LISTEN_ADDR": c.ListenAddr, "SWEEP_BATCH": strconv.Itoa(c.SweepBatch),
		"SMTP_ADDR": c.SMTPAddr, "SMTP_TLS": c.SMTPTLS}
	for _, o := range options {
		if v, ok := checks[o.Name]; ok {
			if err := o.parse(&Config{}, v); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, p := range c.TrustedProxies { // each entry as given: a comma in one is its error
		if err := checkTrustedProxy(p); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("config: %w", errors.Join(errs...))
	}
	return nil
}

// checkTrustedProxy refuses a TRUSTED_PROXIES entry the router cannot read. The router reads
// each entry with netip (a CIDR when it holds a slash, otherwise an address; see
// httpserver.parseProxies), and gin's SetTrustedProxies reads it again with net: an entry is
// accepted only when both take it. netip refuses a prefix length with leading zeros
// ("10.0.0.0/08"), which net.ParseCIDR takes; net refuses an address with a zone
// ("fe80::1%eth0"), which netip.ParseAddr takes.
func checkTrustedProxy(p string) error {
	if strings.Contains(p, "/") {
		if _, err := netip.ParsePrefix(p); err != nil {
			return fmt.Errorf("TRUSTED_PROXIES: %q is not a CIDR such as 10.0.0.0/8 or 2001:db8::/32 (a prefix length of 0 to 32 for IPv4, 0 to 128 for IPv6, without leading zeros)", p)
		}
		return nil
	}
	a, err := netip.ParseAddr(p)
	if err != nil {
		return fmt.Errorf("TRUSTED_PROXIES: %q is neither an IP nor a CIDR", p)
	}
	if a.Zone() != "" {
		return fmt.Errorf("TRUSTED_PROXIES: %q has an IPv6 zone; give the address without %%%s", p, a.Zone())
	}
	return nil
}

// crossErrors are the problems no single variable's parser can see.
func (c Config) crossErrors() []error {
	var errs []error
	if u, err := url.Parse(c.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, errors.New("BASE_URL must be an absolute http(s) URL"))
	} else if u.Path != "" || u.User != nil || strings.ContainsAny(c.BaseURL, "?#") {
		errs = append(errs, errors.New("BASE_URL must be http(s)://host[:port] without a path, query, fragment or user: Sluice is served at the root of its host"))
	}
	if (c.AdminEmail == "") != (c.AdminPassword == "") {
		errs = append(errs, errors.New("SLUICE_ADMIN_EMAIL and SLUICE_ADMIN_PASSWORD go together"))
	}
	if c.SMTPAddr != "" && !smtpAddressRE.MatchString(c.SMTPFrom) {
		errs = append(errs, errors.New("SMTP_FROM must be a bare email address such as sluice@example.com when SMTP_ADDR is set"))
	}
	if c.SMTPAddr == "" && (c.SMTPFrom != "" || c.SMTPUsername != "" || c.SMTPPassword != "") {
		errs = append(errs, errors.New("SMTP_FROM, SMTP_USERNAME and SMTP_PASSWORD need SMTP_ADDR"))
	}
	if (c.SMTPUsername == "") != (c.SMTPPassword == "") {
		errs = append(errs, errors.New("SMTP_USERNAME and SMTP_PASSWORD go together"))
	}
	// Go's PLAIN authentication refuses to send a password in the clear except to a loopback
	// relay: say so at start-up rather than at the first invite.
	if host, _, _ := net.SplitHostPort(c.SMTPAddr); c.SMTPTLS == "plain" && c.SMTPUsername != "" && host != "localhost" && host != "127.0.0.1" && host != "::1" {
		errs = append(errs, errors.New("SMTP_USERNAME with SMTP_TLS=plain works only with a relay on localhost: a password is never sent in the clear"))
	}
	return errs
}

// Default is the configuration of an empty environment.
func Default() Config {
	c, err := FromEnv(func(string) string { return "" })
	if err != nil {
		panic(err) // the defaults are constants: a failure is a bug in this file
	}
	return c
}

// String prints the configuration with secrets redacted, for start-up logs.
func (c Config) String() string {
	secret := func(s string) string {
		if s == "" {
			return "(unset)"
		}
		return "[redacted]"
	}
	return fmt.Sprintf("database=%s listen=%s base=%s trusted_proxies=%v log_level=%s migrate_auto=%t secret_key=%s discard_legacy_secret=%t rotate_secret=%t metrics_addr=%q metrics_token=%s sweep_interval=%s sweep_batch=%d pprof=%q demo=%t fast_commit=%t gogc=%d grpc_addr=%q grpc_key_header=%q grpc_allow_unknown=%t webhook_allow_private=%t smtp_addr=%q smtp_from=%q smtp_username=%q smtp_password=%s smtp_tls=%s",
		RedactURL(c.DatabaseURL), c.ListenAddr, c.BaseURL, c.TrustedProxies, c.LogLevel, c.MigrateAuto,
		secret(c.SecretKey), c.DiscardLegacySecret, c.RotateSecret, c.MetricsAddr, secret(c.MetricsToken), c.SweepInterval, c.SweepBatch, c.PprofAddr, c.Demo, c.FastCommit, c.GCPercent, c.GRPCAddr, c.GRPCKeyHeader, c.GRPCAllowUnknown, c.WebhookAllowPrivate,
		c.SMTPAddr, c.SMTPFrom, c.SMTPUsername, secret(c.SMTPPassword), c.SMTPTLS)
}

// RedactURL hides the credentials of a database URL, for logs. It hides too much rather than too
// little, because pgx reads URLs more leniently than net/url (an unencoded '#', '?', '/' or '@'
// in a password is accepted or misread): everything up to the last '@' after "//" (the
// userinfo, whole or in pieces) and the value of every query parameter whose key names a
// password (password, sslpassword: compared case-insensitively, percent-decoded and trimmed of
// spaces, the query split at '&' only, as pgx reads it) are replaced by "xxxxx".
func RedactURL(s string) string {
	hidden := make([]bool, len(s))
	hide := func(from, to int) {
		for i := from; i < to; i++ {
			hidden[i] = true
		}
	}
	if slashes := strings.Index(s, "//"); slashes >= 0 {
		if at := strings.LastIndex(s, "@"); at > slashes {
			hide(slashes+2, at)
		}
	}
	// The query as pgx reads it: pairs split at '&' only, a key's spaces trimmed. It starts at
	// the first '?' after the userinfo, which may hold a '?' or an '@' of its own, and a
	// password in the query may hold them too: so every '?' is taken for the start, and every
	// value whose key names a password after any of them is hidden (more than that is only safer).
	for q := strings.IndexByte(s, '?'); q >= 0; {
		pos := q + 1
		for _, pair := range strings.Split(s[pos:], "&") {
			rawKey, value, ok := strings.Cut(pair, "=")
			key, err := url.QueryUnescape(rawKey)
			if err != nil {
				key = rawKey
			}
			if ok && strings.Contains(strings.ToLower(strings.TrimSpace(key)), "password") {
				start := pos + len(rawKey) + 1
				hide(start, start+len(value))
			}
			pos += len(pair) + 1
		}
		next := strings.IndexByte(s[q+1:], '?')
		if next < 0 {
			break
		}
		q += 1 + next
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if !hidden[i] {
			b.WriteByte(s[i])
		} else if i == 0 || !hidden[i-1] {
			b.WriteString("xxxxx")
		}
	}
	return b.String()
}
