package config

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
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

// TestStringRedactsSecrets: the start-up log line never holds the root secret nor the database
// password, however the URL carries it: userinfo (also with characters net/url refuses but pgx
// accepts), or password and sslpassword query parameters.
func TestStringRedactsSecrets(t *testing.T) {
	for _, tc := range []struct{ url, visible string }{
		{"postgres://sluice:hunter2-password@db:5432/sluice", "db:5432/sluice"},
		{"postgres://db:5432/sluice?user=sluice&password=hunter2", "db:5432/sluice?user=sluice&password=xxxxx"},
		{"postgresql://db:5432/sluice?PassWord=hunter2&sslmode=require", "sslmode=require"},
		{"postgres://db:5432/sluice?sslmode=verify-full&sslpassword=hunter2", "db:5432/sluice?sslmode=verify-full&sslpassword=xxxxx"},
		{"postgres://db:5432/sluice?%70assword=hunter2", "db:5432/sluice"},
		{"postgres://sluice:hun#ter2@db:5432/sluice", "xxxxx@db:5432/sluice"},
		{"postgres://sluice:hun?ter2@db:5432/sluice", "xxxxx@db:5432/sluice"},
		{"postgres://sluice:hun/ter2@db:5432/sluice", "xxxxx@db:5432/sluice"},
		// An unencoded '@' in the userinfo is refused before (TestDatabaseURLRefusesAnUnencodedAtInThePassword).
		{"postgres://sluice:h%23unter2@db:5432/sluice?password=hunter2", "xxxxx@db:5432/sluice?password=xxxxx"},
		{"postgres://db:5432/sluice?password=hun@ter2&sslmode=require", "&sslmode=require"},
		{"postgres://sluice:hun?x@db/sluice?password=hunter2", "xxxxx@db/sluice?password=xxxxx"},
		// pgx splits the query at '&' only and trims a key's spaces.
		{"postgres://db/sluice?sslmode=disable&password=hun?ter2", "db/sluice?sslmode=disable&password=xxxxx"},
		{"postgres://db/sluice?sslmode=disable&sslpassword=hun?ter2", "sslpassword=xxxxx"},
		{"postgres://db/sluice?sslmode=disable& password=hunter2", "& password=xxxxx"},
		{"postgres://db/sluice?sslmode=disable&password =hunter2", "&password =xxxxx"},
	} {
		c, err := FromEnv(env(map[string]string{
			"DATABASE_URL": tc.url,
			"SECRET_KEY":   "0123456789abcdef0123456789abcdef-top-secret",
		}))
		if err != nil {
			t.Fatal(err)
		}
		s := c.String()
		if strings.Contains(s, "hun") || strings.Contains(s, "ter2") || strings.Contains(s, "top-secret") {
			t.Errorf("%s: secrets printed: %s", tc.url, s)
		}
		if !strings.Contains(s, tc.visible) {
			t.Errorf("%s: %q should still be visible: %s", tc.url, tc.visible, s)
		}
	}
	if got := RedactURL("sqlite:data/sluice.db"); got != "sqlite:data/sluice.db" {
		t.Errorf("a SQLite path is shown as %q", got)
	}
}

