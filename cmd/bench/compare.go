package main

// Comparison mode: two builds of Sluice, measured in alternation on one PostgreSQL server.
//
//	go run ./cmd/bench -compare-tags sluice_gorm_groups -only random-32,hot -pairs 3
//	go run ./cmd/bench -compare-dir /tmp/old-tree -only random-32,hot -pairs 3
//	go run ./cmd/bench -compare-env GOMAXPROCS=1 -only random-1,random-32 -pairs 3
//
// Build A is this tree; build B is -compare-dir (default this tree) built with -compare-tags,
// and run with -compare-env added to its environment (a setting's A/B needs only that).
// Each runs on its own database of the same server. Every pair runs each selected scenario on
// both builds back to back, A first in odd pairs and B first in even ones, so that the VM's drift
// over minutes falls on both sides alike; the ratio B/A of each pair is the figure to read.
// Measured on the shared 2-core VM (docs/performance.md, 2026-11-25), an A/A run still favoured
// B by a median of 10%: run a comparison both ways round before believing a small difference.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/testkit"
)

// ComparePair is one scenario measured on both builds back to back.
type ComparePair struct {
	Scenario string  `json:"scenario"`
	Pair     int     `json:"pair"`
	AFirst   bool    `json:"aFirst"`
	A        float64 `json:"aPerSecond"`
	B        float64 `json:"bPerSecond"`
	Ratio    float64 `json:"ratioBtoA"`
	// The medians of each run's latencies, the app's and PostgreSQL's CPU µs per decision, and
	// the share of the machine left idle.
	AP50ms  float64 `json:"aP50ms"`
	BP50ms  float64 `json:"bP50ms"`
	AAppCPU float64 `json:"aAppCpuMicros"`
	BAppCPU float64 `json:"bAppCpuMicros"`
	APgCPU  float64 `json:"aPostgresCpuMicros"`
	BPgCPU  float64 `json:"bPostgresCpuMicros"`
	AIdle   float64 `json:"aMachineIdle"`
	BIdle   float64 `json:"bMachineIdle"`
	Errors  int64   `json:"errors"` // both runs, 5xx included
	Over    bool    `json:"overAdmitted"`
}

// CompareReport is the JSON file of a comparison.
type CompareReport struct {
	Machine string        `json:"machine"`
	When    string        `json:"when"`
	PgFsync bool          `json:"postgresFsync"`
	A       string        `json:"a"`
	B       string        `json:"b"`
	Pairs   []ComparePair `json:"pairs"`
}

func buildApp(out, dir, tags string) error {
	args := []string{"build", "-o", out}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	args[2] = abs
	build := exec.Command("go", append(args, "./cmd/app")...)
	build.Dir = dir
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build %s (tags %q): %w", dir, tags, err)
	}
	return nil
}

