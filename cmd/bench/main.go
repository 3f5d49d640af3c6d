// Command bench measures Sluice over real HTTP against the raw ceiling of its database.
//
// It starts a throwaway PostgreSQL (the same harness as `make test`), measures pgbench's
// serializable read-modify-write ceiling on it (random key of 100,000, and one hot key with
// retries), builds and starts Sluice as a separate process on the same server, creates a tenant,
// a key and the limits, and drives each scenario with the load generator in loadgen.go. It prints
// one table and writes it as JSON. It reports; it never fails on speed.
//
//	go run ./cmd/bench [-duration 8s] [-runs 3] [-out bench-results/bench.json]
//	go run ./cmd/bench -compare-tags TAGS | -compare-dir DIR | -compare-env K=V [-only random-32,hot] [-pairs 3]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/internal/testkit"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == floorServeArg { // measureFloor's server process
		fmt.Fprintln(os.Stderr, "bench: HTTP floor:", floorServe(os.Args[2], os.Getenv("DATABASE_URL"), os.Args[3] == "true"))
		os.Exit(1)
	}
	duration := flag.Duration("duration", 8*time.Second, "length of each scenario run")
	runs := flag.Int("runs", 3, "runs per scenario (the table shows medians)")
	out := flag.String("out", "bench-results/bench.json", "where to write the JSON results")
	only := flag.String("only", "", "comma-separated scenario names to run (default all)")
	skipPgbench := flag.Bool("skip-pgbench", false, "skip the pgbench ceiling (for quick profiling runs)")
	fsync := flag.Bool("fsync", true, "run PostgreSQL durably, as deployed (false: fsync and full_page_writes off, as in make test)")
	pairs := flag.Int("pairs", 3, "pgbench random / random-32 pairs run back to back at the end (0: none); with -compare-*, the A/B pairs")
	compareDir := flag.String("compare-dir", "", "comparison mode (compare.go): build B from this tree")
	compareTags := flag.String("compare-tags", "", "comparison mode (compare.go): build B with these build tags")
	compareEnv := flag.String("compare-env", "", "comparison mode (compare.go): run B with these KEY=VALUE settings added to its environment (comma-separated)")
	sustain := flag.Duration("sustained", 0, "sustained mode: run random-32 this long (e.g. 10m) and print each minute's throughput, give-ups and retries")
	sustainRef := flag.Bool("sustained-reference", false, "sustained mode: follow each minute with a minute of pgbench's one-statement upsert at 32 clients, as the machine's own drift")
	flag.Parse()
	if *sustain > 0 {
		if err := sustained(*sustain, *fsync, *sustainRef); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *compareDir != "" || *compareTags != "" || *compareEnv != "" {
		if err := compare(*duration, *out, *only, *compareDir, *compareTags, *compareEnv, *fsync, *pairs); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := bench(*duration, *runs, *out, *only, *skipPgbench, *fsync, *pairs); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// postgresPID is the benchmark's PostgreSQL postmaster, whose CPU time (with its backends') each
// scenario reports per decision; 0 when unknown.
var postgresPID int

// benchEnv is what every mode needs: a built Sluice and a throwaway PostgreSQL with a database.
type benchEnv struct {
	work, bin, dbURL string
	srv              *testkit.Server
}

// setUp builds cmd/app and starts PostgreSQL (durably unless fsync is false).
func setUp(fsync bool) (*benchEnv, error) {
	work, err := os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		return nil, err
	}
	e := &benchEnv{work: work, bin: filepath.Join(work, "sluice")}
	build := exec.Command("go", "build", "-o", e.bin, "./cmd/app")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		e.tearDown()
		return nil, fmt.Errorf("build: %w", err)
	}
	// Durable by default: both pgbench and Sluice pay for their commits as they would in
	// production (the reference ceiling is also a durable one).
	if e.srv, err = testkit.StartWith(testkit.Options{Durable: fsync}); err != nil {
		e.tearDown()
		return nil, err
	}
	if e.dbURL, err = testkit.CreateDatabase(e.srv.URL); err != nil {
		e.tearDown()
		return nil, err
	}
	if postgresPID, err = e.srv.PostmasterPID(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: PostgreSQL's CPU time will not be reported: %v\n", err)
	}
	return e, nil
}

func (e *benchEnv) tearDown() {
	if e.srv != nil {
		e.srv.Stop()
	}
	_ = os.RemoveAll(e.work)
}

