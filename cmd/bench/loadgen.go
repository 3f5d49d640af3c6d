package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// scenario is one load shape.
type scenario struct {
	name   string
	conns  int
	hot    bool // compared with pgbench's hot-key figure
	sqlite bool
	batch  bool
	bulk   int // decisions per POST /v1/decisions request (0: one decision a request)
	// instances is how many app instances share the PostgreSQL database (0 or 1: one); the
	// connections are spread over them evenly.
	instances int
	keys      int     // distinct keys (1 = one hot key)
	rate      float64 // tokens per period per key (also the capacity, unless capacity is set)
	period    int64   // the limit's period in ms (0: 1000)
	capacity  float64 // the bucket's capacity (0: rate)
	// stored writes a row for every key before the run, as a limit whose keys are all in use
	// does (see storeEveryKey): the decisions update stored rows instead of inserting new ones.
	stored bool
	shards int
	grpc   bool // Envoy's ShouldRateLimit over gRPC (one connection per worker) instead of HTTP
	// fastCommit runs against an instance with SLUICE_COMMIT=fast (decisions commit without
	// waiting for their WAL to reach the disk).
	fastCommit bool
	// overrides puts this many overrides on the limit before the run (half exact keys, half
	// prefixes; see putOverrides), with the limit's own numbers, so that the decision path looks
	// every key up among them while the per-key bound stays the scenario's.
	overrides int
	// twoStep makes each unit of work two round trips (holds.go): "hold-settle" holds 2 and
	// settles for 1; "lease" acquires a lease of a concurrency limit and releases it.
	twoStep string
}

func scenarios() []scenario {
	return []scenario{
		{name: "random-1", conns: 1, keys: 100_000, rate: 1000},
		{name: "random-1-fast", conns: 1, keys: 100_000, rate: 1000, fastCommit: true},
		{name: "random-8", conns: 8, keys: 100_000, rate: 1000},
		{name: "random-32", conns: 32, keys: 100_000, rate: 1000},
		// random-32 on a limit whose every key has a stored row before the run: every decision
		// updates a row. Each random-32 run starts a new limit, so its first decision on each key
		// inserts (two in three over 20 s). One token an hour keeps the rows from reading as full,
		// so that no sweep deletes them.
		{name: "random-32-stored", conns: 32, keys: 100_000, rate: 1, period: 3_600_000, capacity: 1000, stored: true},
		{name: "random-32-fast", conns: 32, keys: 100_000, rate: 1000, fastCommit: true},
		// random-32 with 1,000 overrides on the decision path: its throughput over random-32's
		// is the cost of overrides (docs/performance.md).
		{name: "random-32-overrides", conns: 32, keys: 100_000, rate: 1000, overrides: 1000},
		{name: "random-64", conns: 64, keys: 100_000, rate: 1000},
		{name: "random-32-2i", conns: 32, keys: 100_000, rate: 1000, instances: 2},
		{name: "hot", conns: 32, hot: true, keys: 1, rate: 5000},
		{name: "hot-2i", conns: 32, hot: true, keys: 1, rate: 5000, instances: 2},
		{name: "hot-shards10", conns: 32, hot: true, keys: 1, rate: 5000, shards: 10},
		{name: "new-keys-32", conns: 32, keys: 10_000_000, rate: 1000}, // nearly every decision inserts
		{name: "batch2", conns: 32, batch: true, keys: 100_000, rate: 1000},
		{name: "bulk", conns: 8, bulk: 100, keys: 100_000, rate: 1000}, // 100 decisions a request
		{name: "sqlite-32", conns: 32, sqlite: true, keys: 100_000, rate: 1000},
		{name: "grpc-32", conns: 32, grpc: true, keys: 100_000, rate: 1000},
		{name: "hold-settle", conns: 32, keys: 100_000, rate: 1000, twoStep: holdSettle},
		{name: "lease", conns: 32, keys: 100_000, rate: 4, twoStep: leaseRelease},
	}
}

