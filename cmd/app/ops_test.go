package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for the test's own lock

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// Operations tests: they run Sluice the way an operator (or docker compose) does — the real
// binary, MIGRATE=auto against a fresh PostgreSQL, tenants and keys made with the CLI — and then
// take its database away, kill it, and shut it down, checking what clients observe.

// logBuffer collects a process's output and lets a test wait for a line.
type logBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	notify chan struct{}
}

func newLogBuffer() *logBuffer { return &logBuffer{notify: make(chan struct{})} }

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	close(b.notify)
	b.notify = make(chan struct{})
	return len(p), nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until the output matches re and returns the first submatch.
func (b *logBuffer) waitFor(t *testing.T, re *regexp.Regexp, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		b.mu.Lock()
		m := re.FindStringSubmatch(b.buf.String())
		ch := b.notify
		b.mu.Unlock()
		if m != nil {
			return m[len(m)-1]
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no %q within %v; output:\n%s", re, timeout, b.String())
		}
	}
}

var (
	listeningRE = regexp.MustCompile(`Sluice is listening on (http://[^ ]+)`)
	metricsRE   = regexp.MustCompile(`Metrics for Prometheus are on (http://\S+)`)
)

// buildBinary builds cmd/app once per top-level test into its temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found")
	}
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// appEnv is the environment compose gives the app, for a database URL.
func appEnv(dbURL string, extra ...string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.TempDir(),
		"DATABASE_URL=" + dbURL,
		"LISTEN_ADDR=127.0.0.1:0",
		"METRICS_ADDR=127.0.0.1:0",
		"MIGRATE=auto",
		"SECRET_KEY=ops-test-secret-key-0123456789abcdef",
		"LOG_LEVEL=warn",
		"SWEEP_INTERVAL=1s",
	}
	return append(env, extra...)
}

// proc is a running Sluice process.
type proc struct {
	cmd    *exec.Cmd
	out    *logBuffer
	base   string
	exited chan struct{}
	err    error
}

func startApp(t *testing.T, bin string, env []string) *proc {
	t.Helper()
	p := &proc{out: newLogBuffer(), exited: make(chan struct{})}
	p.cmd = exec.Command(bin, "serve")
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	p.base = p.out.waitFor(t, listeningRE, 60*time.Second)
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit 30 s after SIGTERM; output:\n%s", p.out)
	}
	if p.err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", p.err, p.out)
	}
}

func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
}

// cli runs an admin subcommand with env and returns its output.
func cli(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("app %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// tenantAndKey creates a tenant and a secret key through the CLI, as an operator would.
func tenantAndKey(t *testing.T, bin string, env []string, tenant string) string {
	t.Helper()
	cli(t, bin, env, "tenant", "create", tenant)
	out := cli(t, bin, env, "key", "create", "--tenant", tenant)
	secret := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	if !strings.HasPrefix(secret, "sk_") {
		t.Fatalf("key create printed %q", out)
	}
	return secret
}

// client speaks the /v1 API with one key.
type client struct {
	http   *http.Client
	secret string
}

func newClient(secret string) *client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}
	return &client{http: &http.Client{Transport: tr, Timeout: 15 * time.Second}, secret: secret}
}

func (c *client) do(method, url string, body any) (int, map[string]any, error) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, nil
}

func (c *client) mustDo(t *testing.T, method, url string, body any, want int) map[string]any {
	t.Helper()
	status, out, err := c.do(method, url, body)
	if err != nil || status != want {
		t.Fatalf("%s %s: %d %v %v; want %d", method, url, status, out, err, want)
	}
	return out
}

// outcome is one decision request as the client saw it.
type outcome struct {
	sent, answered time.Time
	status         int // 0: no HTTP answer (connection failed)
	ok             bool
	code           string
	instance       int
	name, key      string
}

