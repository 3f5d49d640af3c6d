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
//
// With reference, each minute of Sluice is followed by a minute of pgbench's one-statement upsert
// at 32 clients on its own table of 100,000 keys (also kept from minute to minute, and never
// checkpointed by hand), so that a minute the shared machine was slow shows in both columns:
// the ratio of each minute's pair is the figure the machine's drift cannot bias.
func sustained(total time.Duration, fsync, reference bool) error {
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
	header, rule := "| minute | decisions/s | p99 ms | decision retries | decision give-ups | background retries | background give-ups | errors | 5xx |",
		"|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	if reference {
		drop, err := upsertTable(env.dbURL)
		if err != nil {
			return err
		}
		defer drop()
		header, rule = header+" upsert TPS | upsert p99 ms | decisions / upsert |", rule+"---:|---:|---:|"
	}
	fmt.Println(header)
	fmt.Println(rule)
	var first, last, firstRef, lastRef float64
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
		fmt.Printf("| %d | %.0f | %.2f | %.0f | %.0f | %.0f | %.0f | %d | %d |", m, rr.PerSecond, rr.P99ms,
			now[0]-before[0], now[1]-before[1], now[2]-before[2], now[3]-before[3], rr.Errors, rr.Status5xx)
		if reference {
			ref, err := runUpsert(env.dbURL, UpsertRef{Clients: 32}, d)
			if err != nil {
				return err
			}
			fmt.Printf(" %.0f | %.2f | %.2f |", ref.TPS, ref.P99ms, rr.PerSecond/ref.TPS)
			if m == 1 {
				firstRef = ref.TPS
			}
			lastRef = ref.TPS
		}
		fmt.Println()
		before = counts() // the reference's minute is not Sluice's
		if m == 1 {
			first = rr.PerSecond
		}
		last = rr.PerSecond
		if rr.Over {
			fmt.Fprintln(os.Stderr, "bench: OVER-ADMISSION in minute", m)
		}
	}
	fmt.Printf("\nlast minute / first minute: %.2f\n", last/first)
	if reference {
		fmt.Printf("the upsert's last minute / its first: %.2f; Sluice's last / first, each over its reference: %.2f\n",
			lastRef/firstRef, (last/lastRef)/(first/firstRef))
	}
	return nil
}
