package testkit

// This file runs a throwaway PostgreSQL server for tests and benchmarks: initdb into a
// temporary directory, pg_ctl start on a free loopback port, and everything removed on Stop.

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// EnvURL names the variable that points tests at an existing PostgreSQL server.
const EnvURL = "TEST_DATABASE_URL"

// Server is a running throwaway PostgreSQL.
type Server struct {
	URL     string // superuser URL of the "postgres" database
	Port    int
	dir     string
	bindir  string
	cred    *syscall.Credential
	logFile string
	opts    Options
}

// Options tune a server. The zero value is what tests want: fsync and full-page writes off, since
// a throwaway server has nothing to protect across a crash of the machine.
type Options struct {
	// Durable keeps PostgreSQL's default durability (fsync, full_page_writes), as a deployment
	// runs it: the benchmark measures with it, so that commit costs what it costs in production.
	Durable bool
}

// BinDir finds PostgreSQL's server programs: pg_config --bindir, then PATH, then Debian's layout.
func BinDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Strings(matches)
	if len(matches) > 0 {
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	return "", errors.New("testkit: PostgreSQL server programs not found (install postgresql, or set TEST_DATABASE_URL)")
}

// Start initialises and starts a new server with the test settings (Options{}).
func Start() (*Server, error) { return StartWith(Options{}) }

// StartWith initialises and starts a new server. initdb refuses to run as root, so as root the
// server runs as the "postgres" user (or "nobody") in a directory it owns.
func StartWith(o Options) (*Server, error) {
	bindir, err := BinDir()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		if cred, err = unprivileged(); err != nil {
			return nil, err
		}
	}
	reapAbandoned(bindir, cred)
	dir, err := os.MkdirTemp("", serverDirPrefix)
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bindir: bindir, cred: cred, logFile: filepath.Join(dir, "server.log"), opts: o}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	if err := s.run("initdb", "-D", s.dataDir(), "-A", "trust", "-U", "sluice", "-E", "UTF8", "--no-sync", "--locale=C"); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if s.Port, err = FreePort(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s.URL = fmt.Sprintf("postgres://sluice@127.0.0.1:%d/postgres?sslmode=disable", s.Port)
	if err := s.Resume(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

// serverDirPrefix names the temporary directories of servers; ownerFile, in each, holds the
// process ID of the process that started it.
const (
	serverDirPrefix = "sluice-pg-"
	ownerFile       = "owner.pid"
)

// reapAbandoned stops and deletes the servers whose starting process has gone without stopping
// them: a test binary that panicked (a panic in a test's goroutine ends the process before
// Main's Stop) leaves its server running, and every later run would add another. A directory
// without an owner file, or whose owner still runs, is left alone.
func reapAbandoned(bindir string, cred *syscall.Credential) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), serverDirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || running(pid) {
			continue
		}
		(&Server{dir: dir, bindir: bindir, cred: cred}).Stop()
	}
}

// running is whether a process with this ID exists (one we may not signal exists too).
func running(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// PostmasterPID is the process ID of the running server's postmaster (the parent of every
// backend), from its postmaster.pid file: the benchmark reads the server's CPU time from /proc.
func (s *Server) PostmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(s.dataDir(), "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// Resume starts the server again after Pause, on the same port and data.
func (s *Server) Resume() error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 "+
		"-c max_connections=500 -c shared_buffers=128MB -c max_pred_locks_per_transaction=1024", s.Port, s.dir)
	if !s.opts.Durable {
		opts += " -c fsync=off -c full_page_writes=off"
	}
	return s.run("pg_ctl", "-D", s.dataDir(), "-l", s.logFile, "-o", opts, "-w", "-t", "60", "start")
}

// Pause stops the server immediately (fast shutdown) but keeps its data, to simulate an outage.
func (s *Server) Pause() error {
	return s.run("pg_ctl", "-D", s.dataDir(), "-m", "immediate", "-w", "stop")
}

// Stop shuts the server down and deletes its files.
func (s *Server) Stop() {
	_ = s.run("pg_ctl", "-D", s.dataDir(), "-m", "immediate", "-w", "stop")
	_ = os.RemoveAll(s.dir)
}

func (s *Server) run(name string, args ...string) error {
	cmd := exec.Command(filepath.Join(s.bindir, name), args...)
	cmd.Dir = s.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	if err := cmd.Run(); err != nil {
		logTail, _ := os.ReadFile(s.logFile)
		return fmt.Errorf("testkit: %s: %w\n%s\n%s", name, err, out.String(), lastLines(string(logTail), 20))
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func unprivileged() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("testkit: running as root and no postgres/nobody user to run PostgreSQL as")
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Main is for TestMain: unless TEST_DATABASE_URL is set it starts a throwaway server for the
// package's tests, exports its URL and stops it afterwards.
func Main(m *testing.M) {
	if os.Getenv(EnvURL) != "" {
		os.Exit(m.Run())
	}
	srv, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = os.Setenv(EnvURL, srv.URL)
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

// NewDatabase creates an empty database on the TEST_DATABASE_URL server for one test and drops
// it when the test ends, so tests and packages never see each other's rows.
func NewDatabase(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvURL)
	if base == "" {
		t.Fatalf("testkit: %s is not set; call testkit.Main from TestMain or run `make test`", EnvURL)
	}
	u, err := CreateDatabase(base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DropDatabase(base, u) })
	return u
}

// CreateDatabase makes a fresh, uniquely named database on the server at base and returns its URL.
func CreateDatabase(base string) (string, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	admin, err := sql.Open("pgx", base)
	if err != nil {
		return "", err
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("testkit: create database: %w", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// DropDatabase removes a database made by CreateDatabase, disconnecting its sessions.
func DropDatabase(base, dbURL string) error {
	u, err := url.Parse(dbURL)
	if err != nil {
		return err
	}
	admin, err := sql.Open("pgx", base)
	if err != nil {
		return err
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+strings.TrimPrefix(u.Path, "/")+" WITH (FORCE)")
	return err
}

// WaitForLockWaiter waits until a session of conn's database waits for a lock (a transaction the
// test holds keeps another behind it), polling pg_stat_activity, and fails the test after timeout
// naming what was to wait.
func WaitForLockWaiter(t testing.TB, conn *sql.DB, timeout time.Duration, what string) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		var waiting int
		if err := conn.QueryRow(`SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s to wait for a lock", timeout, what)
		}
	}
}