// hammer sends decisions from workers goroutines until stop is closed. pick chooses the
// instance and the limit name for each request.
func hammer(c *client, workers int, stop <-chan struct{}, pick func(worker, i int) (base string, instance int, name, key string)) []outcome {
	var mu sync.Mutex
	var all []outcome
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var mine []outcome
			for i := 0; ; i++ {
				select {
				case <-stop:
					mu.Lock()
					all = append(all, mine...)
					mu.Unlock()
					return
				default:
				}
				base, inst, name, key := pick(w, i)
				o := outcome{sent: time.Now(), instance: inst, name: name, key: key}
				status, body, err := c.do("POST", base+"/v1/limits/"+name+"/limit", map[string]any{"key": key})
				o.answered = time.Now()
				if err == nil {
					o.status = status
					o.ok, _ = body["ok"].(bool)
					o.code, _ = body["code"].(string)
				} else {
					time.Sleep(20 * time.Millisecond) // a dead instance refuses at once; do not spin
				}
				mine = append(mine, o)
			}
		})
	}
	wg.Wait()
	return all
}

// lockStateTable locks limit_state (ACCESS EXCLUSIVE) in a transaction of its own on dbURL, so
// that every decision waits behind it until lockTx ends; admin is its connection pool, to watch
// for the waiters. Both end with the test.
func lockStateTable(t *testing.T, dbURL string) (admin *sql.DB, lockTx *sql.Tx) {
	t.Helper()
	admin, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	if lockTx, err = admin.BeginTx(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lockTx.Rollback() })
	if _, err := lockTx.ExecContext(ctx, "LOCK TABLE limit_state IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	return admin, lockTx
}

// dedicatedPostgres starts a PostgreSQL server of the test's own (one it may pause).
func dedicatedPostgres(t *testing.T) *testkit.Server {
	t.Helper()
	srv, err := testkit.Start()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL is required to run the operations tests on CI: %v", err)
		}
		t.Skipf("!!! SKIPPING: PostgreSQL could not be started (%v). CI=true turns this into a failure. !!!", err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// TestBinaryOperations builds the binary once and runs the outage and crash scenarios on it.
func TestBinaryOperations(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary against dedicated databases")
	}
	bin := buildBinary(t)
	t.Run("FailsClosedDuringADatabaseOutageAndRecoversWithoutRestart", func(t *testing.T) { testOutage(t, bin) })
	t.Run("SurvivorKeepsServingWhenAnotherInstanceIsKilled", func(t *testing.T) { testCrash(t, bin) })
	t.Run("SQLiteLosesNothingAcknowledgedWhenKilled", func(t *testing.T) { testSQLiteCrash(t, bin) })
}