// Result is one scenario's median figures.
type Result struct {
	Scenario     string  `json:"scenario"`
	Connections  int     `json:"connections"`
	PerSecond    float64 `json:"decisionsPerSecond"`
	P50ms        float64 `json:"p50ms"`
	P99ms        float64 `json:"p99ms"`
	Errors       int64   `json:"errors"`
	Status5xx    int64   `json:"status5xx"`
	Admitted     int64   `json:"admitted"`
	Bound        float64 `json:"bound"` // the most the limit allows in the run (0: per-key bounds checked instead)
	OverAdmitted bool    `json:"overAdmitted"`
	RatioPgbench float64 `json:"ratioToPgbench"`
	Retries      float64 `json:"serializationRetries"` // of the median run, from /metrics
	PerGroup     float64 `json:"requestsPerGroupTransaction"`
	// TripsPerGroup and StatementsPerGroup: what each group transaction sent PostgreSQL.
	TripsPerGroup      float64 `json:"roundTripsPerGroupTransaction"`
	StatementsPerGroup float64 `json:"statementsPerGroupTransaction"`
	AppCPUus           float64 `json:"appCpuMicrosPerDecision"`
	PgCPUus            float64 `json:"postgresCpuMicrosPerDecision"`
	// IdlePercent is the share of the machine's cores left idle during the run (/proc/stat):
	// near 0, the machine is the ceiling; well above it, something in the path is.
	IdlePercent float64 `json:"machineIdlePercent"`
	// LanePercent is the time the instances' group transactions took over the run's wall time
	// (sluice_decision_group_seconds_total): near 100 × the lanes, every lane was always in a
	// transaction, and the database's turn was the ceiling.
	LanePercent float64   `json:"laneBusyPercent"`
	Runs        []float64 `json:"runsPerSecond"`
}

// Report is the JSON file.
type Report struct {
	Machine       string  `json:"machine"`
	When          string  `json:"when"`
	PgFsync       bool    `json:"postgresFsync"`
	PgbenchRandom float64 `json:"pgbenchRandomTPS"`
	PgbenchHot    float64 `json:"pgbenchHotTPS"`
	// Upserts are pgbench's one-statement token-bucket upsert (pgbench.go), the reference for
	// latency at one connection and for the commit modes.
	Upserts []UpsertRef `json:"pgbenchUpserts,omitempty"`
	// Floors are the upsert behind the least a Go service can be, at one connection (floor.go),
	// medians of the runs measured in the triples.
	Floors []FloorRef `json:"httpFloors,omitempty"`
	// Triples are each run of random-1 and random-1-fast with pgbench's upsert at 1 client and
	// the HTTP floor (same commit mode) measured just before it, so that the ratios between the
	// three are not biased by the VM's drift between references and scenarios.
	Triples         []Triple `json:"oneConnectionTriples,omitempty"`
	Results         []Result `json:"results"`
	ServerPeakRSSMB float64  `json:"serverPeakRssMB"`
	// HotUpdates of Updates of limit_state's row updates were heap-only (PostgreSQL's statistics).
	HotUpdates int64 `json:"limitStateHotUpdates"`
	Updates    int64 `json:"limitStateUpdates"`
	// Pairs are pgbench's random ceiling and random-32 measured back to back, each pair within
	// seconds, so that the VM's drift over the whole run cannot bias their ratio.
	Pairs           []Pair  `json:"pairs,omitempty"`
	PairRatioMedian float64 `json:"pairRatioMedian,omitempty"`
	// OverridePairs are random-32 without and with 1,000 overrides run back to back (their order
	// alternating), so that the load of a shared machine cannot bias the ratio.
	OverridePairs           []OverridePair `json:"overridePairs,omitempty"`
	OverridePairRatioMedian float64        `json:"overridePairRatioMedian,omitempty"`
}

// Triple is one run of a one-connection scenario with its two references measured just before.
type Triple struct {
	Scenario    string  `json:"scenario"`
	UpsertP50ms float64 `json:"upsertP50ms"`
	FloorP50ms  float64 `json:"floorP50ms"`
	P50ms       float64 `json:"p50ms"`
}

// OverridePair is one back-to-back measurement of random-32 without and with overrides.
type OverridePair struct {
	Without float64 `json:"random32PerSecond"`
	With    float64 `json:"random32OverridesPerSecond"`
	Ratio   float64 `json:"ratio"`
}

// Pair is one back-to-back measurement of the pgbench random ceiling and random-32.
type Pair struct {
	PgbenchTPS float64 `json:"pgbenchRandomTPS"`
	PerSecond  float64 `json:"random32PerSecond"`
	Ratio      float64 `json:"ratio"`
	// Errors (5xx included) and over-admission of the random-32 run, as in the table.
	Errors       int64 `json:"errors"`
	OverAdmitted bool  `json:"overAdmitted"`
}

