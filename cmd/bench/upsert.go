package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/testkit"
)

// UpsertRef is one reference measurement of pgbench's one-statement token-bucket upsert: the
// least a strict limiter on PostgreSQL can do per decision (one serializable statement on one
// row, the time from the database's clock, refusals writing nothing), with nothing around it.
type UpsertRef struct {
	Clients     int     `json:"clients"`
	AsyncCommit bool    `json:"synchronousCommitOff"`
	TPS         float64 `json:"tps"`
	P50ms       float64 `json:"p50ms"`
	P99ms       float64 `json:"p99ms"`
	// PgCPUus is PostgreSQL's CPU µs per transaction (the whole server, as for the scenarios).
	PgCPUus float64 `json:"postgresCpuMicrosPerTransaction"`
}

// upsertReferences are the runs every benchmark makes: 1 and 32 clients, durable and with
// synchronous_commit off (SLUICE_COMMIT=fast's counterpart).
var upsertReferences = []UpsertRef{{Clients: 1}, {Clients: 1, AsyncCommit: true}, {Clients: 32}, {Clients: 32, AsyncCommit: true}}

// upsertScript is one decision of a token bucket of 1,000 per second (capacity 1,000) on a random
// key of 100,000: refill to the database's clock, take one token if there is one.
var upsertScript = "\\set k random(1, 100000)\n" + strings.Replace(upsertStatement, "$1", ":k", 1) + ";\n"

// upsertStatement is the decision itself, on key $1 (pgbench's script and the HTTP floor's).
const upsertStatement = `INSERT INTO tb AS t (k, v, ts) VALUES ($1, 999, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)
ON CONFLICT (k) DO UPDATE SET v = least(1000, t.v + (excluded.ts - t.ts)) - 1, ts = excluded.ts
WHERE least(1000, t.v + (excluded.ts - t.ts)) >= 1
RETURNING v`

// upsertTable makes the upsert's table anew, for pgbench's script or the HTTP floor; drop
// removes it and checkpoints, so that the next measurement does not write this one's pages.
func upsertTable(dbURL string) (drop func(), err error) {
	err = psql(dbURL, `DROP TABLE IF EXISTS tb; CREATE TABLE tb (k int PRIMARY KEY, v double precision NOT NULL, ts bigint NOT NULL)`)
	return func() { _ = psql(dbURL, "DROP TABLE IF EXISTS tb; CHECKPOINT;") }, err
}

// pgbenchUpsert runs upsertScript as ref says, every statement its own SERIALIZABLE transaction,
// on a table of its own, and returns ref with its TPS and median latency (from pgbench's
// per-transaction log).
func pgbenchUpsert(srv *testkit.Server, dbURL string, ref UpsertRef, duration time.Duration) (UpsertRef, error) {
	drop, err := upsertTable(dbURL)
	if err != nil {
		return ref, err
	}
	defer drop()
	return runUpsert(dbURL, ref, duration)
}

// runUpsert runs upsertScript on the upsert's table as it stands (upsertTable).
func runUpsert(dbURL string, ref UpsertRef, duration time.Duration) (UpsertRef, error) {
	bindir, err := testkit.BinDir()
	if err != nil {
		return ref, err
	}
	dir, err := os.MkdirTemp("", "upsert-")
	if err != nil {
		return ref, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "upsert.sql")
	if err := os.WriteFile(script, []byte(upsertScript), 0o644); err != nil {
		return ref, err
	}
	cmd := exec.Command(filepath.Join(bindir, "pgbench"), "-n", "-c", strconv.Itoa(ref.Clients), "-j", strconv.Itoa(min(ref.Clients, 2)),
		"-T", strconv.Itoa(int(duration.Seconds())), "--max-tries=1000", "-l", "--log-prefix="+filepath.Join(dir, "tx"), "-f", script, dbURL)
	options := "-c default_transaction_isolation=serializable"
	if ref.AsyncCommit {
		options += " -c synchronous_commit=off"
	}
	cmd.Env = append(os.Environ(), "PGOPTIONS="+options)
	pgBefore := postgresCPUSeconds(postgresPID)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return ref, fmt.Errorf("pgbench upsert: %w: %s", err, out)
	}
	// pgbench's backends have exited; give the postmaster a moment to reap them, which is when
	// their CPU time joins its children's.
	time.Sleep(300 * time.Millisecond)
	pgUsed := postgresCPUSeconds(postgresPID) - pgBefore
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "tps = ") {
			ref.TPS, _ = strconv.ParseFloat(strings.Fields(line)[2], 64)
		}
	}
	// Each log line: client, transaction number, latency in µs, script, epoch s, µs.
	logs, _ := filepath.Glob(filepath.Join(dir, "tx.*"))
	var latencies []float64
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			return ref, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 3 {
				if us, err := strconv.ParseFloat(f[2], 64); err == nil {
					latencies = append(latencies, us/1000)
				}
			}
		}
	}
	if ref.TPS == 0 || len(latencies) == 0 {
		return ref, fmt.Errorf("pgbench upsert: no tps or no transaction log: %s", out)
	}
	sort.Float64s(latencies)
	ref.P50ms, ref.P99ms = latencies[len(latencies)/2], latencies[len(latencies)*99/100]
	if postgresPID != 0 {
		ref.PgCPUus = pgUsed * 1e6 / float64(len(latencies))
	}
	return ref, nil
}