func testOutage(t *testing.T, bin string) {
	srv := dedicatedPostgres(t)
	env := appEnv(srv.URL)
	app := startApp(t, bin, env)
	c := newClient(tenantAndKey(t, bin, env, "acme"))
	const rate, capacity = 50.0, 50.0 // per second
	c.mustDo(t, "PUT", app.base+"/v1/limits/out", map[string]any{"kind": "token bucket", "rate": rate, "period": 1000, "capacity": capacity}, 200)

	stop := make(chan struct{})
	var results []outcome
	done := make(chan struct{})
	go func() {
		results = hammer(c, 6, stop, func(w, i int) (string, int, string, string) { return app.base, 0, "out", "shared" })
		close(done)
	}()
	time.Sleep(1500 * time.Millisecond) // load before the outage (this is the scenario, not a wait)
	pauseStart := time.Now()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	time.Sleep(3 * time.Second) // the outage
	if status, _, _ := c.do("GET", app.base+"/readyz", nil); status != http.StatusServiceUnavailable {
		t.Errorf("/readyz during the outage: %d, want 503", status)
	}
	resumeStart := time.Now()
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	// Keep the load on until it has been admitted again for a while (or give up after 20 s).
	recovered := time.Time{}
	for deadline := resumed.Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if status, body, err := c.do("POST", app.base+"/v1/limits/out/check", map[string]any{"key": "probe"}); err == nil && status == 200 && body["ok"] == true {
			recovered = time.Now()
			break
		}
	}
	time.Sleep(1 * time.Second)
	close(stop)
	<-done
	if recovered.IsZero() {
		t.Fatalf("no successful decision within 20 s of the database coming back; output:\n%s", app.out)
	}
	if status, _, _ := c.do("GET", app.base+"/readyz", nil); status != 200 {
		t.Errorf("/readyz after recovery: %d", status)
	}

	var admitted, during, okAfter int
	var firstFail, firstOKAfter time.Time
	var slowest time.Duration
	first, last := results[0].sent, results[0].answered
	for _, o := range results {
		first = minTime(first, o.sent)
		if o.answered.After(last) {
			last = o.answered
		}
		if o.status == 200 && o.ok {
			admitted++
		}
		if o.sent.After(paused) && o.answered.Before(resumeStart) {
			during++
			slowest = max(slowest, o.answered.Sub(o.sent))
			if o.status == 200 && o.ok {
				t.Errorf("ok:true while the database was down: %+v", o)
			}
			if o.status != http.StatusServiceUnavailable || o.code != "unavailable" {
				t.Errorf("during the outage: status %d code %q, want 503 unavailable", o.status, o.code)
			}
		}
		if o.status == http.StatusServiceUnavailable && o.code == "unavailable" && (firstFail.IsZero() || o.answered.Before(firstFail)) {
			firstFail = o.answered
		}
		if o.sent.After(resumed) && o.status == 200 {
			okAfter++
			if firstOKAfter.IsZero() || o.answered.Before(firstOKAfter) {
				firstOKAfter = o.answered
			}
		}
	}
	if during == 0 || firstFail.IsZero() {
		t.Fatalf("no request observed the outage (%d results)", len(results))
	}
	if slowest > 7*time.Second {
		t.Errorf("a decision during the outage took %v to fail closed (retry budget is 5 s)", slowest)
	}
	if okAfter == 0 {
		t.Errorf("no 200 for load sent after the database came back")
	}
	span := last.Sub(first)
	bound := capacity + rate*span.Seconds()
	if float64(admitted) > bound {
		t.Errorf("admitted %d over %v, bound %.0f", admitted, span, bound)
	}
	metrics := scrapeMetrics(t, app.out.waitFor(t, metricsRE, 10*time.Second))
	if v := metricValue(metrics, "sluice_db_tx_giveups_total"); v < 1 {
		t.Errorf("sluice_db_tx_giveups_total = %v after an outage", v)
	}
	t.Logf("outage: %d requests (%d during the outage, all 503 unavailable, slowest %v); first 503 %v after the stop began "+
		"(pg_ctl stop took %v); first ok decision %v after PostgreSQL was back (probe), first 200 of the load %v after; "+
		"admitted %d over %v (bound %.0f); give-ups %v",
		len(results), during, slowest.Round(time.Millisecond), firstFail.Sub(pauseStart).Round(time.Millisecond),
		paused.Sub(pauseStart).Round(time.Millisecond), recovered.Sub(resumed).Round(time.Millisecond),
		firstOKAfter.Sub(resumed).Round(time.Millisecond), admitted, span.Round(time.Millisecond), bound,
		metricValue(metrics, "sluice_db_tx_giveups_total"))
	app.stop(t)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func testCrash(t *testing.T, bin string) {
	dbURL := postgresForTest(t)
	env := appEnv(dbURL)
	a := startApp(t, bin, env)
	b := startApp(t, bin, env)
	c := newClient(tenantAndKey(t, bin, env, "acme"))
	// A fixed window of an hour that began a second ago cannot refill during the test, so its
	// stored value is exactly 300 minus every consumption that ever committed.
	start := time.Now().UnixMilli() - 1000
	c.mustDo(t, "PUT", a.base+"/v1/limits/fw", map[string]any{"kind": "fixed window", "rate": 300, "period": 3_600_000, "start": start}, 200)
	c.mustDo(t, "PUT", b.base+"/v1/limits/tb", map[string]any{"kind": "token bucket", "rate": 100, "period": 1000, "capacity": 20}, 200)
	var defs []string
	for i := range 10 {
		name := fmt.Sprint("def", i)
		c.mustDo(t, "PUT", []string{a.base, b.base}[i%2]+"/v1/limits/"+name, map[string]any{"kind": "sliding window", "rate": 5, "period": 1000}, 200)
		defs = append(defs, name)
	}

	var killed atomic.Bool
	stop := make(chan struct{})
	var results []outcome
	done := make(chan struct{})
	go func() {
		results = hammer(c, 8, stop, func(w, i int) (string, int, string, string) {
			inst := (w + i) % 2
			if killed.Load() {
				inst = 1
			}
			name := []string{"fw", "tb"}[i%2]
			return []string{a.base, b.base}[inst], inst, name, fmt.Sprint("k", i%3)
		})
		close(done)
	}()
	time.Sleep(1500 * time.Millisecond)
	a.kill(t)
	killedAt := time.Now()
	killed.Store(true)
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	<-done

	var knownFW, unknownFW, survivorAfter, survivorErrors int
	tbAdmitted := map[string][]testkit.Span{}
	for _, o := range results {
		switch {
		case o.name == "fw" && o.status == 200 && o.ok:
			knownFW++
		case o.name == "fw" && o.status == 0 && o.instance == 0:
			unknownFW++ // sent to the instance that was killed: it may have committed before dying
		case o.name == "tb" && o.status == 200 && o.ok:
			tbAdmitted[o.key] = append(tbAdmitted[o.key], testkit.Span{Sent: o.sent, Answered: o.answered})
		}
		if o.instance == 1 && (o.status == 0 || o.status >= 500) {
			survivorErrors++
		}
		if o.instance == 1 && o.sent.After(killedAt) && o.status == 200 {
			survivorAfter++
		}
	}
	value := c.mustDo(t, "GET", b.base+"/v1/limits/fw/value?key=k0", nil, 200)["value"].(float64)
	value += c.mustDo(t, "GET", b.base+"/v1/limits/fw/value?key=k1", nil, 200)["value"].(float64)
	value += c.mustDo(t, "GET", b.base+"/v1/limits/fw/value?key=k2", nil, 200)["value"].(float64)
	consumed := 900 - int(value)
	if value < 0 || consumed < knownFW || consumed > knownFW+unknownFW {
		t.Errorf("fixed window: %d consumed by the database, %d acknowledged, %d unknown (in flight at the kill)", consumed, knownFW, unknownFW)
	}
	for _, adm := range tbAdmitted {
		if err := testkit.TokenBucket(adm, 20, 100); err != nil {
			t.Error(err)
		}
	}
	if survivorAfter == 0 || survivorErrors > 0 {
		t.Errorf("survivor: %d answers after the kill, %d errors", survivorAfter, survivorErrors)
	}
	// Every definition is still there, seen from the survivor and from a restarted instance.
	a2 := startApp(t, bin, env)
	for _, base := range []string{b.base, a2.base} {
		list := c.mustDo(t, "GET", base+"/v1/limits", nil, 200)["limits"].([]any)
		if len(list) != len(defs)+2 {
			t.Errorf("%s lists %d definitions, want %d", base, len(list), len(defs)+2)
		}
		for _, name := range append(defs, "fw", "tb") {
			c.mustDo(t, "GET", base+"/v1/limits/"+name, nil, 200)
		}
	}
	t.Logf("crash: %d requests; SIGKILLed one of two instances mid-run; survivor answered %d requests after the kill with %d errors; "+
		"fixed window: %d consumed in the database, %d acknowledged, %d in flight at the kill (bound 900); "+
		"token bucket bound held over every interval; %d definitions intact on the survivor and a restarted instance",
		len(results), survivorAfter, survivorErrors, consumed, knownFW, unknownFW, len(defs)+2)
	b.stop(t)
	a2.stop(t)
}