func bench(duration time.Duration, runs int, outPath, only string, skipPgbench, fsync bool, pairs int) error {
	want := map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	selected := func(name string) bool { return len(want) == 0 || want[name] }

	env, err := setUp(fsync)
	if err != nil {
		return err
	}
	defer env.tearDown()
	work, bin, srv, dbURL := env.work, env.bin, env.srv, env.dbURL
	fmt.Fprintf(os.Stderr, "bench: PostgreSQL on port %d (fsync %v)\n", srv.Port, fsync)

	report := Report{Machine: machine(), When: time.Now().UTC().Format(time.RFC3339), PgFsync: fsync}
	var randomTPS, hotTPS []float64
	for range runs {
		if skipPgbench {
			break
		}
		r, err := pgbench(srv, dbURL, false, duration)
		if err != nil {
			return err
		}
		h, err := pgbench(srv, dbURL, true, duration)
		if err != nil {
			return err
		}
		randomTPS, hotTPS = append(randomTPS, r), append(hotTPS, h)
	}
	report.PgbenchRandom, report.PgbenchHot = median(randomTPS), median(hotTPS)
	if !skipPgbench {
		for _, ref := range upsertReferences {
			var tps, p50, p99, pgCPU []float64
			for range runs {
				r, err := pgbenchUpsert(srv, dbURL, ref, duration)
				if err != nil {
					return err
				}
				tps, p50, p99, pgCPU = append(tps, r.TPS), append(p50, r.P50ms), append(p99, r.P99ms), append(pgCPU, r.PgCPUus)
			}
			ref.TPS, ref.P50ms, ref.P99ms, ref.PgCPUus = median(tps), median(p50), median(p99), median(pgCPU)
			report.Upserts = append(report.Upserts, ref)
			fmt.Fprintf(os.Stderr, "bench: pgbench one-statement upsert, %d clients, synchronous_commit %v: %.0f TPS, p50 %.3f ms, p99 %.3f ms\n",
				ref.Clients, !ref.AsyncCommit, ref.TPS, ref.P50ms, ref.P99ms)
		}
	}
	// pgbench leaves 100,000 rows churned by millions of updates: drop them and checkpoint, so
	// that autovacuum cleaning up after pgbench does not run during Sluice's scenarios.
	if err := psql(dbURL, "DROP TABLE IF EXISTS rmw; CHECKPOINT;"); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: pgbench serializable RMW ceiling: random %.0f TPS, hot key %.0f TPS\n", report.PgbenchRandom, report.PgbenchHot)

	pg, err := startSluice(bin, work, dbURL)
	if err != nil {
		return err
	}
	defer pg.stop()
	sqlite, err := startSluice(bin, work, "sqlite:"+filepath.Join(work, "bench.db"))
	if err != nil {
		return err
	}
	defer sqlite.stop()

	var pg2 *sluice    // a second instance on the same database, for the -2i scenarios
	var pgFast *sluice // an instance with SLUICE_COMMIT=fast, for the -fast scenarios
	for _, sc := range scenarios() {
		if !selected(sc.name) {
			continue
		}
		targets := []*sluice{pg}
		switch {
		case sc.sqlite:
			targets = []*sluice{sqlite}
		case sc.fastCommit:
			if pgFast == nil {
				if pgFast, err = startSluice(bin, work, dbURL, "SLUICE_COMMIT=fast"); err != nil {
					return err
				}
				defer pgFast.stop()
			}
			targets = []*sluice{pgFast}
		case sc.instances == 2:
			if pg2 == nil {
				if pg2, err = startSluice(bin, work, dbURL); err != nil {
					return err
				}
				defer pg2.stop()
			}
			targets = []*sluice{pg, pg2}
		}
		async, oneConn := oneConnectionAsyncCommit[sc.name]
		oneConn = oneConn && !skipPgbench
		var per []RunResult
		var floors []FloorRef
		for i := range runs {
			var triple Triple
			if oneConn { // the references just before the run (Triple)
				u, err := pgbenchUpsert(srv, dbURL, UpsertRef{Clients: 1, AsyncCommit: async}, duration)
				if err != nil {
					return err
				}
				f, err := measureFloor(dbURL, async, duration)
				if err != nil {
					return err
				}
				floors = append(floors, f)
				triple = Triple{Scenario: sc.name, UpsertP50ms: u.P50ms, FloorP50ms: f.P50ms}
				fmt.Fprintf(os.Stderr, "bench: %-19s run %d: upsert p50 %.3f ms, HTTP floor p50 %.3f ms (app %.0f µs)\n", sc.name, i+1, u.P50ms, f.P50ms, f.AppCPUus)
			}
			// A fresh limit name per run, so every run starts from full state.
			rr, err := runScenario(targets, sc, fmt.Sprintf("%s_%d", strings.ReplaceAll(sc.name, "-", "_"), i), duration)
			if err != nil {
				return fmt.Errorf("%s: %w", sc.name, err)
			}
			per = append(per, rr)
			fmt.Fprintf(os.Stderr, "bench: %-19s run %d: %8.0f/s p50 %.2f ms p99 %.2f ms errors %d\n", sc.name, i+1, rr.PerSecond, rr.P50ms, rr.P99ms, rr.Errors)
			if oneConn {
				triple.P50ms = rr.P50ms
				report.Triples = append(report.Triples, triple)
			}
		}
		if len(floors) > 0 {
			var p50, p99, app, pgCPU []float64
			for _, f := range floors {
				p50, p99, app, pgCPU = append(p50, f.P50ms), append(p99, f.P99ms), append(app, f.AppCPUus), append(pgCPU, f.PgCPUus)
			}
			report.Floors = append(report.Floors, FloorRef{AsyncCommit: async, P50ms: median(p50), P99ms: median(p99), AppCPUus: median(app), PgCPUus: median(pgCPU)})
		}
		res := summarize(sc, per)
		ceiling := report.PgbenchRandom
		if sc.hot {
			ceiling = report.PgbenchHot
		}
		if ceiling > 0 {
			res.RatioPgbench = res.PerSecond / ceiling
		}
		report.Results = append(report.Results, res)
	}
	printOverridesRatio(report.Results)
	if selected("random-32-overrides") && pairs > 0 {
		if err := measureOverridePairs(&report, pg, pairs, duration); err != nil {
			fmt.Fprintf(os.Stderr, "bench: override pairs stopped: %v\n", err)
		}
	}
	if !skipPgbench && selected("random-32") {
		// The scenarios' figures are already in: a failed pair is reported, not fatal.
		if err := measurePairs(&report, srv, dbURL, pg, pairs, duration); err != nil {
			fmt.Fprintf(os.Stderr, "bench: pairs stopped: %v\n", err)
		}
	}
	report.ServerPeakRSSMB = max(pg.peakRSSMB(), sqlite.peakRSSMB())
	report.HotUpdates, report.Updates = hotUpdates(dbURL)
	printTable(os.Stdout, report)
	if err := os.MkdirAll(filepath.Dir(outPath), 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(report, "", "  ")
	if err := os.WriteFile(outPath, b, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s\n", outPath)
	return nil
}

func machine() string {
	host, _ := os.Hostname()
	cpu := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	n := 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		n = strings.Count(string(b), "processor\t:")
	}
	return fmt.Sprintf("%s, %d cores, %s", host, n, cpu)
}

// latencyPercentiles sorts latencies and returns their p50 and p99 in ms (zeros when empty).
func latencyPercentiles(latencies []time.Duration) (p50ms, p99ms float64) {
	if len(latencies) == 0 {
		return 0, 0
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	return float64(latencies[len(latencies)/2]) / 1e6, float64(latencies[len(latencies)*99/100]) / 1e6
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// measurePairs runs pgbench's random ceiling and random-32 back to back, pairs times. On a shared
// VM throughput drifts by tens of percent over minutes; a ratio of figures taken seconds apart is
// much less exposed to that drift than the ceiling measured once at the start.
func measurePairs(report *Report, srv *testkit.Server, dbURL string, pg *sluice, pairs int, duration time.Duration) error {
	var sc scenario
	for _, s := range scenarios() {
		if s.name == "random-32" {
			sc = s
		}
	}
	var ratios []float64
	for i := range pairs {
		tps, err := pgbench(srv, dbURL, false, duration)
		if err != nil {
			return err
		}
		if err := psql(dbURL, "DROP TABLE IF EXISTS rmw; CHECKPOINT;"); err != nil {
			return err
		}
		rr, err := runScenario([]*sluice{pg}, sc, fmt.Sprintf("pair_%d", i), duration)
		if err != nil {
			return fmt.Errorf("pair %d: %w", i, err)
		}
		p := Pair{PgbenchTPS: tps, PerSecond: rr.PerSecond, Ratio: rr.PerSecond / tps, Errors: rr.Errors + rr.Status5xx, OverAdmitted: rr.Over}
		report.Pairs = append(report.Pairs, p)
		ratios = append(ratios, p.Ratio)
		fmt.Fprintf(os.Stderr, "bench: pair %d: pgbench random %.0f TPS, random-32 %.0f/s: %.2f× (errors %d, over-admitted %v)\n",
			i+1, p.PgbenchTPS, p.PerSecond, p.Ratio, p.Errors, p.OverAdmitted)
	}
	report.PairRatioMedian = median(ratios)
	return nil
}

// pgbench measures one serializable read-modify-write of one row per transaction at 32 clients:
// a random row of 100,000, or one hot row (serialization failures retried up to 1000 times).
func pgbench(srv *testkit.Server, dbURL string, hot bool, duration time.Duration) (float64, error) {
	bindir, err := testkit.BinDir()
	if err != nil {
		return 0, err
	}
	setup := exec.Command(filepath.Join(bindir, "psql"), dbURL, "-q", "-c",
		`CREATE TABLE IF NOT EXISTS rmw (k int PRIMARY KEY, v double precision NOT NULL, ts bigint NOT NULL);
		 INSERT INTO rmw SELECT g, 1000000, 0 FROM generate_series(1, 100000) g ON CONFLICT DO NOTHING;`)
	if out, err := setup.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("pgbench setup: %w: %s", err, out)
	}
	key := `\set k random(1, 100000)`
	if hot {
		key = `\set k 1`
	}
	script := key + `
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT v, ts FROM rmw WHERE k = :k;
UPDATE rmw SET v = v - 1, ts = ts + 1 WHERE k = :k;
COMMIT;
`
	f, err := os.CreateTemp("", "rmw-*.sql")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	_, _ = f.WriteString(script)
	_ = f.Close()
	cmd := exec.Command(filepath.Join(bindir, "pgbench"), "-n", "-c", "32", "-j", "2", "-T", strconv.Itoa(int(duration.Seconds())),
		"--max-tries=1000", "-f", f.Name(), dbURL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("pgbench: %w: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "tps = ") {
			fields := strings.Fields(line)
			return strconv.ParseFloat(fields[2], 64)
		}
	}
	return 0, fmt.Errorf("pgbench: no tps in output: %s", out)
}

// sluice is a running Sluice process.
type sluice struct {
	cmd     *exec.Cmd
	base    string
	metrics string // the metrics listener's /metrics (METRICS_ADDR)
	grpc    string // the Envoy rate limit service's host:port (GRPC_ADDR)
	dbURL   string // its database (DATABASE_URL; SQLite's sqlite:PATH for the SQLite scenarios)
	key     string
	env     []string
}

// instancesStarted counts startSluice's instances, which number their pprof addresses.
var instancesStarted atomic.Int32

// pprofAddrOf is the pprof address of the n-th instance (from 0) the bench starts, when
// BENCH_PPROF_ADDR is base: base's port plus n, so that every instance serves its own profiles
// (with one address for all, only the first bound it and the others served none, silently).
// An empty base gives an empty address (pprof off).
func pprofAddrOf(base string, n int) (string, error) {
	if base == "" {
		return "", nil
	}
	host, portText, err := net.SplitHostPort(base)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil || port < 1 || port+n > 65535 {
		return "", fmt.Errorf("BENCH_PPROF_ADDR %q: want host:port, with room for a port per instance above it", base)
	}
	return net.JoinHostPort(host, strconv.Itoa(port+n)), nil
}

// startSluice starts one instance on dbURL, with extraEnv added to its environment.
func startSluice(bin, work, dbURL string, extraEnv ...string) (*sluice, error) {
	port, err := testkit.FreePort()
	if err != nil {
		return nil, err
	}
	metricsPort, err := testkit.FreePort()
	if err != nil {
		return nil, err
	}
	grpcPort, err := testkit.FreePort()
	if err != nil {
		return nil, err
	}
	pprofAddr, err := pprofAddrOf(os.Getenv("BENCH_PPROF_ADDR"), int(instancesStarted.Add(1))-1)
	if err != nil {
		return nil, err
	}
	if pprofAddr != "" {
		with := ""
		if len(extraEnv) > 0 {
			with = " with " + strings.Join(extraEnv, " ")
		}
		fmt.Fprintf(os.Stderr, "bench: pprof of the instance on %s%s: http://%s/debug/pprof/\n", dbURL, with, pprofAddr)
	}
	s := &sluice{base: fmt.Sprintf("http://127.0.0.1:%d", port), metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort),
		grpc: fmt.Sprintf("127.0.0.1:%d", grpcPort), dbURL: dbURL}
	s.env = append(os.Environ(), "SLUICE_PPROF_ADDR="+pprofAddr, "DATABASE_URL="+dbURL, "MIGRATE=auto", "LOG_LEVEL=warn",
		"SECRET_KEY=bench-secret-key-0123456789abcdef0123", fmt.Sprintf("METRICS_ADDR=127.0.0.1:%d", metricsPort), "GRPC_ADDR="+s.grpc,
		fmt.Sprintf("LISTEN_ADDR=127.0.0.1:%d", port), "SLUICE_ADMIN_EMAIL=", "SLUICE_ADMIN_PASSWORD=")
	s.env = append(s.env, extraEnv...)
	cli := func(args ...string) (string, error) {
		c := exec.Command(bin, args...)
		c.Env, c.Dir = s.env, work
		out, err := c.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%v: %w: %s", args, err, out)
		}
		return string(out), nil
	}
	if _, err := cli("migrate"); err != nil {
		return nil, err
	}
	tenant := fmt.Sprintf("bench%d", port)
	if _, err := cli("tenant", "create", tenant); err != nil {
		return nil, err
	}
	out, err := cli("key", "create", "--tenant", tenant, "--label", "bench")
	if err != nil {
		return nil, err
	}
	s.key = strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	s.cmd = exec.Command(bin, "serve")
	s.cmd.Env, s.cmd.Dir = s.env, work
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, os.Stderr
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("sluice did not become ready on %s", s.base)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *sluice) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = s.cmd.Process.Kill()
		}
		s.cmd = nil
	}
}

