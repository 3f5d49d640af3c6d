package main

import (
	"fmt"
	"os"
	"time"
)

// sustained drives random-32 for total, one minute at a time, against one Sluice on PostgreSQL
// with the sweeper running as in production (SWEEP_INTERVAL's default), and prints every
// minute's decisions/s, p99, and the serialization retries and give-ups of decisions (a
// decision's give-up answers 503 to its whole group) and of background work (sweeps, usage
// flushes: run again later). The limit and its rows carry over from minute to minute, as in a long run.
func sustained(total time.Duration, fsync bool) error {
	env, err := setUp(fsync)
	if err != nil {
		return err
	}
	defer env.tearDown()
	s, err := startSluice(env.bin, env.work, env.dbURL)
	if err != nil {
		return err
	}
	defer s.stop()
	var sc scenario
	for _, x := range scenarios() {
		if x.name == "random-32" {
			sc = x
		}
	}
	fmt.Printf("Sluice sustained random-32 — %s — PostgreSQL fsync %v — %s\n\n", machine(), fsync, time.Now().UTC().Format(time.RFC3339))
	fmt.Println("| minute | decisions/s | p99 ms | decision retries | decision give-ups | background retries | background give-ups | errors | 5xx |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var first, last float64
	const decisionRetries, decisionGiveUps = `sluice_db_tx_retries_total{purpose="decision"}`, `sluice_db_tx_giveups_total{purpose="decision"}`
	counts := func() [4]float64 {
		dr, dg := s.scrapeCounter(decisionRetries), s.scrapeCounter(decisionGiveUps)
		return [4]float64{dr, dg, s.scrapeCounter("sluice_db_tx_retries_total") - dr, s.scrapeCounter("sluice_db_tx_giveups_total") - dg}
	}
	before := counts()
	minutes := int(total / time.Minute)
	for m := 1; m <= max(minutes, 1); m++ {
		d := time.Minute
		if minutes == 0 {
			d = total
		}
		// The same limit name every minute: its definition and rows carry over.
		rr, err := runScenario([]*sluice{s}, sc, "sustained", d)
		if err != nil {
			return err
		}
		now := counts()
		fmt.Printf("| %d | %.0f | %.2f | %.0f | %.0f | %.0f | %.0f | %d | %d |\n", m, rr.PerSecond, rr.P99ms,
			now[0]-before[0], now[1]-before[1], now[2]-before[2], now[3]-before[3], rr.Errors, rr.Status5xx)
		before = now
		if m == 1 {
			first = rr.PerSecond
		}
		last = rr.PerSecond
		if rr.Over {
			fmt.Fprintln(os.Stderr, "bench: OVER-ADMISSION in minute", m)
		}
	}
	fmt.Printf("\nlast minute / first minute: %.2f\n", last/first)
	return nil
}