// span is when a request was sent and when its answer came: the decision happened in between.
func testSQLiteCrash(t *testing.T, bin string) {
	env := appEnv("sqlite:" + filepath.Join(t.TempDir(), "sluice.db"))
	app := startApp(t, bin, env)
	c := newClient(tenantAndKey(t, bin, env, "acme"))
	const capacity = 100_000
	start := time.Now().UnixMilli() - 1000
	c.mustDo(t, "PUT", app.base+"/v1/limits/fw", map[string]any{"kind": "fixed window", "rate": capacity, "period": 3_600_000, "start": start}, 200)

	stop := make(chan struct{})
	var killedAt time.Time
	var mu sync.Mutex
	var acked, inFlight []string
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("def-%d-%d", w, i)
				sent := time.Now()
				status, _, err := c.do("PUT", app.base+"/v1/limits/"+name, map[string]any{"kind": "token bucket", "rate": i + 1, "period": 1000})
				mu.Lock()
				switch {
				case err == nil && status == 200:
					acked = append(acked, name)
				case err != nil && (killedAt.IsZero() || sent.Before(killedAt)):
					inFlight = append(inFlight, name)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	var results []outcome
	done := make(chan struct{})
	go func() {
		results = hammer(c, 4, stop, func(w, i int) (string, int, string, string) { return app.base, 0, "fw", "k" })
		close(done)
	}()
	time.Sleep(time.Second)
	mu.Lock()
	killedAt = time.Now()
	mu.Unlock()
	app.kill(t)
	close(stop)
	wg.Wait()
	<-done

	var known, unknown int
	for _, o := range results {
		switch {
		case o.status == 200 && o.ok:
			known++
		case o.status == 0 && o.sent.Before(killedAt):
			unknown++
		}
	}
	restartBegan := time.Now()
	app2 := startApp(t, bin, env) // the same file, after a SIGKILL: must open cleanly
	restart := time.Since(restartBegan)
	if status, _, _ := c.do("GET", app2.base+"/readyz", nil); status != 200 {
		t.Fatalf("/readyz after restart: %d", status)
	}
	for _, name := range acked {
		c.mustDo(t, "GET", app2.base+"/v1/limits/"+name, nil, 200)
	}
	value := c.mustDo(t, "GET", app2.base+"/v1/limits/fw/value?key=k", nil, 200)["value"].(float64)
	consumed := capacity - int(value)
	if consumed < known || consumed > known+unknown {
		t.Errorf("after restart %d tokens are consumed; %d consumptions were acknowledged, %d in flight at the kill", consumed, known, unknown)
	}
	t.Logf("sqlite crash: SIGKILL after %d acknowledged definitions (%d in flight) and %d acknowledged consumptions (%d in flight); "+
		"restart took %v and found every acknowledged definition and %d consumed tokens",
		len(acked), len(inFlight), known, unknown, restart.Round(time.Millisecond), consumed)
	if len(acked) == 0 || known == 0 {
		t.Errorf("the load did nothing before the kill")
	}
	app2.stop(t)
}

// envFunc turns an environment list into a getenv for run.
func envFunc(env []string) func(string) string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

// serveInProcess runs `app serve` through run, as main does, until the returned cancel is called;
// wait returns run's error.
func serveInProcess(t *testing.T, env []string) (base string, out *logBuffer, cancel func(), wait func() error) {
	t.Helper()
	ctx, cancelCtx := context.WithCancel(context.Background())
	out = newLogBuffer()
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, []string{"serve"}, envFunc(env), strings.NewReader(""), out, io.Discard) }()
	var once sync.Once
	var err error
	wait = func() error {
		once.Do(func() {
			select {
			case err = <-errc:
			case <-time.After(40 * time.Second):
				err = fmt.Errorf("run did not return 40 s after cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { cancelCtx(); _ = wait() })
	select {
	case err := <-errc:
		t.Fatalf("run: %v\n%s", err, out)
	case <-time.After(0):
	}
	return out.waitFor(t, listeningRE, 60*time.Second), out, cancelCtx, wait
}

// cliInProcess runs an admin subcommand through run and returns its output.
func cliInProcess(t *testing.T, env []string, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(context.Background(), args, envFunc(env), strings.NewReader(""), &out, io.Discard); err != nil {
		t.Fatalf("app %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// TestKeyCommandsWriteTheirWebhookEvents: a key created or revoked on the command line is
// audited and, like one created on the dashboard, queues its event for the tenant's endpoints in
// the same transaction.
func TestKeyCommandsWriteTheirWebhookEvents(t *testing.T) {
	dbURL := postgresForTest(t)
	env := appEnv(dbURL)
	cliInProcess(t, env, "tenant", "create", "acme")
	admin, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec(`INSERT INTO webhook_endpoints (tenant_id, url, secret_sealed, events, created_at)
		SELECT id, 'https://example.com/hook', 's', 'key.created,key.revoked', 0 FROM tenants WHERE name = 'acme'`); err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(strings.SplitN(cliInProcess(t, env, "key", "create", "--tenant", "acme"), "\n", 2)[0])
	cliInProcess(t, env, "key", "revoke", secret)
	var events []string
	rows, err := admin.Query(`SELECT event FROM webhook_deliveries ORDER BY created_at, event`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var e string
		if err := rows.Scan(&e); err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	if !slices.Equal(events, []string{"key.created", "key.revoked"}) {
		t.Fatalf("outbox holds %v after key create and key revoke on the command line, want key.created and key.revoked", events)
	}
}

// TestGracefulShutdownFinishesInFlightRequests holds a lock that decisions wait behind, starts
// several, begins the shutdown while they wait, then releases the lock: every one of them must
// still get its 200, new connections must be refused meanwhile, and run must return cleanly
// (the database closes only after the last request).
func TestGracefulShutdownFinishesInFlightRequests(t *testing.T) {
	dbURL := postgresForTest(t)
	env := appEnv(dbURL, "LOG_LEVEL=info", "GRPC_ADDR=127.0.0.1:0")
	base, out, shutdown, wait := serveInProcess(t, env)
	grpcAddr := out.waitFor(t, regexp.MustCompile(`Envoy rate limit service on (\S+)`), 10*time.Second)
	cliInProcess(t, env, "tenant", "create", "acme")
	secret := strings.TrimSpace(strings.SplitN(cliInProcess(t, env, "key", "create", "--tenant", "acme"), "\n", 2)[0])
	c := newClient(secret)
	c.mustDo(t, "PUT", base+"/v1/limits/slow", map[string]any{"kind": "token bucket", "rate": 100, "period": 1000}, 200)
	c.mustDo(t, "POST", base+"/v1/limits/slow/limit", map[string]any{"key": "warm"}, 200)

	admin, lockTx := lockStateTable(t, dbURL)
	const n = 5
	type answer struct {
		status int
		ok     bool
		err    error
	}
	answers := make(chan answer, n)
	for i := range n {
		go func() {
			status, body, err := c.do("POST", base+"/v1/limits/slow/limit", map[string]any{"key": fmt.Sprint("k", i)})
			answers <- answer{status, body["ok"] == true, err}
		}()
	}
	// Wait until the decisions are blocked inside PostgreSQL behind the lock.
	testkit.WaitForLockWaiter(t, admin, 10*time.Second, "a decision")
	// Wait until every request has reached the server (one waits in PostgreSQL, the others
	// behind it in the engine's queue).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if got := metricValue(scrapeMetrics(t, out.waitFor(t, metricsRE, 10*time.Second)), "sluice_decision_requests_in_flight"); got == n {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %d decision requests in flight on the server; %v", n, got)
		}
	}
	shutdownAt := time.Now()
	shutdown()
	// The listeners close at once, the Envoy service's too: new connections are refused while
	// the old requests wait.
	for _, addr := range []string{strings.TrimPrefix(base, "http://"), grpcAddr} {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				break
			}
			conn.Close()
			if time.Now().After(deadline) {
				t.Fatalf("%s still accepts connections 5 s after the shutdown began", addr)
			}
		}
	}
	refusedAfter := time.Since(shutdownAt)
	select {
	case a := <-answers:
		t.Fatalf("a request finished before the lock was released: %+v", a)
	default:
	}
	if err := lockTx.Commit(); err != nil {
		t.Fatal(err)
	}
	for range n {
		a := <-answers
		if a.err != nil || a.status != 200 || !a.ok {
			t.Errorf("in-flight request during shutdown: %+v", a)
		}
	}
	if err := wait(); err != nil {
		t.Fatalf("run after shutdown: %v", err)
	}
	if !strings.Contains(out.String(), "stopped") {
		t.Errorf("no \"stopped\" log line:\n%s", out)
	}
	t.Logf("graceful shutdown: %d requests in flight behind a lock; new connections refused %v after the shutdown began; "+
		"all %d answered 200 ok after the lock was released; run returned %v after the shutdown began",
		n, refusedAfter.Round(time.Millisecond), n, time.Since(shutdownAt).Round(time.Millisecond))
}

// TestMetricsShowDecisionsLatencyAndRetries scrapes /metrics around a few decisions.
func TestMetricsShowDecisionsLatencyAndRetries(t *testing.T) {
	env := appEnv("sqlite:" + filepath.Join(t.TempDir(), "sluice.db"))
	base, out, shutdown, wait := serveInProcess(t, env)
	metricsURL := out.waitFor(t, metricsRE, 10*time.Second)
	cliInProcess(t, env, "tenant", "create", "acme")
	secret := strings.TrimSpace(strings.SplitN(cliInProcess(t, env, "key", "create", "--tenant", "acme"), "\n", 2)[0])
	c := newClient(secret)
	c.mustDo(t, "PUT", base+"/v1/limits/m", map[string]any{"kind": "fixed window", "rate": 3, "period": 3_600_000}, 200)
	before := scrapeMetrics(t, metricsURL)
	for range 5 {
		c.mustDo(t, "POST", base+"/v1/limits/m/limit", map[string]any{"key": "k"}, 200)
	}
	c.mustDo(t, "POST", base+"/v1/limits/m/check", map[string]any{"key": "k"}, 200)
	after := scrapeMetrics(t, metricsURL)
	// They name every tenant's limits: never on the public listener without METRICS_TOKEN.
	if res, err := http.Get(base + "/metrics"); err != nil || res.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /metrics on the API listener: %v %v, want 404", res, err)
	} else {
		res.Body.Close()
	}
	diff := func(prefix string) float64 { return metricValue(after, prefix) - metricValue(before, prefix) }
	if got := diff(`sluice_decisions_total{name="m",result="allowed",tenant="1"}`); got != 3 {
		t.Errorf("allowed decisions counted: %v, want 3", got)
	}
	if got := diff(`sluice_decisions_total{name="m",result="refused",tenant="1"}`); got != 2 {
		t.Errorf("refused decisions counted: %v, want 2", got)
	}
	if got := diff(`sluice_decision_duration_seconds_count{route="/v1/limits/:name/limit",status="2xx"}`); got != 5 {
		t.Errorf("decision latency observations: %v, want 5", got)
	}
	if got := diff(`sluice_decision_duration_seconds_count{route="/v1/limits/:name/check",status="2xx"}`); got != 1 {
		t.Errorf("check latency observations: %v, want 1", got)
	}
	for _, name := range []string{"sluice_db_tx_retries_total", "sluice_db_tx_giveups_total", "go_sql_open_connections", "sluice_build_info"} {
		if !strings.Contains(after, "\n"+name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	shutdown()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// postgresForTest is a fresh database on the shared test server, or on a dedicated one.
func postgresForTest(t *testing.T) string {
	t.Helper()
	if os.Getenv(testkit.EnvURL) != "" {
		return testkit.NewDatabase(t)
	}
	return dedicatedPostgres(t).URL
}

func scrapeMetrics(t *testing.T, metricsURL string) string {
	t.Helper()
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	return string(b)
}

// metricValue sums the samples of a metric whose line starts with prefix (name plus labels).
func metricValue(body, prefix string) float64 {
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		rest := strings.TrimPrefix(line, prefix)
		if rest != "" && rest[0] != ' ' && rest[0] != '{' {
			continue // a longer metric name
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// TestHealthcheckCommandProbesTheServer is the Dockerfile's HEALTHCHECK: `app healthcheck`
// succeeds while the server runs and fails once it is gone.
func TestHealthcheckCommandProbesTheServer(t *testing.T) {
	env := appEnv("sqlite:" + filepath.Join(t.TempDir(), "sluice.db"))
	base, _, shutdown, wait := serveInProcess(t, env)
	probeEnv := append(env, "LISTEN_ADDR=0.0.0.0:"+base[strings.LastIndex(base, ":")+1:])
	if out := cliInProcess(t, probeEnv, "healthcheck"); !strings.Contains(out, "/healthz ok") {
		t.Fatalf("healthcheck: %q", out)
	}
	if out := cliInProcess(t, probeEnv, "healthcheck", "--ready"); !strings.Contains(out, "/readyz ok") {
		t.Fatalf("healthcheck --ready: %q", out)
	}
	shutdown()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"healthcheck"}, envFunc(probeEnv), strings.NewReader(""), io.Discard, io.Discard); err == nil {
		t.Fatal("healthcheck succeeded with the server stopped")
	}
}

// TestTenantAndKeyCommands: the CLI lists tenants and keys, renames a tenant, and suspends and
// resumes it (its API key refused in between), on SQLite; bad usage is an error, not a panic.
func TestTenantAndKeyCommands(t *testing.T) {
	env := appEnv("sqlite:"+filepath.Join(t.TempDir(), "cli.db"), "MIGRATE=auto")
	cliInProcess(t, env, "migrate")
	cliInProcess(t, env, "tenant", "create", "acme")
	secret := strings.TrimSpace(strings.SplitN(cliInProcess(t, env, "key", "create", "--tenant", "acme", "--label", "ops"), "\n", 2)[0])
	if out := cliInProcess(t, env, "tenant", "list"); !strings.Contains(out, "\tacme\tactive") {
		t.Fatalf("tenant list: %q", out)
	}
	if out := cliInProcess(t, env, "key", "list", "acme"); !strings.Contains(out, "\tsecret\t") || !strings.Contains(out, "\tactive\tops") {
		t.Fatalf("key list: %q", out)
	}
	cliInProcess(t, env, "tenant", "rename", "acme", "acme-corp")
	cliInProcess(t, env, "tenant", "suspend", "acme-corp")
	if out := cliInProcess(t, env, "tenant", "list"); !strings.Contains(out, "\tacme-corp\tsuspended") {
		t.Fatalf("tenant list after rename and suspend: %q", out)
	}
	authenticate := func() error {
		d, err := app.Open(context.Background(), mustConfig(t, env), app.NewLogger(mustConfig(t, env), io.Discard), false)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		keys, err := app.LoadSecrets(context.Background(), mustConfig(t, env), d, app.NewLogger(mustConfig(t, env), io.Discard))
		if err != nil {
			t.Fatal(err)
		}
		_, err = tenants.NewService(d, keys.Pepper, nil).Authenticate(context.Background(), secret, tenants.KindSecret)
		return err
	}
	if err := authenticate(); !errors.Is(err, tenants.ErrTenantSuspended) {
		t.Fatalf("a suspended tenant's key: %v", err)
	}
	cliInProcess(t, env, "tenant", "resume", "acme-corp")
	if err := authenticate(); err != nil {
		t.Fatalf("after resume: %v", err)
	}
	for _, bad := range [][]string{{"tenant", "rename", "acme-corp"}, {"tenant", "suspend"}, {"tenant", "suspend", "nope"}, {"key", "list"}} {
		var out bytes.Buffer
		if err := run(context.Background(), bad, envFunc(env), strings.NewReader(""), &out, io.Discard); err == nil {
			t.Errorf("app %s succeeded", strings.Join(bad, " "))
		}
	}
}

func mustConfig(t *testing.T, env []string) config.Config {
	t.Helper()
	cfg, err := config.FromEnv(envFunc(env))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