// peakRSSMB is the server's high-water resident set (VmHWM) in MB.
func (s *sluice) peakRSSMB() float64 {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func (s *sluice) put(ctx context.Context, name, body string) error {
	return s.putPath(ctx, "/v1/limits/"+name, body)
}

// putPath sends one PUT to path with body and wants a 200.
func (s *sluice) putPath(ctx context.Context, path, body string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, s.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("PUT %s: %d %s", path, resp.StatusCode, b)
	}
	return nil
}

func printTable(w io.Writer, r Report) {
	fmt.Fprintf(w, "\nSluice benchmark — %s — %s\n", r.Machine, r.When)
	fmt.Fprintf(w, "PostgreSQL fsync %v; pgbench serializable read-modify-write (32 clients): random key %.0f TPS, hot key %.0f TPS\n", r.PgFsync, r.PgbenchRandom, r.PgbenchHot)
	for _, u := range r.Upserts {
		fmt.Fprintf(w, "pgbench one-statement token-bucket upsert, %2d clients, synchronous_commit %-3v: %6.0f TPS, p50 %.3f ms, p99 %.3f ms, pg %.0f µs per transaction\n",
			u.Clients, onOff(!u.AsyncCommit), u.TPS, u.P50ms, u.P99ms, u.PgCPUus)
	}
	for _, f := range r.Floors {
		fmt.Fprintf(w, "HTTP floor (the upsert behind a hand-written HTTP/1.1 responder, one P), 1 connection, synchronous_commit %-3v: p50 %.3f ms, p99 %.3f ms, app %.0f µs, pg %.0f µs per request\n",
			onOff(!f.AsyncCommit), f.P50ms, f.P99ms, f.AppCPUus, f.PgCPUus)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "| %-19s | %5s | %12s | %8s | %8s | %6s | %5s | %-24s | %8s | %8s | %6s | %9s | %7s | %7s | %6s | %6s |\n", "scenario", "conns", "decisions/s", "p50 ms", "p99 ms", "errors", "5xx", "admitted / bound", "×pgbench", "retries", "per tx", "trips/stm", "app µs", "pg µs", "idle %", "lane %")
	fmt.Fprintf(w, "|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", strings.Repeat("-", 21), strings.Repeat("-", 7), strings.Repeat("-", 14), strings.Repeat("-", 10), strings.Repeat("-", 10), strings.Repeat("-", 8), strings.Repeat("-", 7), strings.Repeat("-", 26), strings.Repeat("-", 10), strings.Repeat("-", 10), strings.Repeat("-", 8), strings.Repeat("-", 11), strings.Repeat("-", 9), strings.Repeat("-", 9), strings.Repeat("-", 8), strings.Repeat("-", 8))
	for _, x := range r.Results {
		bound := "per-key ok"
		if x.Bound > 0 {
			bound = fmt.Sprintf("%d / %.0f", x.Admitted, x.Bound)
		}
		if x.OverAdmitted {
			bound += " OVER"
		}
		fmt.Fprintf(w, "| %-19s | %5d | %12.0f | %8.2f | %8.2f | %6d | %5d | %-24s | %8.2f | %8.0f | %6.1f | %4.1f/%4.1f | %7.0f | %7.0f | %6.1f | %6.1f |\n", x.Scenario, x.Connections, x.PerSecond, x.P50ms, x.P99ms, x.Errors, x.Status5xx, bound, x.RatioPgbench, x.Retries, x.PerGroup, x.TripsPerGroup, x.StatementsPerGroup, x.AppCPUus, x.PgCPUus, x.IdlePercent, x.LanePercent)
	}
	printRatios(w, r)
	if len(r.Pairs) > 0 {
		fmt.Fprintf(w, "\nback-to-back pairs, random-32 / pgbench random:")
		for _, p := range r.Pairs {
			fmt.Fprintf(w, " %.0f/%.0f = %.2f×", p.PerSecond, p.PgbenchTPS, p.Ratio)
			if p.Errors > 0 || p.OverAdmitted {
				fmt.Fprintf(w, " (errors %d, OVER %v)", p.Errors, p.OverAdmitted)
			}
			fmt.Fprint(w, ";")
		}
		fmt.Fprintf(w, " median %.2f×\n", r.PairRatioMedian)
	}
	fmt.Fprintf(w, "\nserver peak RSS: %.0f MB\n", r.ServerPeakRSSMB)
	if r.Updates > 0 {
		fmt.Fprintf(w, "limit_state updates heap-only (HOT): %d of %d (%.1f%%)\n", r.HotUpdates, r.Updates, 100*float64(r.HotUpdates)/float64(r.Updates))
	}
}

