package sluice_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The real Sluice server every test of this package talks to (no mock of Sluice anywhere):
// TestMain builds it from the repository's root, starts it on a throwaway database and creates a
// tenant and a secret key with its command line, as cmd/app/readme_test.go does. The database is
// PostgreSQL (a fresh database on that server) when TEST_DATABASE_URL is set, as under
// `make test`, and SQLite otherwise; `make test` runs this package both ways.
var (
	baseURL        string
	secretKey      string
	publishableKey string // of the same tenant, for captcha challenges (sessions_test.go)
	// serverBin is the server built by TestMain, for tests that start one of their own.
	serverBin string
)

func TestMain(m *testing.M) {
	os.Exit(runWithServer(m))
}

func runWithServer(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sluice-client-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	serverBin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", serverBin, "./cmd/app")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "client tests: go build ./cmd/app: %v\n%s", err, out)
		return 1
	}
	srv, err := startServer(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client tests: start a real Sluice:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "client tests: Sluice on %s (%s)\n", srv.URL, srv.Dialect)
	baseURL, secretKey, publishableKey = srv.URL, srv.Key, srv.Publishable
	code := m.Run()
	if err := srv.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "client tests: stop Sluice:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// repoRoot is the repository's root: the server's module.
var repoRoot = filepath.Join("..", "..")

// server is a running `sluice serve` with a tenant and a secret key of its own.
type server struct {
	URL, Key    string
	Publishable string // a publishable key of the same tenant, for captcha challenges
	Dialect     string // "sqlite" or "postgres"
	stop        func() error
	stopOnce    sync.Once
	stopErr     error
}

// Stop ends the server with SIGINT, reports an unclean exit and drops its PostgreSQL database.
// It may be called more than once.
func (s *server) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.stop() })
	return s.stopErr
}

// startTestServer starts a server of the test's own (on a database of its own), stopped when
// the test ends: for tests that stop it on purpose, or that set env ("NAME=value") for it.
func startTestServer(t *testing.T, env ...string) *server {
	t.Helper()
	srv, err := startServer(t.TempDir(), env...)
	if err != nil {
		t.Fatalf("start a Sluice of the test's own: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

// newDatabase is the DATABASE_URL of a fresh database and a function that removes it: a
// database of its own on the TEST_DATABASE_URL server, or an SQLite file in dir.
func newDatabase(dir string) (url, dialect string, drop func() error, err error) {
	if os.Getenv("TEST_DATABASE_URL") == "" {
		return "sqlite:" + filepath.Join(dir, "s.db"), "sqlite", func() error { return nil }, nil
	}
	withpg := func(args ...string) (string, error) {
		cmd := exec.Command("go", append([]string{"run", "./internal/testkit/withpg"}, args...)...)
		cmd.Dir = repoRoot
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("withpg %s: %w\n%s", strings.Join(args, " "), err, errOut.String())
		}
		return strings.TrimSpace(out.String()), nil
	}
	url, err = withpg("-createdb")
	if err != nil {
		return "", "", nil, err
	}
	return url, "postgres", func() error { _, err := withpg("-dropdb", url); return err }, nil
}

// startServer starts `sluice serve` (serverBin) on a fresh database with its files in dir and
// more env ("NAME=value"), and makes a tenant and a key.
func startServer(dir string, moreEnv ...string) (srv *server, err error) {
	dbURL, dialect, drop, err := newDatabase(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = drop()
		}
	}()
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	srv = &server{URL: "http://" + addr, Dialect: dialect}
	env := append(os.Environ(),
		"DATABASE_URL="+dbURL,
		"LISTEN_ADDR="+addr,
		"METRICS_ADDR=127.0.0.1:0",
		"BASE_URL="+srv.URL,
		"LOG_LEVEL=warn",
		"MIGRATE=auto",
		"SECRET_KEY=client-tests-secret-key-of-at-least-32-characters",
		"WEBHOOK_ALLOW_PRIVATE=true", // the tests' webhook receivers listen on loopback
	)
	env = append(env, moreEnv...)

	cmd := exec.Command(serverBin, "serve")
	cmd.Dir, cmd.Env = dir, env
	dieWithTests(cmd)
	var serverOut, serverErr syncBuffer
	cmd.Stderr = &serverErr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sluice serve: %w", err)
	}
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		var once sync.Once
		for sc.Scan() {
			_, _ = serverOut.Write(append(sc.Bytes(), '\n'))
			if strings.HasPrefix(sc.Text(), "Sluice is listening on") {
				once.Do(func() { close(listening) })
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	srv.stop = func() error {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil {
				return fmt.Errorf("sluice serve did not shut down cleanly: %w\n%s%s", err, serverOut.String(), serverErr.String())
			}
			return drop()
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			return fmt.Errorf("sluice serve ignored SIGINT for 20 s")
		}
	}
	select {
	case <-listening:
	case err := <-exited:
		return nil, fmt.Errorf("sluice serve exited before listening: %v\n%s%s", err, serverOut.String(), serverErr.String())
	case <-time.After(60 * time.Second):
		_ = srv.Stop()
		return nil, fmt.Errorf("sluice serve did not start listening in 60 s\n%s%s", serverOut.String(), serverErr.String())
	}

	cli := func(args ...string) (string, error) {
		cmd := exec.Command(serverBin, args...)
		cmd.Dir, cmd.Env = dir, env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("sluice %s: %w\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
		}
		return out.String(), nil
	}
	if _, err := cli("tenant", "create", "clienttests"); err != nil {
		_ = srv.Stop()
		return nil, err
	}
	out, err := cli("key", "create", "--tenant", "clienttests", "--label", "go client tests")
	if err != nil {
		_ = srv.Stop()
		return nil, err
	}
	key, _, _ := strings.Cut(out, "\n") // the secret is the first line
	if srv.Key = strings.TrimSpace(key); srv.Key == "" {
		_ = srv.Stop()
		return nil, fmt.Errorf("key create printed no key: %q", out)
	}
	out, err = cli("key", "create", "--tenant", "clienttests", "--label", "go client tests (captcha)", "--publishable")
	if err != nil {
		_ = srv.Stop()
		return nil, err
	}
	pk, _, _ := strings.Cut(out, "\n")
	srv.Publishable = strings.TrimSpace(pk)
	return srv, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// closedAddr is a loopback address nothing listens on: every connection to it is refused.
func closedAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// testCtx is a generous deadline for one test's calls.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// syncBuffer collects a process's output while it runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
