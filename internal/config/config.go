// Package config turns the process environment into a typed, validated Config.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
)

// DefaultDatabaseURL is the zero-setup embedded database.
const DefaultDatabaseURL = "sqlite:data/sluice.db"

// Config is everything the process reads from its environment.
type Config struct {
	DatabaseURL    string   // postgres://... or sqlite:PATH
	ListenAddr     string   // host:port the HTTP server binds
	BaseURL        string   // public URL, used in printed links
	SecretKey      string   // signs sessions and challenges; generated and stored when empty
	TrustedProxies []string // CIDRs or IPs whose X-Forwarded-For is believed; empty trusts none
	LogLevel       slog.Level
	MigrateAuto    bool // run migrations at start-up on PostgreSQL (always done on SQLite)
	AdminEmail     string
	AdminPassword  string
	PprofAddr      string // when set (loopback only), net/http/pprof listens there for profiling
}

// FromEnv reads a Config from getenv. Unset variables take their defaults.
func FromEnv(getenv func(string) string) (Config, error) {
	c := Config{
		DatabaseURL:   getenv("DATABASE_URL"),
		ListenAddr:    getenv("LISTEN_ADDR"),
		BaseURL:       getenv("BASE_URL"),
		SecretKey:     getenv("SECRET_KEY"),
		MigrateAuto:   strings.EqualFold(getenv("MIGRATE"), "auto"),
		AdminEmail:    getenv("SLUICE_ADMIN_EMAIL"),
		AdminPassword: getenv("SLUICE_ADMIN_PASSWORD"),
		PprofAddr:     getenv("SLUICE_PPROF_ADDR"),
	}
	if c.DatabaseURL == "" {
		c.DatabaseURL = DefaultDatabaseURL
	}
	if c.ListenAddr == "" {
		c.ListenAddr = ":8080"
	}
	for _, p := range strings.Split(getenv("TRUSTED_PROXIES"), ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.TrustedProxies = append(c.TrustedProxies, p)
		}
	}
	if lvl := getenv("LOG_LEVEL"); lvl != "" {
		if err := c.LogLevel.UnmarshalText([]byte(lvl)); err != nil {
			return c, fmt.Errorf("config: LOG_LEVEL: %w", err)
		}
	}
	if c.BaseURL == "" {
		c.BaseURL = defaultBaseURL(c.ListenAddr)
	}
	return c, c.Validate()
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

// Validate reports every problem with the configuration at once.
func (c Config) Validate() error {
	var errs []error
	if !strings.HasPrefix(c.DatabaseURL, "sqlite:") &&
		!strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") {
		errs = append(errs, errors.New("DATABASE_URL must be postgres://… or sqlite:PATH"))
	}
	if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
		errs = append(errs, fmt.Errorf("LISTEN_ADDR: %w", err))
	}
	if u, err := url.Parse(c.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, errors.New("BASE_URL must be an absolute http(s) URL"))
	}
	if c.SecretKey != "" && len(c.SecretKey) < 32 {
		errs = append(errs, errors.New("SECRET_KEY must be at least 32 characters"))
	}
	for _, p := range c.TrustedProxies {
		if net.ParseIP(p) == nil {
			if _, _, err := net.ParseCIDR(p); err != nil {
				errs = append(errs, fmt.Errorf("TRUSTED_PROXIES: %q is neither an IP nor a CIDR", p))
			}
		}
	}
	if c.PprofAddr != "" {
		host, _, err := net.SplitHostPort(c.PprofAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			errs = append(errs, errors.New("SLUICE_PPROF_ADDR must be a loopback host:port, e.g. 127.0.0.1:6060"))
		}
	}
	if (c.AdminEmail == "") != (c.AdminPassword == "") {
		errs = append(errs, errors.New("SLUICE_ADMIN_EMAIL and SLUICE_ADMIN_PASSWORD go together"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("config: %w", errors.Join(errs...))
	}
	return nil
}

// String prints the configuration with secrets redacted, for start-up logs.
func (c Config) String() string {
	return fmt.Sprintf("database=%s listen=%s base=%s trusted_proxies=%v log_level=%s migrate_auto=%t secret_key=%s",
		RedactURL(c.DatabaseURL), c.ListenAddr, c.BaseURL, c.TrustedProxies, c.LogLevel, c.MigrateAuto, redact(c.SecretKey))
}

func redact(s string) string {
	if s == "" {
		return "(generated)"
	}
	return "[redacted]"
}

// RedactURL hides the password of a database URL.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