// hotUpdates reads how many of limit_state's updates so far were heap-only (no new index entry,
// so no conflict on the primary key's pages between concurrent groups); 0, 0 when unknown.
func hotUpdates(dbURL string) (hot, all int64) {
	bindir, err := testkit.BinDir()
	if err != nil {
		return 0, 0
	}
	out, err := exec.Command(filepath.Join(bindir, "psql"), dbURL, "-qAt", "-F", " ", "-c",
		"SELECT n_tup_hot_upd, n_tup_upd FROM pg_stat_user_tables WHERE relname = 'limit_state'").Output()
	if err != nil {
		return 0, 0
	}
	if _, err := fmt.Sscan(string(out), &hot, &all); err != nil {
		return 0, 0
	}
	return hot, all
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// printRatios prints the engine issue's comparisons that this run's figures allow (each from
// this run only; a missing scenario or reference skips its line).
func printRatios(w io.Writer, r Report) {
	res := map[string]Result{}
	for _, x := range r.Results {
		res[x.Scenario] = x
	}
	ref := func(clients int, async bool) (UpsertRef, bool) {
		for _, u := range r.Upserts {
			if u.Clients == clients && u.AsyncCommit == async {
				return u, true
			}
		}
		return UpsertRef{}, false
	}
	var lines []string
	floor := func(async bool) (FloorRef, bool) {
		for _, f := range r.Floors {
			if f.AsyncCommit == async {
				return f, true
			}
		}
		return FloorRef{}, false
	}
	for _, one := range []struct {
		scenario, commit string
		async            bool
	}{{"random-1", "durable", false}, {"random-1-fast", "synchronous_commit off", true}} {
		var toUpsert, floorToUpsert, toFloor []string
		var toUpsertV, floorToUpsertV, toFloorV []float64
		for _, t := range r.Triples {
			if t.Scenario != one.scenario || t.UpsertP50ms <= 0 || t.FloorP50ms <= 0 {
				continue
			}
			toUpsert = append(toUpsert, fmt.Sprintf("%.2f/%.3f", t.P50ms, t.UpsertP50ms))
			floorToUpsert = append(floorToUpsert, fmt.Sprintf("%.3f/%.3f", t.FloorP50ms, t.UpsertP50ms))
			toFloor = append(toFloor, fmt.Sprintf("%.2f/%.3f", t.P50ms, t.FloorP50ms))
			toUpsertV = append(toUpsertV, t.P50ms/t.UpsertP50ms)
			floorToUpsertV = append(floorToUpsertV, t.FloorP50ms/t.UpsertP50ms)
			toFloorV = append(toFloorV, t.P50ms/t.FloorP50ms)
		}
		if len(toUpsertV) == 0 {
			continue
		}
		lines = append(lines,
			fmt.Sprintf("%s p50 / upsert p50 at 1 client, %s, each run with its own references: %s: median %.2f×", one.scenario, one.commit, strings.Join(toUpsert, ", "), median(toUpsertV)),
			fmt.Sprintf("  the HTTP floor's p50 / the upsert's: %s: median %.2f×", strings.Join(floorToUpsert, ", "), median(floorToUpsertV)),
			fmt.Sprintf("  %s p50 / the HTTP floor's: %s: median %.2f×", one.scenario, strings.Join(toFloor, ", "), median(toFloorV)))
	}
	if n, ok := res["new-keys-32"]; ok {
		if u, ok := ref(32, false); ok && u.P99ms > 0 {
			lines = append(lines, fmt.Sprintf("new-keys-32 p99 / upsert p99 at 32 clients, durable: %.2f / %.2f ms = %.2f×", n.P99ms, u.P99ms, n.P99ms/u.P99ms))
		}
	}
	if a, ok := res["random-32"]; ok {
		if h, ok := res["hot"]; ok && a.PerSecond > 0 {
			lines = append(lines, fmt.Sprintf("hot / random-32: %.2f×", h.PerSecond/a.PerSecond))
		}
		if n, ok := res["new-keys-32"]; ok && a.PerSecond > 0 {
			lines = append(lines, fmt.Sprintf("new-keys-32 / random-32: %.2f×", n.PerSecond/a.PerSecond))
		}
		// Units of work (two requests each: hold and settle, acquire and release) per second.
		for _, name := range []string{"hold-settle", "lease"} {
			if x, ok := res[name]; ok && a.PerSecond > 0 {
				lines = append(lines, fmt.Sprintf("%s (units of work of two round trips) / random-32: %.0f / %.0f = %.2f×", name, x.PerSecond, a.PerSecond, x.PerSecond/a.PerSecond))
			}
		}
		if one, ok := res["random-1"]; ok && a.AppCPUus > 0 {
			lines = append(lines, fmt.Sprintf("app CPU per decision, random-1 / random-32: %.0f / %.0f µs = %.2f×", one.AppCPUus, a.AppCPUus, one.AppCPUus/a.AppCPUus))
			if f, ok := floor(false); ok {
				lines = append(lines, fmt.Sprintf("  the HTTP floor's CPU per request at 1 connection / Sluice's per decision at random-32: %.0f / %.0f µs = %.2f×",
					f.AppCPUus, a.AppCPUus, f.AppCPUus/a.AppCPUus))
			}
		}
		lines = append(lines, fmt.Sprintf("total CPU per decision at random-32: %.0f µs (app %.0f + PostgreSQL %.0f)", a.AppCPUus+a.PgCPUus, a.AppCPUus, a.PgCPUus))
	}
	if len(lines) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(lines, "\n"))
	}
}