// TestBaseURLIsTheRootOfAHost: printed links are BASE_URL + "/setup?…", so one trailing "/" is
// dropped (it would make "//setup", a 404) and a path, query, fragment or user is refused.
func TestBaseURLIsTheRootOfAHost(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8080/":      "http://127.0.0.1:8080",
		"https://sluice.example.com":  "https://sluice.example.com",
		"https://sluice.example.com/": "https://sluice.example.com",
	} {
		c, err := FromEnv(env(map[string]string{"BASE_URL": in}))
		if err != nil || c.BaseURL != want {
			t.Errorf("BASE_URL=%s: %q %v, want %q", in, c.BaseURL, err, want)
		}
	}
	for _, bad := range []string{"https://example.com/sluice", "https://example.com//", "https://example.com/?x=1", "https://example.com?",
		"https://example.com#top", "https://user:pw@example.com", "https://example.com/sluice/", "http://example.com:99999", "http://example.com:0"} {
		if c, err := FromEnv(env(map[string]string{"BASE_URL": bad})); err == nil || !strings.Contains(err.Error(), "BASE_URL") {
			t.Errorf("BASE_URL=%s accepted as %q (%v)", bad, c.BaseURL, err)
		}
	}
	// A LISTEN_ADDR whose port is a service's name listens, but BASE_URL's default is made from
	// its port: it is refused as LISTEN_ADDR's problem, not as a BASE_URL nobody set.
	if _, err := FromEnv(env(map[string]string{"LISTEN_ADDR": "localhost:http"})); err == nil || !strings.Contains(err.Error(), "LISTEN_ADDR") || strings.Contains(err.Error(), "BASE_URL") {
		t.Errorf("LISTEN_ADDR=localhost:http: %v, want LISTEN_ADDR's port named as the problem", err)
	}
	for listen, base := range map[string]string{"127.0.0.1:9090": "http://127.0.0.1:9090", "127.0.0.1:0": "http://127.0.0.1:0", ":0": "http://localhost:0"} {
		// Port 0: the system picks one, and the server puts it in its links once it listens.
		if c, err := FromEnv(env(map[string]string{"LISTEN_ADDR": listen})); err != nil || c.BaseURL != base {
			t.Errorf("LISTEN_ADDR=%s: BASE_URL %q, %v; want %q", listen, c.BaseURL, err, base)
		}
	}
	if _, err := FromEnv(env(map[string]string{"LISTEN_ADDR": "localhost:+8080"})); err == nil || !strings.Contains(err.Error(), "LISTEN_ADDR") {
		t.Errorf("LISTEN_ADDR=localhost:+8080: %v, want LISTEN_ADDR's port named as the problem", err)
	}
	c := Default()
	c.BaseURL = "http://localhost:8080/admin"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "BASE_URL") {
		t.Errorf("Validate accepted BASE_URL %s: %v", c.BaseURL, err)
	}
}

