package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
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
		err := run(ctx, []string{"serve"}, func(k string) string { return full[k] }, strings.NewReader(""), pw, io.Discard)
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

// pageWatch records, for one browser tab, the response headers of every document it loads and
// every Content Security Policy violation, so that a browser test can assert that the pages it
// drove carried the security headers and worked without the CSP blocking anything.
type pageWatch struct {
	mu         sync.Mutex
	documents  []documentResponse
	violations []string
}

// documentResponse is one page load: its URL, status and response headers (lower-cased names).
type documentResponse struct {
	url     string
	status  int64
	headers map[string]string
}

// cspListener reports every securitypolicyviolation event of every document to the test. A
// script added through the DevTools protocol runs outside the page's CSP.
const cspListener = `document.addEventListener('securitypolicyviolation', (e) => {
	window.sluiceCSPViolation(e.violatedDirective + ' blocked ' + (e.blockedURI || 'inline') + ' at ' + e.sourceFile + ':' + e.lineNumber);
});`

// watchPage starts recording on the tab of ctx; call it before the first navigation.
func watchPage(t *testing.T, ctx context.Context) *pageWatch {
	t.Helper()
	w := &pageWatch{}
	err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *network.EventResponseReceived:
			if ev.Type != network.ResourceTypeDocument || ev.Response == nil {
				return
			}
			h := map[string]string{}
			for k, v := range ev.Response.Headers {
				h[strings.ToLower(k)] = fmt.Sprint(v)
			}
			w.mu.Lock()
			w.documents = append(w.documents, documentResponse{url: ev.Response.URL, status: ev.Response.Status, headers: h})
			w.mu.Unlock()
		case *log.EventEntryAdded:
			// Chromium also logs each violation; this catches those of workers and of documents
			// the listener could not reach.
			if ev.Entry != nil && strings.Contains(ev.Entry.Text, "Content Security Policy") {
				w.mu.Lock()
				w.violations = append(w.violations, "console: "+ev.Entry.Text)
				w.mu.Unlock()
			}
		case *runtime.EventConsoleAPICalled:
			for _, a := range ev.Args {
				if strings.Contains(string(a.Value), "Content Security Policy") || strings.Contains(a.Description, "Content Security Policy") {
					w.mu.Lock()
					w.violations = append(w.violations, "console: "+string(a.Value)+a.Description)
					w.mu.Unlock()
				}
			}
		}
	})
	if err != nil {
		t.Fatalf("watch the page: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.ExposeFunc("sluiceCSPViolation", func(_ context.Context, v string) (chromedp.Void, error) {
		w.mu.Lock()
		w.violations = append(w.violations, v)
		w.mu.Unlock()
		return chromedp.Void{}, nil
	})); err != nil {
		t.Fatalf("expose the CSP violation hook: %v", err)
	}
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: cspListener}); err != nil {
		t.Fatalf("add the CSP violation listener: %v", err)
	}
	return w
}

// wantSecureResponses fails the test unless some document was loaded from each of the paths
// (prefixes of the URL path under base), every document from base carried the security
// headers, and no CSP violation was seen.
func (w *pageWatch) wantSecureResponses(t *testing.T, base string, paths ...string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := map[string]bool{}
	for _, d := range w.documents {
		if !strings.HasPrefix(d.url, base+"/") {
			continue
		}
		for _, p := range paths {
			if strings.HasPrefix(strings.TrimPrefix(d.url, base), p) {
				seen[p] = true
			}
		}
		csp := d.headers["content-security-policy"]
		for _, want := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "base-uri 'self'", "form-action 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s (%d): Content-Security-Policy %q lacks %q", d.url, d.status, csp, want)
			}
		}
		if strings.Contains(csp, "'unsafe-inline'") || strings.Contains(csp, "'unsafe-eval'") {
			t.Errorf("%s: Content-Security-Policy %q allows inline code or eval", d.url, csp)
		}
		for name, want := range map[string]string{
			"x-content-type-options": "nosniff",
			"referrer-policy":        "same-origin",
			"x-frame-options":        "DENY",
		} {
			if got := d.headers[name]; got != want {
				t.Errorf("%s: %s = %q, want %q", d.url, name, got, want)
			}
		}
		if hsts := d.headers["strict-transport-security"]; hsts != "" {
			t.Errorf("%s: Strict-Transport-Security %q over plain HTTP with no trusted proxy", d.url, hsts)
		}
	}
	for _, p := range paths {
		if !seen[p] {
			t.Errorf("the browser loaded no document under %s%s (documents: %d)", base, p, len(w.documents))
		}
	}
	if len(w.violations) > 0 {
		t.Errorf("Content Security Policy violations:\n%s", strings.Join(w.violations, "\n"))
	}
}

