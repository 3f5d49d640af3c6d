package examples_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeBlock is the body of the one ```sh block of examples/README.md whose first line is
// "# example: NAME": the command the README tells a reader to run.
func readmeBlock(t *testing.T, name string) string {
	t.Helper()
	doc, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	var found []string
	for i := 0; i+1 < len(lines); i++ {
		if lines[i] != "```sh" || lines[i+1] != "# example: "+name {
			continue
		}
		var body strings.Builder
		for j := i + 2; j < len(lines) && lines[j] != "```"; j++ {
			body.WriteString(lines[j] + "\n")
		}
		found = append(found, body.String())
	}
	if len(found) != 1 {
		t.Fatalf("examples/README.md has %d ```sh blocks starting with \"# example: %s\", want 1", len(found), name)
	}
	return found[0]
}

// requireBash skips without bash on a developer machine, and fails on CI.
func requireBash(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range append([]string{"bash"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is required to run the examples' commands on CI: %v", tool, err)
			}
			t.Skipf("!!! SKIPPING: %s is not installed (%v); CI=true turns this into a failure !!!", tool, err)
		}
	}
}

// exampleEnv is the environment the README's commands run in: the test's Sluice and key, and
// where the example listens.
func exampleEnv(addr string) []string {
	return append(os.Environ(), "SLUICE_URL="+baseURL, "SLUICE_SECRET_KEY="+secretKey, "ADDR="+addr)
}

// runBlock runs a README block to its end with bash, from the repository's root.
func runBlock(t *testing.T, block string) string {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir, cmd.Env = repoRoot, exampleEnv("")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", block, err, out)
	}
	return string(out)
}

// startExample runs the README's command of an example (it keeps running), waits until it
// prints that it listens, and stops it with SIGINT when the test ends.
func startExample(t *testing.T, name string) (url string) {
	t.Helper()
	requireBash(t)
	block := readmeBlock(t, name)
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir, cmd.Env = repoRoot, exampleEnv(addr)
	// Its own process group, so that SIGINT reaches the program `go run` started, and the
	// kernel ends bash when the test binary dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan string, 1)
	var out syncBuffer
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			_, _ = out.Write(append(sc.Bytes(), '\n'))
			if rest, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				u, _, _ := strings.Cut(rest, " ")
				select {
				case listening <- u:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if stopped {
			return
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case err := <-exited:
			// `go run` itself exits 1 after an interrupt, silently, even when the program it ran
			// exited 0; had the program failed, it would have printed "exit status N".
			var exit *exec.ExitError
			quietGoRun := errors.As(err, &exit) && exit.ExitCode() == 1 && stderr.String() == ""
			if err != nil && !quietGoRun {
				t.Errorf("%s did not stop cleanly on SIGINT: %v\n%s%s", block, err, out.String(), stderr.String())
			}
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Errorf("%s ignored SIGINT for 30 s", block)
		}
	})
	select {
	case u := <-listening:
		if u != "http://"+addr {
			t.Fatalf("%s listens on %s, want ADDR %s", block, u, addr)
		}
		return u
	case err := <-exited:
		stopped = true
		t.Fatalf("%s exited before listening: %v\n%s%s", block, err, out.String(), stderr.String())
	case <-time.After(5 * time.Minute): // `go run` compiles first, on a busy machine
		t.Fatalf("%s did not print \"listening on\" in 5 minutes\n%s%s", block, out.String(), stderr.String())
	}
	return ""
}

func get(t *testing.T, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// expectFiveThenA429 makes six requests in a row: five pass with the limit's RateLimit headers,
// the sixth is a 429 problem with Retry-After.
func expectFiveThenA429(t *testing.T, url, limit string, header ...string) {
	t.Helper()
	for i := 1; i <= 5; i++ {
		resp, body := get(t, url, header...)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(body, "hello, ") {
			t.Fatalf("request %d: %d %q, want 200", i, resp.StatusCode, body)
		}
		if p := resp.Header.Get("RateLimit-Policy"); p != `"`+limit+`";q=5;w=60` {
			t.Fatalf("request %d: RateLimit-Policy %q", i, p)
		}
		if want := fmt.Sprintf("(%d left this minute)", 5-i); !strings.Contains(body, want) {
			t.Fatalf("request %d: %q lacks %q", i, body, want)
		}
	}
	resp, body := get(t, url, header...)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("request 6: %d %s %q, want a 429 problem", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 || s > 12 {
		t.Fatalf("request 6: Retry-After %q, want 1 to 12 s (a token every 12 s)", resp.Header.Get("Retry-After"))
	}
	var p struct{ Code, Name string }
	if err := json.Unmarshal([]byte(body), &p); err != nil || p.Code != "rate_limited" || p.Name != limit {
		t.Fatalf("request 6: problem %q (%v)", body, err)
	}
}

func TestNetHTTPExampleAdmitsFiveAMinuteThenAnswers429(t *testing.T) {
	url := startExample(t, "nethttp")
	expectFiveThenA429(t, url+"/hello", "examples.hello")
}

func TestGinExampleLimitsEachUserToFiveAMinute(t *testing.T) {
	url := startExample(t, "gin")
	expectFiveThenA429(t, url+"/hello", "examples.gin.hello", "X-User", "ann")
	if resp, body := get(t, url+"/hello", "X-User", "bob"); resp.StatusCode != http.StatusOK || !strings.Contains(body, "hello, bob (4 left") {
		t.Fatalf("bob after ann's limit: %d %q", resp.StatusCode, body)
	}
	if resp, _ := get(t, url+"/hello"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no user: %d, want 401 from the example's authentication", resp.StatusCode)
	}
}

// repoFile reads a file of the repository.
func repoFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