func TestTrustedProxiesAndLogLevelParse(t *testing.T) {
	c, err := FromEnv(env(map[string]string{"TRUSTED_PROXIES": " 10.0.0.1 ,192.168.0.0/16,", "LOG_LEVEL": "warn", "MIGRATE": "auto"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.TrustedProxies) != 2 || c.TrustedProxies[1] != "192.168.0.0/16" || c.LogLevel.String() != "WARN" || !c.MigrateAuto {
		t.Fatalf("parsed: %+v", c)
	}
	if _, err := FromEnv(env(map[string]string{"LOG_LEVEL": "loud"})); err == nil || !strings.Contains(err.Error(), `LOG_LEVEL must be debug, info, warn or error, not "loud"`) {
		t.Fatalf("bad LOG_LEVEL: %v; want it refused, naming the values it takes", err)
	}
}

// TestMigrateIsAutoOrUnset: MIGRATE, like every other enumerated variable, refuses a value it
// does not know (a typo such as "atuo", or "true") rather than quietly leaving migrations off.
func TestMigrateIsAutoOrUnset(t *testing.T) {
	if c, err := FromEnv(env(map[string]string{"MIGRATE": "auto"})); err != nil || !c.MigrateAuto {
		t.Fatalf("MIGRATE=auto: %v %v", c.MigrateAuto, err)
	}
	if d := Default(); d.MigrateAuto {
		t.Fatal("MIGRATE unset migrates")
	}
	for _, bad := range []string{"atuo", "true", "yes", "on", "off", "AUTO", "manual"} {
		_, err := FromEnv(env(map[string]string{"MIGRATE": bad}))
		if err == nil || !strings.Contains(err.Error(), "MIGRATE must be auto or unset") {
			t.Errorf("MIGRATE=%s: %v, want an error naming MIGRATE and its values", bad, err)
		}
	}
}

func TestOperationsVariablesParse(t *testing.T) {
	c, err := FromEnv(env(map[string]string{"SWEEP_INTERVAL": "90s", "SWEEP_BATCH": "20", "METRICS_TOKEN": "0123456789abcdef", "GOGC": "off", "GOMEMLIMIT": "1GiB"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.SweepInterval != 90*time.Second || c.SweepBatch != 20 || c.MetricsToken != "0123456789abcdef" || c.GCPercent != -1 || c.MemoryLimit != 1<<30 {
		t.Fatalf("parsed: %+v", c)
	}
	d := Default()
	if d.SweepInterval != DefaultSweepInterval || d.SweepBatch != DefaultSweepBatch || d.GCPercent != DefaultGCPercent || d.MemoryLimit != DefaultMemoryLimit {
		t.Fatalf("defaults: %+v", d)
	}
	if c, err := FromEnv(env(map[string]string{"SLUICE_COMMIT": "fast"})); err != nil || !c.FastCommit || d.FastCommit {
		t.Fatalf("SLUICE_COMMIT=fast: %v %v (default %v)", c.FastCommit, err, d.FastCommit)
	}
	if c, err := FromEnv(env(map[string]string{"SLUICE_DISCARD_LEGACY_SECRET": "true"})); err != nil || !c.DiscardLegacySecret || d.DiscardLegacySecret {
		t.Fatalf("SLUICE_DISCARD_LEGACY_SECRET=true: %v %v (default %v)", c.DiscardLegacySecret, err, d.DiscardLegacySecret)
	}
	if c, err := FromEnv(env(map[string]string{"PLAN_DECISIONS_PER_SECOND": "0"})); err != nil || c.PlanDecisionsPerSecond != 0 {
		t.Fatalf("PLAN_DECISIONS_PER_SECOND=0 (no limit): %v %v", c.PlanDecisionsPerSecond, err)
	}
	for v, want := range map[string]float64{"0.0": 0, "0e5": 0, "20000": 20000, "0.5": 0.5, "2.5e3": 2500} {
		if c, err := FromEnv(env(map[string]string{"PLAN_DECISIONS_PER_SECOND": v})); err != nil || c.PlanDecisionsPerSecond != want {
			t.Errorf("PLAN_DECISIONS_PER_SECOND=%s: %v %v, want %v", v, c.PlanDecisionsPerSecond, err, want)
		}
	}
	// Go's other literals, which ParseFloat takes, are not numbers as JSON (and the dashboard's
	// plan form) write them.
	for _, bad := range []string{"0x1p4", "1_0", "Inf", "NaN", "+5", ".5", "1.", "007", "1e-400", "-1"} {
		if _, err := FromEnv(env(map[string]string{"PLAN_DECISIONS_PER_SECOND": bad})); err == nil || !strings.Contains(err.Error(), "PLAN_DECISIONS_PER_SECOND") {
			t.Errorf("PLAN_DECISIONS_PER_SECOND=%q: %v, want refused", bad, err)
		}
	}
	if c, err := FromEnv(env(map[string]string{"SWEEP_INTERVAL": "off"})); err != nil || c.SweepInterval != 0 {
		t.Fatalf("SWEEP_INTERVAL=off: %v %v", c.SweepInterval, err)
	}
	for name, bad := range map[string]string{"SLUICE_DISCARD_LEGACY_SECRET": "maybe", "SLUICE_COMMIT": "sometimes", "SWEEP_INTERVAL": "10ms", "SWEEP_BATCH": "0", "METRICS_TOKEN": "short", "GOGC": "-5", "GOMEMLIMIT": "lots", "PLAN_DECISIONS_PER_SECOND": "1e-1000000000"} {
		if _, err := FromEnv(env(map[string]string{name: bad})); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: %v", name, bad, err)
		}
	}
}

func TestEnvoyServiceVariablesParse(t *testing.T) {
	d := Default()
	if d.GRPCAddr != "" || d.GRPCKeyHeader != "authorization" || d.GRPCAllowUnknown {
		t.Fatalf("defaults: addr %q header %q allow unknown %v, want off, authorization, deny", d.GRPCAddr, d.GRPCKeyHeader, d.GRPCAllowUnknown)
	}
	c, err := FromEnv(env(map[string]string{"GRPC_ADDR": ":9091", "GRPC_KEY_HEADER": "x-sluice-key", "GRPC_UNKNOWN_LIMIT": "allow"}))
	if err != nil || c.GRPCAddr != ":9091" || c.GRPCKeyHeader != "x-sluice-key" || !c.GRPCAllowUnknown {
		t.Fatalf("set: %+v %v", c, err)
	}
	for name, bad := range map[string]string{"GRPC_ADDR": "9091", "GRPC_KEY_HEADER": "X Key", "GRPC_UNKNOWN_LIMIT": "maybe"} {
		if _, err := FromEnv(env(map[string]string{name: bad})); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: %v", name, bad, err)
		}
	}
	for _, reserved := range []string{"grpc-timeout", "key-bin"} {
		if _, err := FromEnv(env(map[string]string{"GRPC_KEY_HEADER": reserved})); err == nil {
			t.Errorf("GRPC_KEY_HEADER=%s was accepted", reserved)
		}
	}
}

// TestGRPCKeyHeaderRefusesHeadersTheTransportOwns: a header that gRPC or HTTP/2 sets, rewrites or
// drops can never carry the key, so every call would be UNAUTHENTICATED: such a name is refused
// at start-up, naming the variable; names of one's own are accepted.
func TestGRPCKeyHeaderRefusesHeadersTheTransportOwns(t *testing.T) {
	for _, tc := range []struct {
		header string
		ok     bool
	}{
		{"authorization", true},
		{"x-sluice-key", true},
		{"x-user-agent", true},
		{"content-type", false},
		{"user-agent", false},
		{"te", false},
		{"host", false},
		{"connection", false},
		{"keep-alive", false},
		{"proxy-connection", false},
		{"transfer-encoding", false},
		{"upgrade", false},
		{":authority", false},
		{":path", false},
		{"grpc-status", false},
	} {
		_, err := FromEnv(env(map[string]string{"GRPC_KEY_HEADER": tc.header}))
		switch {
		case tc.ok && err != nil:
			t.Errorf("GRPC_KEY_HEADER=%s: %v, want accepted", tc.header, err)
		case !tc.ok && err == nil:
			t.Errorf("GRPC_KEY_HEADER=%s was accepted", tc.header)
		case !tc.ok && !strings.Contains(err.Error(), "GRPC_KEY_HEADER"):
			t.Errorf("GRPC_KEY_HEADER=%s: %v, want the variable named", tc.header, err)
		}
	}
}

func TestStringNamesNoSecret(t *testing.T) {
	c, err := FromEnv(env(map[string]string{"METRICS_TOKEN": "metrics-token-very-secret", "SLUICE_ADMIN_EMAIL": "a@b.c", "SLUICE_ADMIN_PASSWORD": "admin-password-secret"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FromEnv(env(map[string]string{"SMTP_ADDR": "localhost:25", "SMTP_FROM": "s@example.com", "SMTP_USERNAME": "u", "SMTP_PASSWORD": "p", "SMTP_TLS": "plain"})); err != nil {
		t.Fatalf("a loopback relay with a password: %v", err)
	}
	if s := c.String(); strings.Contains(s, "very-secret") || strings.Contains(s, "password-secret") {
		t.Fatalf("secrets printed: %s", s)
	}
}

// TestReadmeConfigurationTableMatchesTheOptions keeps the README's configuration table the same
// as the options table: every variable, its default and its meaning, in order.
func TestReadmeConfigurationTableMatchesTheOptions(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	in := false
	for _, line := range strings.Split(string(readme), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Configuration"
		case in && strings.HasPrefix(line, "| `"):
			got = append(got, line)
		}
	}
	var want []string
	for _, o := range Options() {
		def := o.Default
		switch {
		case strings.HasPrefix(def, "("):
			def = strings.Trim(def, "()")
		case def != "":
			def = "`" + def + "`"
		}
		want = append(want, fmt.Sprintf("| `%s` | %s | %s |", o.Name, def, o.Doc))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("README's configuration table differs from config.Options(); it should read:\n\n| variable | default | meaning |\n|---|---|---|\n%s", strings.Join(want, "\n"))
	}
}

// FuzzFromEnv: no environment makes the parser panic, and an accepted one validates, prints
// without its secrets, and has TRUSTED_PROXIES the router reads (so the server starts).
func FuzzFromEnv(f *testing.F) {
	f.Add("sqlite:x.db", ":8080", "10.0.0.0/8, ::1", "1m", "500", "1GiB", "off", "true")
	f.Add("postgres://u:p@h/db", "127.0.0.1:0", "nope", "off", "0", "12", "400", "maybe")
	f.Add("sqlite:x.db", ":8080", "10.0.0.0/08", "1m", "500", "1GiB", "off", "true")
	f.Add("sqlite:x.db", ":8080", "fe80::1%eth0", "1m", "500", "1GiB", "off", "true")
	f.Add("sqlite:x.db", ":8080", "::ffff:10.0.0.1, ::ffff:10.0.0.0/104,2001:db8::/032", "1m", "500", "1GiB", "off", "true")
	f.Fuzz(func(t *testing.T, dbURL, listen, proxies, sweep, batch, memlimit, gogc, demo string) {
		c, err := FromEnv(env(map[string]string{
			"DATABASE_URL": dbURL, "LISTEN_ADDR": listen, "TRUSTED_PROXIES": proxies, "SWEEP_INTERVAL": sweep,
			"SWEEP_BATCH": batch, "GOMEMLIMIT": memlimit, "GOGC": gogc, "SLUICE_DEMO": demo,
			"SECRET_KEY": "fuzz-secret-key-0123456789abcdef-xyz",
		}))
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("FromEnv accepted what Validate refuses: %v (%+v)", err, c)
		}
		if strings.Contains(c.String(), "fuzz-secret-key") {
			t.Fatal("String prints SECRET_KEY")
		}
		acceptedProxiesParse(t, c.TrustedProxies)
	})
}

func TestSMTPVariablesParse(t *testing.T) {
	if d := Default(); d.SMTPAddr != "" || d.SMTPTLS != "starttls" {
		t.Fatalf("defaults: addr %q tls %q, want off and starttls", d.SMTPAddr, d.SMTPTLS)
	}
	c, err := FromEnv(env(map[string]string{"SMTP_ADDR": "smtp.example.com:587", "SMTP_FROM": "sluice@example.com",
		"SMTP_USERNAME": "sluice", "SMTP_PASSWORD": "smtp-password-very-secret", "SMTP_TLS": "tls"}))
	if err != nil || c.SMTPAddr != "smtp.example.com:587" || c.SMTPFrom != "sluice@example.com" || c.SMTPUsername != "sluice" || c.SMTPTLS != "tls" {
		t.Fatalf("set: %+v %v", c, err)
	}
	if _, err := FromEnv(env(map[string]string{"SMTP_ADDR": "localhost:25", "SMTP_FROM": "s@example.com", "SMTP_USERNAME": "u", "SMTP_PASSWORD": "p", "SMTP_TLS": "plain"})); err != nil {
		t.Fatalf("a loopback relay with a password: %v", err)
	}
	if s := c.String(); strings.Contains(s, "very-secret") || !strings.Contains(s, "smtp.example.com:587") {
		t.Fatalf("SMTP_PASSWORD printed, or the server not: %s", s)
	}
	for _, bad := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"SMTP_ADDR": "smtp.example.com"}, "SMTP_ADDR"},
		{map[string]string{"SMTP_ADDR": "smtp.example.com:25"}, "SMTP_FROM"},
		{map[string]string{"SMTP_ADDR": "smtp.example.com:25", "SMTP_FROM": "Sluice <s@example.com>"}, "SMTP_FROM"},
		{map[string]string{"SMTP_ADDR": "smtp.example.com:25", "SMTP_FROM": "s@example.com\r\nBcc: x@example.com"}, "SMTP_FROM"},
		{map[string]string{"SMTP_ADDR": "smtp.example.com:25", "SMTP_FROM": "s@example.com", "SMTP_USERNAME": "u"}, "SMTP_PASSWORD"},
		{map[string]string{"SMTP_FROM": "s@example.com"}, "SMTP_ADDR"},
		{map[string]string{"SMTP_TLS": "ssl"}, "SMTP_TLS"},
		{map[string]string{"SMTP_ADDR": "smtp.example.com:25", "SMTP_FROM": "s@example.com", "SMTP_USERNAME": "u", "SMTP_PASSWORD": "p", "SMTP_TLS": "plain"}, "SMTP_TLS=plain"},
	} {
		if _, err := FromEnv(env(bad.env)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want an error naming %s", bad.env, err, bad.want)
		}
	}
}

// TestSecretsAreNotTrimmed: a secret is used exactly as given. SLUICE_ADMIN_PASSWORD="correct
// horse " used to be stored as "correct horse", and typing the configured password failed; a
// SECRET_KEY read from a file with its line break would be trimmed too. Such a value is now refused,
// naming the variable and never printing the value; other variables are still trimmed, and a
// secret's inner spaces are kept.
func TestSecretsAreNotTrimmed(t *testing.T) {
	key := "0123456789abcdef0123456789abcdef-key"
	base := map[string]string{"SLUICE_ADMIN_EMAIL": "op@example.com", "SLUICE_ADMIN_PASSWORD": "correct horse battery",
		"SECRET_KEY": key, "METRICS_TOKEN": "metrics token 0123456789", "SMTP_ADDR": "localhost:25", "SMTP_FROM": "s@example.com",
		"SMTP_USERNAME": "u", "SMTP_PASSWORD": "smtp pass", "SMTP_TLS": "plain", "LISTEN_ADDR": " :8081\n"}
	c, err := FromEnv(env(base))
	if err != nil {
		t.Fatal(err)
	}
	if c.AdminPassword != "correct horse battery" || c.SecretKey != key || c.MetricsToken != "metrics token 0123456789" || c.SMTPPassword != "smtp pass" || c.ListenAddr != ":8081" {
		t.Fatalf("parsed: %+v", c)
	}
	var secrets []string
	for _, o := range Options() {
		if o.Secret {
			secrets = append(secrets, o.Name)
		}
	}
	if len(secrets) != 4 {
		t.Fatalf("secrets %v: this test knows SECRET_KEY, SLUICE_ADMIN_PASSWORD, METRICS_TOKEN and SMTP_PASSWORD", secrets)
	}
	for _, name := range secrets {
		for _, padded := range []string{base[name] + " ", base[name] + "\n", " " + base[name], "\t" + base[name] + "\r\n"} {
			e := map[string]string{}
			for k, v := range base {
				e[k] = v
			}
			e[name] = padded
			_, err := FromEnv(env(e))
			if err == nil || !strings.Contains(err.Error(), name+" starts or ends with whitespace") {
				t.Errorf("%s=%q: %v, want an error naming %s", name, padded, err, name)
			} else if strings.Contains(err.Error(), base[name]) {
				t.Errorf("%s=%q: the error prints the secret: %v", name, padded, err)
			}
		}
	}
}

// TestDatabaseURLRefusesAnUnencodedAtInThePassword: pgx would read the host from the first '@'
// and print the rest of the password in its connect error; the refusal prints none of it.
func TestDatabaseURLRefusesAnUnencodedAtInThePassword(t *testing.T) {
	for _, bad := range []string{"postgres://u:top@secret@dbhost/db", "postgresql://u@x:p@h:5432/db?sslmode=disable", "postgres://u:a?b@c@h/db"} {
		_, err := FromEnv(env(map[string]string{"DATABASE_URL": bad}))
		if err == nil || !strings.Contains(err.Error(), "%40") || strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "@x") {
			t.Errorf("DATABASE_URL=%q: %v, want a refusal that says to write %%40 and names nothing of the URL", bad, err)
		}
	}
	for _, good := range []string{"postgres://u:top%40secret@dbhost/db", "postgres://dbhost/db?options=-c%20x@y", "postgres://u:p@h1,h2/db"} {
		if _, err := FromEnv(env(map[string]string{"DATABASE_URL": good})); err != nil {
			t.Errorf("DATABASE_URL=%q: %v, want it accepted", good, err)
		}
	}
}

