package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// testServer is the real program started through run, exactly as main starts it.
type testServer struct {
	base     string // http://127.0.0.1:PORT
	setupURL string // the one-time setup link, when the database had no users
}

var (
	listeningLine = regexp.MustCompile(`Sluice is listening on (http://127\.0\.0\.1:\d+)`)
	setupLine     = regexp.MustCompile(`(http://\S+/setup\?token=\S+)`)
)

// startTestServer runs `serve` on 127.0.0.1:0 over a fresh SQLite file with env added, and
// returns once it printed its address (and, with wantSetup, its setup link). It stops the
// server when the test ends and fails the test if run returned an error.
func startTestServer(t *testing.T, env map[string]string, wantSetup bool) testServer {
	t.Helper()
	full := map[string]string{
		"LISTEN_ADDR":  "127.0.0.1:0",
		"METRICS_ADDR": "127.0.0.1:0",
		"DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "x.db"),
		"LOG_LEVEL":    "warn",
	}
	for k, v := range env {
		full[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"serve"}, func(k string) string { return full[k] }, strings.NewReader(""), pw)
		_ = pw.Close()
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("server did not stop within 30s")
		}
	})
	// Buffered, so that no start-up line is lost while the loop below is busy with the previous
	// one; once the buffer is full (nobody reads any more) lines are dropped, so that the server
	// never blocks on its log.
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	var s testServer
	deadline := time.After(30 * time.Second)
	for s.base == "" || (wantSetup && s.setupURL == "") {
		select {
		case l := <-lines:
			if m := listeningLine.FindStringSubmatch(l); m != nil {
				s.base = m[1]
			}
			if m := setupLine.FindStringSubmatch(l); m != nil {
				s.setupURL = m[1]
			}
		case err := <-done:
			t.Fatalf("server exited early: %v", err)
		case <-deadline:
			t.Fatalf("no listening line (and setup link: %v) within 30s; got base %q, setup %q", wantSetup, s.base, s.setupURL)
		}
	}
	return s
}

// chromiumPath finds the browser, or skips the test loudly; under CI=true it fails instead,
// because a silently skipped browser test would hide a broken dashboard or widget.
func chromiumPath(t *testing.T, what string) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "\n\n*** BROWSER TEST NOT RUN: no chromium on PATH (apt-get install chromium). ***\n" +
		"*** " + what + " is UNTESTED in a real browser in this run. ***\n"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// newBrowser starts headless Chromium with the flags this sandbox needs (no background
// networking: the machine has no internet) and a fresh profile; it is closed when the test ends.
func newBrowser(t *testing.T, chromium string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.WindowSize(1280, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// Start the browser on a context without a timeout (a timeout there would stop it).
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}