// scrapeCounter reads a counter from the metrics listener: name alone sums every label set,
// name{labels} (exactly as exposed) reads one.
func (s *sluice) scrapeCounter(name string) float64 {
	resp, err := http.Get(s.metrics)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && (rest[0] != '{' || strings.Contains(name, "{"))) {
			continue // another metric, or another label set
		}
		f := strings.Fields(rest)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

func psql(dbURL, sql string) error {
	bindir, err := testkit.BinDir()
	if err != nil {
		return err
	}
	if out, err := exec.Command(filepath.Join(bindir, "psql"), dbURL, "-q", "-c", sql).CombinedOutput(); err != nil {
		return fmt.Errorf("psql: %w: %s", err, out)
	}
	return nil
}

// printOverridesRatio prints the throughput with 1,000 overrides over the same scenario without
// them, when both ran (the target is at least 0.9).
func printOverridesRatio(results []Result) {
	var without, with float64
	for _, r := range results {
		switch r.Scenario {
		case "random-32":
			without = r.PerSecond
		case "random-32-overrides":
			with = r.PerSecond
		}
	}
	if without > 0 && with > 0 {
		fmt.Fprintf(os.Stderr, "bench: random-32-overrides / random-32 = %.0f / %.0f = %.2f×\n", with, without, with/without)
	}
}

