package main

import (
	"fmt"
	"os"
	"time"
)

// sustained drives random-32 for total, one minute at a time, against one Sluice on PostgreSQL
// with the sweeper running as in production (SWEEP_INTERVAL's default), and prints every
// minute's decisions/s, p99, serialization retries and give-ups (each give-up answers 503 to a
// whole group). The limit and its rows carry over from minute to minute, as in a long run.
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
	fmt.Println("| minute | decisions/s | p99 ms | retries | give-ups | errors | 5xx |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|")
	var first, last float64
	giveUpsBefore := s.scrapeCounter("sluice_db_tx_giveups_total")
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
		giveUps := s.scrapeCounter("sluice_db_tx_giveups_total")
		fmt.Printf("| %d | %.0f | %.2f | %.0f | %.0f | %d | %d |\n", m, rr.PerSecond, rr.P99ms, rr.Retries, giveUps-giveUpsBefore, rr.Errors, rr.Status5xx)
		giveUpsBefore = giveUps
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
