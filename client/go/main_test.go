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
// TestMain builds it from the repository's root, starts it on a throwaway SQLite database and
// creates a tenant and a secret key with its command line, as cmd/app/readme_test.go does.
var (
	baseURL   string
	secretKey string
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
	stop, err := startServer(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client tests: start a real Sluice:", err)
		return 1
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "client tests: stop Sluice:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// startServer builds and starts `sluice serve` and makes the tenant and key; stop ends it with
// SIGINT and reports an unclean exit.
func startServer(dir string) (stop func() error, err error) {
	bin := filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", bin, "./cmd/app")
	build.Dir = filepath.Join("..", "..") // the repository's root: the server's module
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/app: %w\n%s", err, out)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	baseURL = "http://" + addr
	env := append(os.Environ(),
		"DATABASE_URL=sqlite:"+filepath.Join(dir, "s.db"),
		"LISTEN_ADDR="+addr,
		"METRICS_ADDR=127.0.0.1:0",
		"BASE_URL="+baseURL,
		"LOG_LEVEL=warn",
	)

	server := exec.Command(bin, "serve")
	server.Dir, server.Env = dir, env
	dieWithTests(server)
	var serverOut, serverErr syncBuffer
	server.Stderr = &serverErr
	stdout, err := server.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := server.Start(); err != nil {
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
	go func() { exited <- server.Wait() }()
	stop = func() error {
		_ = server.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil {
				return fmt.Errorf("sluice serve did not shut down cleanly: %w\n%s%s", err, serverOut.String(), serverErr.String())
			}
			return nil
		case <-time.After(20 * time.Second):
			_ = server.Process.Kill()
			return fmt.Errorf("sluice serve ignored SIGINT for 20 s")
		}
	}
	select {
	case <-listening:
	case err := <-exited:
		return nil, fmt.Errorf("sluice serve exited before listening: %v\n%s%s", err, serverOut.String(), serverErr.String())
	case <-time.After(60 * time.Second):
		_ = stop()
		return nil, fmt.Errorf("sluice serve did not start listening in 60 s\n%s%s", serverOut.String(), serverErr.String())
	}

	cli := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Env = dir, env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("sluice %s: %w\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
		}
		return out.String(), nil
	}
	if _, err := cli("tenant", "create", "clienttests"); err != nil {
		_ = stop()
		return nil, err
	}
	out, err := cli("key", "create", "--tenant", "clienttests", "--label", "go client tests")
	if err != nil {
		_ = stop()
		return nil, err
	}
	secretKey, _, _ = strings.Cut(out, "\n") // the secret is the first line
	if secretKey = strings.TrimSpace(secretKey); secretKey == "" {
		_ = stop()
		return nil, fmt.Errorf("key create printed no key: %q", out)
	}
	return stop, nil
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