// measureOverridePairs runs random-32 and random-32-overrides back to back, pairs times, the
// first of each pair alternating, and records each pair's ratio (with / without) and the median.
func measureOverridePairs(report *Report, pg *sluice, pairs int, duration time.Duration) error {
	byName := map[string]scenario{}
	for _, s := range scenarios() {
		byName[s.name] = s
	}
	var ratios []float64
	for i := range pairs {
		order := []string{"random-32", "random-32-overrides"}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		got := map[string]float64{}
		for _, n := range order {
			rr, err := runScenario([]*sluice{pg}, byName[n], fmt.Sprintf("opair_%s_%d", strings.ReplaceAll(n, "-", "_"), i), duration)
			if err != nil {
				return err
			}
			got[n] = rr.PerSecond
		}
		p := OverridePair{Without: got["random-32"], With: got["random-32-overrides"]}
		p.Ratio = p.With / p.Without
		report.OverridePairs = append(report.OverridePairs, p)
		ratios = append(ratios, p.Ratio)
		fmt.Fprintf(os.Stderr, "bench: override pair %d (%s first): random-32 %.0f/s, with 1,000 overrides %.0f/s: %.2f×\n", i+1, order[0], p.Without, p.With, p.Ratio)
	}
	report.OverridePairRatioMedian = median(ratios)
	fmt.Fprintf(os.Stderr, "bench: override pairs: median %.2f×\n", report.OverridePairRatioMedian)
	return nil
}