// driver runs a browser test's chromedp steps on ctx; a step that fails fails t with where the
// page was and what it said.
type driver struct {
	t   *testing.T
	ctx context.Context
}

func (d driver) fail(name string, err error) {
	d.t.Helper()
	loc, _ := chromedp.Run(d.ctx, chromedp.Location())
	body, _ := chromedp.Run(d.ctx, chromedp.Text("body"))
	d.t.Fatalf("%s: %v\nat %s:\n%.2000s", name, err, loc, body)
}

func (d driver) step(name string, actions ...chromedp.Action[chromedp.Void]) {
	d.t.Helper()
	if err := chromedp.Do(d.ctx, actions...); err != nil {
		d.fail(name, err)
	}
}

func (d driver) read(name string, a chromedp.Action[string]) string {
	d.t.Helper()
	v, err := chromedp.Run(d.ctx, a)
	if err != nil {
		d.fail(name, err)
	}
	return strings.TrimSpace(v)
}

// setUpFirstOperator opens the one-time setup link the server printed and sets up the first
// operator, who is then logged in on the dashboard's home page.
func (d driver) setUpFirstOperator(setupURL, email, password string) {
	d.t.Helper()
	d.step("set up the first operator",
		chromedp.Navigate(setupURL),
		chromedp.WaitVisible("#confirm"),
		chromedp.SendKeys("#email", email),
		chromedp.SendKeys("#password", password),
		chromedp.SendKeys("#confirm", password),
		chromedp.Submit("#confirm"),
		chromedp.WaitVisible("#new-tenant"),
	)
}

// createTenant creates a tenant with the home page's form and waits for the tenant's page.
func (d driver) createTenant(name string) {
	d.t.Helper()
	d.step("create the tenant "+name,
		chromedp.SendKeys("#name", name),
		chromedp.Submit("#name"),
		chromedp.WaitVisible("#new-limit"),
	)
}

// operatorPassword is the first operator's password in the browser tests that set one up.
const operatorPassword = "a long enough password"

// operatorOnTenant starts a server with a fresh database and Chromium, sets up the first operator
// (email, operatorPassword) and creates the tenant acme, whose page the driver is left on. The
// driver's steps share one deadline of timeout; what names the test in a skip.
func operatorOnTenant(t *testing.T, what, email string, timeout time.Duration) (testServer, driver) {
	t.Helper()
	chromium := chromiumPath(t, what)
	srv := startTestServer(t, nil, true)
	ctx, cancel := context.WithTimeout(newBrowser(t, chromium), timeout)
	t.Cleanup(cancel)
	dr := driver{t, ctx}
	dr.setUpFirstOperator(srv.setupURL, email, operatorPassword)
	dr.createTenant("acme")
	return srv, dr
}

// acceptInvite opens link in a browser context of its own in root's browser (no shared cookies)
// and sets password there, as an invitee does; the invitee's driver stays usable until t ends.
func acceptInvite(t *testing.T, root context.Context, link, password string) driver {
	t.Helper()
	ctx, cancel := chromedp.NewContext(root, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancelTimeout)
	guest := driver{t, ctx}
	guest.step("accept the invite",
		chromedp.Navigate(link),
		chromedp.WaitVisible("#password-form"),
		chromedp.SendKeys("#password", password),
		chromedp.SendKeys("#confirm", password),
		chromedp.Submit("#confirm"),
		chromedp.WaitVisible("#logout"),
	)
	return guest
}

// logIn logs d in through the login form at base as email (an operator made from
// SLUICE_ADMIN_EMAIL and SLUICE_ADMIN_PASSWORD), ending on the tenants page.
func logIn(d driver, base, email, password string) {
	d.t.Helper()
	d.step("log in",
		chromedp.Navigate(base+"/login"),
		chromedp.WaitVisible("#password"),
		chromedp.SendKeys("#email", email),
		chromedp.SendKeys("#password", password),
		chromedp.Submit("#password"),
		chromedp.WaitVisible("#new-tenant"),
	)
}

// invite has op invite email to tenant 1 with role from its members page and returns the
// one-time link, pointed at base: links are made with BASE_URL, which a test server on port 0
// does not have.
func invite(op driver, base, email, role string) string {
	op.t.Helper()
	op.step("invite "+email+" as "+role,
		chromedp.Navigate(base+"/tenants/1/members"),
		chromedp.WaitVisible("#invite-form"),
		chromedp.SendKeys("#email", email),
		chromedp.SetValue("#role", role),
		chromedp.Submit("#email"),
		chromedp.WaitVisible("#new-link-url"),
	)
	link := op.read("the invite link", chromedp.Value("#new-link-url"))
	i := strings.Index(link, "/invite?token=")
	if i < 0 {
		op.fail("the invite link "+link, nil)
	}
	return base + link[i:]
}
