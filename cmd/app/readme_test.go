package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testkit"
)

// exampleWalkthrough is the block format README.md follows (see walkthroughBlock). It is run by
// TestWalkthroughFormatRunsAgainstARealServer so the harness and the CLI + server flow stay
// proven even while the README changes. It takes the key's first line with `sed -n 1p`, not
// `head -1`: head exits after one line, so `app key create` may die of SIGPIPE writing its
// second line, and under pipefail the script fails (exit 141) at random.
const exampleWalkthrough = `# walkthrough
export DATABASE_URL=${DATABASE_URL:-sqlite:data/sluice.db}
app tenant create acme
KEY=$(app key create --tenant acme --label quickstart | sed -n 1p)
curl -fsS -X PUT "${BASE:-http://localhost:8080}/v1/limits/sendMessage" -H "Authorization: Bearer $KEY" -d '{"kind":"token bucket","rate":10,"period":60000}'
curl -fsS -X POST "${BASE:-http://localhost:8080}/v1/limits/sendMessage/limit" -H "Authorization: Bearer $KEY" -d '{"key":"alice"}'
`

func TestReadmeWalkthroughRunsAgainstARealServer(t *testing.T) {
	requireTools(t)
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatalf("README.md must exist at the repository root with a walkthrough block (```sh whose first line is # walkthrough): %v", err)
	}
	block, err := walkthroughBlock(string(readme))
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	runWalkthrough(t, block)
}

func TestWalkthroughFormatRunsAgainstARealServer(t *testing.T) {
	requireTools(t)
	block, err := walkthroughBlock("intro\n\n```sh\n" + exampleWalkthrough + "```\n\nmore\n")
	if err != nil {
		t.Fatal(err)
	}
	runWalkthrough(t, block)
}

func TestWalkthroughBlockIsFoundExactlyOnce(t *testing.T) {
	for name, doc := range map[string]string{
		"missing":          "# Sluice\n```sh\napp serve\n```\n",
		"not first line":   "```sh\necho hi\n# walkthrough\n```\n",
		"unterminated":     "```sh\n# walkthrough\necho hi\n",
		"twice":            "```sh\n# walkthrough\n```\n```sh\n# walkthrough\n```\n",
		"other info":       "```bash\n# walkthrough\necho hi\n```\n",
		"indented opening": "  ```sh\n# walkthrough\necho hi\n```\n",
	} {
		if block, err := walkthroughBlock(doc); err == nil {
			t.Errorf("%s: found block %q, want an error", name, block)
		}
	}
	block, err := walkthroughBlock("x\n```sh\r\n# walkthrough\r\necho one\r\necho two\r\n```\r\n")
	if err != nil || block != "# walkthrough\necho one\necho two\n" {
		t.Fatalf("CRLF block = %q, %v", block, err)
	}
}

// walkthroughBlock returns the body of the one fenced block whose opening line is exactly "```sh"
// and whose first line inside is "# walkthrough".
func walkthroughBlock(doc string) (string, error) {
	lines := strings.Split(strings.ReplaceAll(doc, "\r\n", "\n"), "\n")
	var found []string
	for i := 0; i < len(lines); i++ {
		if lines[i] != "```sh" || i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "# walkthrough" {
			continue
		}
		var body strings.Builder
		closed := false
		for j := i + 1; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == "```" {
				closed, i = true, j
				break
			}
			body.WriteString(lines[j] + "\n")
		}
		if !closed {
			return "", errors.New("the walkthrough block is not closed with ```")
		}
		found = append(found, body.String())
	}
	switch len(found) {
	case 0:
		return "", errors.New("no ```sh block starting with the line \"# walkthrough\"")
	case 1:
		return found[0], nil
	default:
		return "", fmt.Errorf("%d walkthrough blocks; keep exactly one", len(found))
	}
}

// requireTools skips loudly without curl or bash on a developer machine, and fails on CI.
func requireTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is required to run the README walkthrough on CI: %v", tool, err)
			}
			t.Skipf("!!! SKIPPING the README walkthrough: %s is not installed (%v). Install it; CI=true turns this into a failure. !!!", tool, err)
		}
	}
}

// buildApp compiles this command into dir/app.
func buildApp(t *testing.T, dir string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go toolchain not on PATH: %v", err)
	}
	cmd := exec.Command(goBin, "build", "-o", filepath.Join(dir, "app"), ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// runWalkthrough builds the binary, starts `app serve` on a fresh SQLite file, runs block with
// bash against it (the CLI sharing the same database) and checks it ends with an allowed decision.
func runWalkthrough(t *testing.T, block string) {
	t.Helper()
	binDir, work := t.TempDir(), t.TempDir()
	buildApp(t, binDir)
	addr := freeAddr(t)
	base := "http://" + addr
	dbURL := "sqlite:" + filepath.Join(work, "sluice.db")
	env := append(os.Environ(),
		"PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"DATABASE_URL="+dbURL,
		"LISTEN_ADDR="+addr,
		"METRICS_ADDR=127.0.0.1:0",
		"BASE_URL="+base,
		"BASE="+base,
		"LOG_LEVEL=warn",
	)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	server := exec.CommandContext(ctx, filepath.Join(binDir, "app"), "serve")
	server.Dir, server.Env = work, env
	var serverErr testkit.SyncBuffer
	server.Stderr = &serverErr
	stdout, err := server.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatalf("start app serve: %v", err)
	}
	var serverOut testkit.SyncBuffer
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		once := sync.Once{}
		for sc.Scan() {
			_, _ = serverOut.Write(append(sc.Bytes(), '\n'))
			if strings.HasPrefix(sc.Text(), "Sluice is listening on") {
				once.Do(func() { close(listening) })
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- server.Wait() }()
	defer func() {
		_ = server.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil && !t.Failed() {
				t.Errorf("app serve did not shut down cleanly: %v\n%s%s", err, serverOut.String(), serverErr.String())
			}
		case <-time.After(20 * time.Second):
			_ = server.Process.Kill()
			t.Errorf("app serve ignored SIGINT for 20 s")
		}
	}()
	select {
	case <-listening:
	case err := <-exited:
		t.Fatalf("app serve exited before listening: %v\n%s%s", err, serverOut.String(), serverErr.String())
	case <-ctx.Done():
		t.Fatalf("app serve did not start listening\n%s%s", serverOut.String(), serverErr.String())
	}

	// From the repository root, as a reader of the README runs it in a fresh clone (the block
	// may `go run ./cmd/app`); it writes only to DATABASE_URL's file in the test's directory.
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	script := exec.CommandContext(ctx, "bash", "-c", "set -euo pipefail\n"+block)
	script.Dir, script.Env = root, env
	var out, errOut bytes.Buffer
	script.Stdout, script.Stderr = &out, &errOut
	if err := script.Run(); err != nil {
		t.Fatalf("walkthrough failed: %v\n--- script\n%s--- stdout\n%s--- stderr\n%s--- server\n%s%s",
			err, block, out.String(), errOut.String(), serverOut.String(), serverErr.String())
	}
	if !strings.Contains(out.String(), `"ok":true`) {
		t.Fatalf("walkthrough output lacks \"ok\":true:\n%s\n--- stderr\n%s", out.String(), errOut.String())
	}
}