// RunResult is one run of one scenario.
type RunResult struct {
	PerSecond float64
	P50ms     float64
	P99ms     float64
	Errors    int64
	Status5xx int64
	Admitted  int64
	Bound     float64
	Over      bool
	Retries   float64
	PerGroup  float64 // average decision requests per group transaction
	// Round trips and statements per group transaction (PostgreSQL), from /metrics.
	TripsPerGroup, StatementsPerGroup float64
	// CPU µs per decision, from /proc: the app instances', and PostgreSQL's (the whole server:
	// backends, WAL writer, checkpointer, autovacuum; SQLite scenarios leave it near 0).
	AppCPUus, PgCPUus float64
	// Idle is the share of the machine's CPU time left idle during the run (/proc/stat, every
	// core: the load generator and anything else on the machine included).
	Idle float64
	// LaneBusy is the group transactions' time over the run's wall time (/metrics).
	LaneBusy float64
}

type worker struct {
	latencies []time.Duration
	admitted  map[int]int64
	errors    int64
	status5xx int64
	total     int64
}

// runScenario drives sc against targets (one app instance, or several on one database: every
// instance answers for the first one's tenant and key).
func runScenario(targets []*sluice, sc scenario, name string, d time.Duration) (RunResult, error) {
	s := targets[0]
	ctx := context.Background()
	period, capacity := sc.period, sc.capacity
	if period == 0 {
		period = 1000
	}
	if capacity == 0 {
		capacity = sc.rate
	}
	def := fmt.Sprintf(`{"kind":"token bucket","rate":%g,"period":%d`, sc.rate, period)
	if sc.capacity != 0 {
		def += fmt.Sprintf(`,"capacity":%g`, capacity)
	}
	if sc.shards > 1 {
		def += fmt.Sprintf(`,"shards":%d`, sc.shards)
	}
	def += "}"
	if sc.twoStep == leaseRelease {
		def = fmt.Sprintf(`{"kind":"concurrency","rate":%g,"leaseTtl":60000}`, sc.rate)
	}
	names := []string{name}
	if sc.grpc {
		names = []string{grpcDomain + "." + name}
	}
	if sc.batch {
		names = []string{name + "_a", name + "_b"}
	}
	for _, n := range names {
		if err := s.put(ctx, n, def); err != nil {
			return RunResult{}, err
		}
	}
	if sc.overrides > 0 {
		if err := putOverrides(ctx, s, name, sc); err != nil {
			return RunResult{}, err
		}
	}
	if sc.stored {
		if err := storeEveryKey(s.dbURL, name, sc.keys, capacity-1); err != nil {
			return RunResult{}, err
		}
		// The rows go when the run ends, so the scenarios after it find limit_state as they
		// would have without it.
		defer func() {
			if err := unstoreEveryKey(s.dbURL, name); err != nil {
				fmt.Fprintf(os.Stderr, "bench: %s: %v\n", name, err)
			}
		}()
	}
	addrs := make([]string, len(targets))
	for i, t := range targets {
		addrs[i] = strings.TrimPrefix(t.base, "http://")
	}
	counter := func(name string) float64 { // summed over the instances
		var sum float64
		for _, t := range targets {
			sum += t.scrapeCounter(name)
		}
		return sum
	}
	path := "/v1/limits/" + name + "/limit"
	switch {
	case sc.batch:
		path = "/v1/limit"
	case sc.bulk > 0:
		path = "/v1/decisions"
	}
	workers := make([]*worker, sc.conns)
	retriesBefore := counter("sluice_db_tx_retries_total")
	groupsBefore, jobsBefore := counter("sluice_decision_group_transactions_total"), counter("sluice_decision_group_requests_total")
	tripsBefore, statementsBefore := counter("sluice_decision_group_round_trips_total"), counter("sluice_decision_group_statements_total")
	groupSecondsBefore := counter("sluice_decision_group_seconds_total")
	appCPU := func() float64 { // summed over the instances
		var sum float64
		for _, t := range targets {
			sum += cpuSeconds(t.cmd.Process.Pid)
		}
		return sum
	}
	appBefore, pgBefore := appCPU(), postgresCPUSeconds(postgresPID)
	idleBefore, totalBefore := machineTicks()
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{admitted: map[int]int64{}}
		workers[i] = w
		wg.Add(1)
		addr := addrs[i%len(addrs)]
		grpcAddr := targets[i%len(targets)].grpc
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 99))
			if sc.grpc {
				grpcWork(w, grpcAddr, s.key, name, sc, r, deadline)
				return
			}
			var conn *rawConn
			defer func() {
				if conn != nil {
					conn.close()
				}
			}()
			var body []byte
			for time.Now().Before(deadline) {
				if conn == nil {
					var err error
					if conn, err = dialRaw(addr); err != nil {
						w.errors++
						time.Sleep(10 * time.Millisecond)
						continue
					}
				}
				k := r.IntN(sc.keys)
				ks := strconv.Itoa(k)
				if sc.twoStep != "" {
					t0 := time.Now()
					ok, err := twoStep(conn, s.key, sc.twoStep, name, "k"+ks, w)
					if err != nil {
						w.errors++
						conn.close()
						conn = nil
						continue
					}
					w.latencies = append(w.latencies, time.Since(t0))
					if ok {
						w.admitted[k]++
					}
					w.total++
					continue
				}
				body = body[:0]
				var bulkKeys []int
				if sc.bulk > 0 {
					body = append(body, `{"decisions":[`...)
					for i := range sc.bulk {
						bk := r.IntN(sc.keys)
						bulkKeys = append(bulkKeys, bk)
						if i > 0 {
							body = append(body, ',')
						}
						body = append(body, `{"name":"`+name+`","key":"k`+strconv.Itoa(bk)+`"}`...)
					}
					body = append(body, "]}"...)
				} else if sc.batch {
					body = append(body, `{"limits":[{"name":"`+names[0]+`","key":"k`+ks+`"},{"name":"`+names[1]+`","key":"k`+ks+`"}]}`...)
				} else {
					body = append(body, `{"key":"k`+ks+`"}`...)
				}
				t0 := time.Now()
				status, b, err := conn.post(path, s.key, body)
				if err != nil {
					w.errors++
					conn.close()
					conn = nil
					continue
				}
				w.latencies = append(w.latencies, time.Since(t0))
				switch {
				case status >= 500:
					w.status5xx++
					w.errors++
				case status != 200:
					w.errors++
				case sc.bulk > 0:
					var res struct {
						Results []struct {
							OK    *bool           `json:"ok"`
							Error json.RawMessage `json:"error"`
						} `json:"results"`
					}
					if err := json.Unmarshal(b, &res); err != nil || len(res.Results) != len(bulkKeys) {
						w.errors++
						break
					}
					for i, item := range res.Results {
						switch {
						case item.Error != nil:
							w.errors++
						case *item.OK:
							w.admitted[bulkKeys[i]]++
						}
					}
				case bytes.HasPrefix(b, []byte(`{"ok":true`)):
					w.admitted[k]++
				}
				w.total += int64(max(sc.bulk, 1))
			}
		}(uint64(i) + uint64(start.UnixNano()))
	}
	wg.Wait()
	elapsed := time.Since(start)
	appUsed, pgUsed := appCPU()-appBefore, postgresCPUSeconds(postgresPID)-pgBefore
	idleAfter, totalAfter := machineTicks()

	res := RunResult{Retries: counter("sluice_db_tx_retries_total") - retriesBefore,
		Idle:     idleShare(idleBefore, totalBefore, idleAfter, totalAfter),
		LaneBusy: (counter("sluice_decision_group_seconds_total") - groupSecondsBefore) / elapsed.Seconds()}
	if groups := counter("sluice_decision_group_transactions_total") - groupsBefore; groups > 0 {
		res.PerGroup = (counter("sluice_decision_group_requests_total") - jobsBefore) / groups
		res.TripsPerGroup = (counter("sluice_decision_group_round_trips_total") - tripsBefore) / groups
		res.StatementsPerGroup = (counter("sluice_decision_group_statements_total") - statementsBefore) / groups
	}
	var all []time.Duration
	perKey := map[int]int64{}
	var total int64
	for _, w := range workers {
		all = append(all, w.latencies...)
		res.Errors += w.errors
		res.Status5xx += w.status5xx
		total += w.total
		for k, n := range w.admitted {
			perKey[k] += n
			res.Admitted += n
		}
	}
	res.P50ms, res.P99ms = latencyPercentiles(all)
	res.PerSecond = float64(total) / elapsed.Seconds()
	if total > 0 {
		res.AppCPUus, res.PgCPUus = appUsed*1e6/float64(total), pgUsed*1e6/float64(total)
	}
	// Every key's admitted total must stay within capacity + rate*T/period (T padded for clock
	// rounding); a stored row starts a token below capacity, so the bound holds for it too.
	bound := capacity + sc.rate*(elapsed.Seconds()+0.01)*1000/float64(period)
	if sc.twoStep == leaseRelease {
		bound = math.Inf(1) // what is in flight, not a rate: the engine's tests prove that bound
	}
	for _, n := range perKey {
		if float64(n) > bound {
			res.Over = true
		}
	}
	if sc.keys == 1 {
		res.Bound = bound
	}
	return res, nil
}