func compare(duration time.Duration, outPath, only, dirB, tagsB, envB string, fsync bool, pairs int) error {
	if dirB == "" {
		dirB = "."
	}
	var selected []scenario
	withSQLite, withFast := false, false
	for _, sc := range scenarios() {
		if sc.instances > 1 || sc.grpc {
			continue // one process per build here; the -2i scenarios need the plain mode; gRPC is new
		}
		if only == "" || strings.Contains(","+only+",", ","+sc.name+",") {
			selected = append(selected, sc)
			withSQLite = withSQLite || sc.sqlite
			withFast = withFast || sc.fastCommit
		}
	}
	if len(selected) == 0 {
		return fmt.Errorf("compare: no scenario selected by -only %q", only)
	}
	var envOfB []string // B's extra settings, checked before anything is built or started
	if envB != "" {
		for _, kv := range strings.Split(envB, ",") {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				return fmt.Errorf("compare: -compare-env wants KEY=VALUE settings separated by commas (a value cannot contain one), got %q", kv)
			}
			envOfB = append(envOfB, kv)
		}
	}
	work, err := os.MkdirTemp("", "sluice-compare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	binA, binB := filepath.Join(work, "sluice-a"), filepath.Join(work, "sluice-b")
	if err := buildApp(binA, ".", ""); err != nil {
		return err
	}
	if err := buildApp(binB, dirB, tagsB); err != nil {
		return err
	}
	srv, err := testkit.StartWith(testkit.Options{Durable: fsync})
	if err != nil {
		return err
	}
	defer srv.Stop()
	if postgresPID, err = srv.PostmasterPID(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: PostgreSQL's CPU time will not be reported: %v\n", err)
	}
	var procs, sqliteProcs, fastProcs [2]*sluice
	for i, bin := range []string{binA, binB} {
		dbURL, err := testkit.CreateDatabase(srv.URL)
		if err != nil {
			return err
		}
		dir := filepath.Join(work, fmt.Sprint("ab"[i:i+1]))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var extraEnv []string
		if i == 1 {
			extraEnv = envOfB
		}
		p, err := startSluice(bin, dir, dbURL, extraEnv...)
		if err != nil {
			return err
		}
		defer p.stop()
		procs[i] = p
		if withSQLite {
			if p, err = startSluice(bin, dir, "sqlite:"+filepath.Join(dir, "bench.db"), extraEnv...); err != nil {
				return err
			}
			defer p.stop()
			sqliteProcs[i] = p
		}
		if withFast { // the -fast scenarios: decisions commit with SLUICE_COMMIT=fast, as in the plain mode
			if p, err = startSluice(bin, dir, dbURL, append(slices.Clone(extraEnv), "SLUICE_COMMIT=fast")...); err != nil {
				return err
			}
			defer p.stop()
			fastProcs[i] = p
		}
	}
	report := CompareReport{Machine: machine(), When: time.Now().UTC().Format(time.RFC3339), PgFsync: fsync,
		A: "this tree", B: fmt.Sprintf("%s, tags %q, environment %q", dirB, tagsB, envB)}
	for i := range pairs {
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		for _, sc := range selected {
			cp := ComparePair{Scenario: sc.name, Pair: i + 1, AFirst: order[0] == 0}
			for _, which := range order {
				target := procs[which]
				switch {
				case sc.sqlite:
					target = sqliteProcs[which]
				case sc.fastCommit:
					target = fastProcs[which]
				}
				rr, err := runScenario([]*sluice{target}, sc, fmt.Sprintf("%s_%d", strings.ReplaceAll(sc.name, "-", "_"), i), duration)
				if err != nil {
					return fmt.Errorf("%s on %s: %w", sc.name, "AB"[which:which+1], err)
				}
				if which == 0 {
					cp.A, cp.AP50ms, cp.AAppCPU, cp.APgCPU, cp.AIdle = rr.PerSecond, rr.P50ms, rr.AppCPUus, rr.PgCPUus, rr.Idle
				} else {
					cp.B, cp.BP50ms, cp.BAppCPU, cp.BPgCPU, cp.BIdle = rr.PerSecond, rr.P50ms, rr.AppCPUus, rr.PgCPUus, rr.Idle
				}
				cp.Errors += rr.Errors + rr.Status5xx
				cp.Over = cp.Over || rr.Over
			}
			cp.Ratio = cp.B / cp.A
			report.Pairs = append(report.Pairs, cp)
			fmt.Fprintf(os.Stderr, "bench: pair %d %-19s A %8.0f/s  B %8.0f/s  B/A %.2f  p50 A %.2f B %.2f ms  app A %.0f B %.0f µs  pg A %.0f B %.0f µs  idle A %.0f%% B %.0f%% (errors %d, over %v)\n",
				cp.Pair, sc.name, cp.A, cp.B, cp.Ratio, cp.AP50ms, cp.BP50ms, cp.AAppCPU, cp.BAppCPU, cp.APgCPU, cp.BPgCPU, 100*cp.AIdle, 100*cp.BIdle, cp.Errors, cp.Over)
		}
	}
	printCompare(os.Stdout, report)
	if err := os.MkdirAll(filepath.Dir(outPath), 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(report, "", "  ")
	return os.WriteFile(outPath, b, 0o644)
}

func printCompare(w io.Writer, r CompareReport) {
	fmt.Fprintf(w, "\nSluice comparison — %s — %s — PostgreSQL fsync %v\nA: %s\nB: %s\n\n", r.Machine, r.When, r.PgFsync, r.A, r.B)
	fmt.Fprintf(w, "| pair | scenario            | first | A decisions/s | B decisions/s |  B/A | p50 ms A / B | app µs A / B | pg µs A / B | idle %% A / B | errors |\n")
	fmt.Fprintf(w, "|------|---------------------|-------|---------------|---------------|------|--------------|--------------|-------------|--------------|--------|\n")
	for _, p := range r.Pairs {
		first := "B"
		if p.AFirst {
			first = "A"
		}
		over := ""
		if p.Over {
			over = " OVER"
		}
		fmt.Fprintf(w, "| %4d | %-19s | %-5s | %13.0f | %13.0f | %4.2f | %5.2f / %5.2f | %5.0f / %5.0f | %4.0f / %4.0f | %5.1f / %5.1f | %6d%s |\n",
			p.Pair, p.Scenario, first, p.A, p.B, p.Ratio, p.AP50ms, p.BP50ms, p.AAppCPU, p.BAppCPU, p.APgCPU, p.BPgCPU, 100*p.AIdle, 100*p.BIdle, p.Errors, over)
	}
}
