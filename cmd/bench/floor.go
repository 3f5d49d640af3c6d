package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-dev/sluice/internal/testkit"
)

// The HTTP floor is pgbench's one-statement upsert (upsertStatement) sent by the least a Go
// service can be: no HTTP library at all (a hand-written HTTP/1.1 responder on the accepted
// socket, floorConn) with one pgx connection (pgx's default mode: the statement prepared once,
// where pgbench sends it as text each time), run with one P (GOMAXPROCS=1, as Sluice runs while
// nearly idle), driven at one connection by the same client as random-1. Nothing a rate limiter
// does is in it, only one HTTP round trip and one transaction, so it measures what this machine
// charges any Go service in front of PostgreSQL: random-1 over the floor is what Sluice itself
// adds, and the floor over the bare upsert is what the hop costs. (Until 2026-11-27, session 7,
// the floor was a net/http handler with Go's default two Ps: 0.05 ms and about 60 µs of CPU per
// request dearer; see docs/performance.md.)
type FloorRef struct {
	AsyncCommit bool    `json:"synchronousCommitOff"`
	P50ms       float64 `json:"p50ms"`
	P99ms       float64 `json:"p99ms"`
	// AppCPUus and PgCPUus are the handler process's and PostgreSQL's CPU µs per request.
	AppCPUus float64 `json:"appCpuMicrosPerRequest"`
	PgCPUus  float64 `json:"postgresCpuMicrosPerRequest"`
}

// floorServeArg is the hidden first argument that makes the bench binary the floor's server
// (a separate process, so that its CPU time is its own).
const floorServeArg = "floor-serve"

// floorServe serves the floor on addr: each POST's body is a key number, and the server runs
// upsertStatement on it as its own SERIALIZABLE transaction (as pgbench's PGOPTIONS set it).
func floorServe(addr, dbURL string, async bool) error {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	cfg.RuntimeParams["default_transaction_isolation"] = "serializable"
	if async {
		cfg.RuntimeParams["synchronous_commit"] = "off"
	}
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	upsert := func(k int) error {
		mu.Lock()
		defer mu.Unlock()
		_, err := conn.Exec(ctx, upsertStatement, k)
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go floorConn(c, upsert)
	}
}

// floorConn answers the requests rawConn sends on c until it closes: it reads the head up to
// the blank line, takes the body's Content-Length, runs upsert on the body's key and writes a
// fixed 200 (or a 500 with the error). It is only as much HTTP as the bench's own client needs.
func floorConn(c net.Conn, upsert func(k int) error) {
	defer c.Close()
	r := bufio.NewReader(c)
	ok := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"allowed\":true}")
	for {
		length := 0
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(bytes.TrimSpace(line)) == 0 {
				break
			}
			if name, value, found := bytes.Cut(line, []byte(":")); found && bytes.EqualFold(name, []byte("Content-Length")) {
				length, _ = strconv.Atoi(string(bytes.TrimSpace(value)))
			}
		}
		body := make([]byte, length)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		reply := ok
		k, err := strconv.Atoi(string(body))
		if err == nil {
			err = upsert(k)
		}
		if err != nil {
			reply = []byte(fmt.Sprintf("HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n%s", len(err.Error()), err))
		}
		if _, err := c.Write(reply); err != nil {
			return
		}
	}
}

// oneConnectionAsyncCommit names the scenarios measured with the upsert at 1 client and the
// HTTP floor just before each run (Triple), each with whether it commits with
// synchronous_commit off (the references then do too).
var oneConnectionAsyncCommit = map[string]bool{"random-1": false, "random-1-fast": true}

// measureFloor starts the floor's server, drives it at one connection for d and reports.
func measureFloor(dbURL string, async bool, d time.Duration) (FloorRef, error) {
	ref := FloorRef{AsyncCommit: async}
	drop, err := upsertTable(dbURL)
	if err != nil {
		return ref, err
	}
	defer drop()
	port, err := testkit.FreePort()
	if err != nil {
		return ref, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	self, err := os.Executable()
	if err != nil {
		return ref, err
	}
	cmd := exec.Command(self, floorServeArg, addr, strconv.FormatBool(async))
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "GOMAXPROCS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the bench
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return ref, err
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	}
	defer stop()
	conn, err := dialWhenListening(addr, 10*time.Second)
	if err != nil {
		return ref, fmt.Errorf("HTTP floor: %w", err)
	}
	defer conn.close()
	appBefore, pgBefore := cpuSeconds(cmd.Process.Pid), postgresCPUSeconds(postgresPID)
	var latencies []time.Duration
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		t0 := time.Now()
		// A random key of 100,000, as pgbench's script and random-1 draw theirs.
		status, body, err := conn.post("/", "", []byte(strconv.Itoa(rand.IntN(100000)+1)))
		if err != nil {
			return ref, fmt.Errorf("HTTP floor: %w", err)
		}
		if status != http.StatusOK {
			return ref, fmt.Errorf("HTTP floor: status %d: %s", status, body)
		}
		latencies = append(latencies, time.Since(t0))
	}
	appUsed := cpuSeconds(cmd.Process.Pid) - appBefore
	stop()
	// As for pgbench: the server's backend has exited; its CPU joins the postmaster's children's
	// when it is reaped.
	time.Sleep(300 * time.Millisecond)
	pgUsed := postgresCPUSeconds(postgresPID) - pgBefore
	if len(latencies) == 0 {
		return ref, fmt.Errorf("HTTP floor: no request completed in %v", d)
	}
	n := float64(len(latencies))
	ref.P50ms, ref.P99ms = latencyPercentiles(latencies)
	ref.AppCPUus = appUsed * 1e6 / n
	if postgresPID != 0 {
		ref.PgCPUus = pgUsed * 1e6 / n
	}
	return ref, nil
}

// dialWhenListening dials addr until it accepts or wait has passed.
func dialWhenListening(addr string, wait time.Duration) (*rawConn, error) {
	deadline := time.Now().Add(wait)
	for {
		conn, err := dialRaw(addr)
		if err == nil {
			return conn, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("nothing listening on %s after %v: %w", addr, wait, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