// TestDatabaseURLRefusesAnInMemorySQLite: an in-memory SQLite database, in any spelling, is
// refused at start-up naming DATABASE_URL (by FromEnv, which `app serve` and the CLI read, and by
// Validate): each of the pool's connections would get a private empty database of its own, so
// /readyz would flip, /setup would fail and a ":memory:.secret" file would appear.
func TestDatabaseURLRefusesAnInMemorySQLite(t *testing.T) {
	for _, bad := range []string{
		"sqlite:", "sqlite:  ", "sqlite::memory:", "sqlite: :memory: ", "sqlite::MEMORY:", "sqlite:%3Amemory%3A", "sqlite:%253amemory%253a",
		"sqlite:file::memory:", "sqlite:file::memory:?cache=shared", "sqlite:FILE::memory:", "sqlite:file:%3Amemory:",
		"sqlite:file:", "sqlite:file:?cache=shared", "sqlite:file://", "sqlite:file://localhost", "sqlite:file:#x",
		"sqlite:file:x.db?mode=memory", "sqlite:file:x.db?cache=shared&MODE=Memory", "sqlite:x.db?mode=memory",
		"sqlite:file:x.db?mode%3Dmemory", "sqlite:file:x.db?%6Dode=%6Demory", "sqlite:file:x%zz.db?mode=memory",
		"sqlite:file:/x.db?vfs=memdb", "sqlite:file:/x.db?VFS=MemDB",
	} {
		_, err := FromEnv(env(map[string]string{"DATABASE_URL": bad}))
		if err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
			t.Errorf("FromEnv: DATABASE_URL=%q: %v, want a refusal naming DATABASE_URL", bad, err)
		}
		c := Default()
		c.DatabaseURL = bad
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
			t.Errorf("Validate: DATABASE_URL=%q: %v, want a refusal naming DATABASE_URL", bad, err)
		}
	}
	_, err := FromEnv(env(map[string]string{"DATABASE_URL": "sqlite::memory:"}))
	if err == nil || !strings.Contains(err.Error(), "in-memory") || !strings.Contains(err.Error(), "sqlite:data/sluice.db") {
		t.Errorf("sqlite::memory: %v, want an error that says it is in memory and how to name a file", err)
	}
	// Files, whatever their names (sqlite:PATH is a file name, never a URI).
	for _, good := range []string{
		"sqlite:data/sluice.db", "sqlite:/var/lib/sluice/sluice.db", "sqlite:memory.db", "sqlite:data/:memory:.db",
		"sqlite:./:memory:", "sqlite:a?b.db", "sqlite:c#d.db", "sqlite:e%41.db", "sqlite:sp ace.db", "sqlite:memdb",
	} {
		if c, err := FromEnv(env(map[string]string{"DATABASE_URL": good})); err != nil || c.DatabaseURL != good {
			t.Errorf("DATABASE_URL=%q: %q %v, want it accepted", good, c.DatabaseURL, err)
		}
	}
}

// TestListenersHaveNumericPorts: every listener's address is host:port with a port number, refused
// at start naming its variable; a port no listener can open (":abc", ":99999") used to pass the
// configuration and fail only when the server opened it, after migrating the database.
func TestListenersHaveNumericPorts(t *testing.T) {
	for _, name := range []string{"LISTEN_ADDR", "METRICS_ADDR", "GRPC_ADDR"} {
		for _, bad := range []string{":abc", "127.0.0.1:99999", "localhost"} {
			if _, err := FromEnv(env(map[string]string{name: bad})); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%s: %v, want a refusal naming %s", name, bad, err, name)
			}
		}
		if _, err := FromEnv(env(map[string]string{name: "127.0.0.1:0"})); err != nil {
			t.Errorf("%s=127.0.0.1:0: %v", name, err)
		}
	}
}
