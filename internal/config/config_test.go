package config

import (
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaultsNeedNoEnvironment(t *testing.T) {
	c, err := FromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != "sqlite:data/sluice.db" || c.ListenAddr != ":8080" || c.BaseURL != "http://localhost:8080" {
		t.Fatalf("defaults: %+v", c)
	}
	if len(c.TrustedProxies) != 0 {
		t.Fatalf("trusted proxies must default to none: %v", c.TrustedProxies)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	_, err := FromEnv(env(map[string]string{
		"DATABASE_URL":       "mysql://x",
		"LISTEN_ADDR":        "nope",
		"BASE_URL":           "ftp://x",
		"SECRET_KEY":         "short",
		"TRUSTED_PROXIES":    "10.0.0.0/8, not-an-ip",
		"SLUICE_ADMIN_EMAIL": "a@b.c",
		"SLUICE_PPROF_ADDR":  "0.0.0.0:6060",
	}))
	if err == nil {
		t.Fatal("invalid configuration accepted")
	}
	for _, want := range []string{"DATABASE_URL", "LISTEN_ADDR", "BASE_URL", "SECRET_KEY", "not-an-ip", "SLUICE_ADMIN_PASSWORD", "SLUICE_PPROF_ADDR"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s: %v", want, err)
		}
	}
}

func TestStringRedactsSecrets(t *testing.T) {
	c, err := FromEnv(env(map[string]string{
		"DATABASE_URL": "postgres://sluice:hunter2-password@db:5432/sluice",
		"SECRET_KEY":   "0123456789abcdef0123456789abcdef-top-secret",
	}))
	if err != nil {
		t.Fatal(err)
	}
	s := c.String()
	if strings.Contains(s, "hunter2") || strings.Contains(s, "top-secret") {
		t.Fatalf("secrets printed: %s", s)
	}
	if !strings.Contains(s, "db:5432") {
		t.Fatalf("the database host should still be visible: %s", s)
	}
}

func TestTrustedProxiesAndLogLevelParse(t *testing.T) {
	c, err := FromEnv(env(map[string]string{"TRUSTED_PROXIES": " 10.0.0.1 ,192.168.0.0/16,", "LOG_LEVEL": "warn", "MIGRATE": "AUTO"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.TrustedProxies) != 2 || c.TrustedProxies[1] != "192.168.0.0/16" || c.LogLevel.String() != "WARN" || !c.MigrateAuto {
		t.Fatalf("parsed: %+v", c)
	}
	if _, err := FromEnv(env(map[string]string{"LOG_LEVEL": "loud"})); err == nil {
		t.Fatal("bad LOG_LEVEL accepted")
	}
}