// storeEveryKey writes the limit name's row for each of the keys k0 … k(keys-1), holding value
// tokens as of the database's clock, straight into limit_state, as decisions on every key would
// have left them (a decision's row: shard 0, no counters, no penalty).
func storeEveryKey(dbURL, name string, keys int, value float64) error {
	err := psql(dbURL, fmt.Sprintf(`INSERT INTO limit_state (tenant_id, name, key, shard, value, ts, counters, penalty_until)
		SELECT d.tenant_id, d.name, 'k' || g, 0, %g, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint, '', 0
		FROM limit_definitions d, generate_series(0, %d) g WHERE d.name = '%s'`, value, keys-1, name))
	if err != nil {
		return err
	}
	return vacuumState(dbURL)
}

// unstoreEveryKey deletes the limit name's rows that storeEveryKey and the run left.
func unstoreEveryKey(dbURL, name string) error {
	if err := psql(dbURL, fmt.Sprintf(`DELETE FROM limit_state WHERE name = '%s'`, name)); err != nil {
		return err
	}
	return vacuumState(dbURL)
}

// vacuumState vacuums and analyzes limit_state and checkpoints, each on its own (psql -c runs
// one string as one transaction, where VACUUM cannot run), so that what comes next starts with
// the table's statistics current and nothing left to clean up or write back.
func vacuumState(dbURL string) error {
	if err := psql(dbURL, "VACUUM ANALYZE limit_state"); err != nil {
		return err
	}
	return psql(dbURL, "CHECKPOINT")
}

func summarize(sc scenario, runs []RunResult) Result {
	r := Result{Scenario: sc.name, Connections: sc.conns}
	var per, p50, p99, appCPU, pgCPU, idle, lane []float64
	for _, x := range runs {
		per, p50, p99 = append(per, x.PerSecond), append(p50, x.P50ms), append(p99, x.P99ms)
		appCPU, pgCPU, idle = append(appCPU, x.AppCPUus), append(pgCPU, x.PgCPUus), append(idle, x.Idle)
		lane = append(lane, x.LaneBusy)
		r.Errors += x.Errors
		r.Status5xx += x.Status5xx
		r.OverAdmitted = r.OverAdmitted || x.Over
		r.Runs = append(r.Runs, x.PerSecond)
	}
	r.PerSecond, r.P50ms, r.P99ms = median(per), median(p50), median(p99)
	r.AppCPUus, r.PgCPUus, r.IdlePercent, r.LanePercent = median(appCPU), median(pgCPU), 100*median(idle), 100*median(lane)
	mid := runs[len(runs)/2]
	r.Admitted, r.Bound, r.Retries, r.PerGroup = mid.Admitted, mid.Bound, mid.Retries, mid.PerGroup
	r.TripsPerGroup, r.StatementsPerGroup = mid.TripsPerGroup, mid.StatementsPerGroup
	return r
}

// putOverrides puts sc.overrides overrides on the limit name: half exact keys (k600, k601, …,
// keys of the scenario), half prefixes of four characters (k100*, k101*, …, which together
// cover about half of the keys k0…k99999), each with the limit's own rate and capacity.
func putOverrides(ctx context.Context, s *sluice, name string, sc scenario) error {
	numbers := fmt.Sprintf(`"rate":%g,"capacity":%g`, sc.rate, sc.rate)
	half := sc.overrides / 2
	for i := range sc.overrides {
		match := "k" + strconv.Itoa(100+i) + "*"
		if i >= half {
			match = "k" + strconv.Itoa(600+i-half)
		}
		if err := s.putPath(ctx, "/v1/limits/"+name+"/overrides", `{"match":"`+match+`",`+numbers+`}`); err != nil {
			return err
		}
	}
	return nil
}
