package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"

	"github.com/sluice-dev/sluice/internal/captcha"
)

// demoServer is the real program started through run, as main starts it.
type demoServer struct {
	base string
}

// startDemoServer runs the real program with an operator configured (the dashboard's
// first-start setup is not what these tests are about).
func startDemoServer(t *testing.T) demoServer {
	t.Helper()
	srv := startTestServer(t, map[string]string{
		"SLUICE_ADMIN_EMAIL":    "ops@example.com",
		"SLUICE_ADMIN_PASSWORD": "correct horse battery staple",
		"SLUICE_DEMO":           "true",
	}, false)
	return demoServer{base: srv.base}
}

// post sends JSON with extra headers and decodes a JSON answer.
func (s demoServer) post(t *testing.T, path string, body any, header map[string]string) (int, http.Header, map[string]any) {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, s.base+path, strings.NewReader(string(raw)))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return s.do(t, req)
}

func (s demoServer) get(t *testing.T, path string, header map[string]string) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.base+path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return s.do(t, req)
}

func (s demoServer) do(t *testing.T, req *http.Request) (int, http.Header, map[string]any) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, res.Header, out
}

// demoPK reads the publishable key the /demo page embeds.
func (s demoServer) demoPK(t *testing.T) string {
	t.Helper()
	res, err := http.Get(s.base + "/demo")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	page, _ := io.ReadAll(res.Body)
	m := regexp.MustCompile(`data-pk="(pk_live_[A-Za-z0-9]+)"`).FindSubmatch(page)
	if res.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("GET /demo: %d, no publishable key in:\n%s", res.StatusCode, page)
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(string(page), "<script>") {
		t.Fatalf("the demo must run under the strict CSP without inline scripts (CSP %q)", csp)
	}
	return string(m[1])
}

func randomSessionID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

// TestDemoFlowOverHTTP runs the demo's flow with the Go solver in place of the browser: the same
// server, the same routes, no Chromium needed.
func TestDemoFlowOverHTTP(t *testing.T) {
	s := startDemoServer(t)
	pk := s.demoPK(t)
	sid := randomSessionID(t)

	// The demo tenant allows the origin the server really listens on.
	status, h, body := s.get(t, "/v1/captcha/challenge?pk="+pk+"&sid="+sid, map[string]string{"Origin": s.base})
	if status != http.StatusOK || h.Get("Access-Control-Allow-Origin") != s.base || h.Get("Cache-Control") != "no-store" {
		t.Fatalf("challenge from the server's own origin: %d %v %v", status, h, body)
	}
	raw, _ := json.Marshal(body)
	var ch captcha.Challenge
	if err := json.Unmarshal(raw, &ch); err != nil {
		t.Fatal(err)
	}
	if ch.Parameters.Data.MaxNumber != strconv.Itoa(captcha.DefaultMaxNumber) {
		t.Fatalf("demo difficulty = %s", ch.Parameters.Data.MaxNumber)
	}
	payload, err := captcha.Solve(ch)
	if err != nil {
		t.Fatal(err)
	}

	// Cross-site posts to the demo backend are refused.
	status, _, _ = s.post(t, "/demo/api/authorize", map[string]any{"sessionId": sid, "payload": payload},
		map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
	if status != http.StatusForbidden {
		t.Fatalf("cross-site authorize: %d", status)
	}

	status, _, auth := s.post(t, "/demo/api/authorize", map[string]any{"sessionId": sid, "payload": payload}, nil)
	if status != http.StatusOK || auth["authorized"] != true {
		t.Fatalf("authorize through the demo backend: %d %v", status, auth)
	}
	status, _, again := s.post(t, "/demo/api/authorize", map[string]any{"sessionId": sid, "payload": payload}, nil)
	if status != http.StatusConflict || again["code"] != "conflict" {
		t.Fatalf("replay through the demo backend: %d %v", status, again)
	}

	// The token verifies offline with the served JWK set.
	_, _, set := s.get(t, "/.well-known/jwks.json", nil)
	keys, _ := set["keys"].([]any)
	if len(keys) != 1 {
		t.Fatalf("JWKS = %v", set)
	}
	x, _ := base64.RawURLEncoding.DecodeString(keys[0].(map[string]any)["x"].(string))
	tok, err := jwt.Parse(auth["token"].(string), func(*jwt.Token) (any, error) { return ed25519.PublicKey(x), nil },
		jwt.WithValidMethods([]string{"EdDSA"}), jwt.WithExpirationRequired())
	if err != nil {
		t.Fatalf("demo token does not verify with the JWKS: %v", err)
	}
	if sub, _ := tok.Claims.GetSubject(); sub != captcha.HashSessionID(sid) {
		t.Fatalf("token subject %q", sub)
	}

	for i := range 3 {
		status, _, d := s.post(t, "/demo/api/action", map[string]any{"sessionId": sid}, nil)
		if status != http.StatusOK || d["ok"] != true {
			t.Fatalf("action %d: %d %v", i, status, d)
		}
	}
	status, _, d := s.post(t, "/demo/api/action", map[string]any{"sessionId": sid}, nil)
	if ra, _ := d["retryAfter"].(float64); status != http.StatusOK || d["ok"] != false || ra <= 0 {
		t.Fatalf("fourth action: %d %v, want a refusal with retryAfter", status, d)
	}
	status, _, d = s.post(t, "/demo/api/action", map[string]any{"sessionId": randomSessionID(t)}, nil)
	if status != http.StatusForbidden || d["code"] != "session_not_authorized" {
		t.Fatalf("unauthorized session: %d %v", status, d)
	}
}

// widgetCheckbox is the widget's checkbox, wherever the widget renders it.
const widgetCheckbox = `(() => { const w = document.querySelector('altcha-widget');
	return (w.shadowRoot || w).querySelector('input[type="checkbox"]'); })()`

// TestDemoInChromium solves the real widget in headless Chromium and spends the limit by
// session, then measures the solve time over several fresh sessions.
func TestDemoInChromium(t *testing.T) {
	chromium := chromiumPath(t, "The captcha widget")
	s := startDemoServer(t)
	ctx := newBrowser(t, chromium)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelTimeout()
	watch := watchPage(t, ctx)
	var (
		consoleMu sync.Mutex
		console   []string
	)
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
				consoleMu.Lock()
				console = append(console, m.String())
				consoleMu.Unlock()
			}
		}
	}()
	fail := func(what string, err error) {
		t.Helper()
		body, _ := chromedp.Run(ctx, chromedp.Text("body"))
		consoleMu.Lock()
		defer consoleMu.Unlock()
		t.Fatalf("%s: %v\npage:\n%.2000s\nconsole:\n%s", what, err, body, strings.Join(console, "\n"))
	}

	// solve loads a fresh page (a fresh session), ticks the widget and waits for the backend's
	// authorization; it returns the widget's click-to-verified time (measured by the page) and
	// the wall time from the click to "authorized" as the test sees it.
	solve := func() (widgetMs float64, wall time.Duration) {
		t.Helper()
		if err := chromedp.Do(ctx,
			chromedp.Navigate(s.base+"/demo"),
			chromedp.WaitVisible("#demo"),
		); err != nil {
			fail("load /demo", err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`(() => { const w = document.querySelector('altcha-widget');
			return !!w && !!(w.shadowRoot || w).querySelector('input[type="checkbox"]'); })()`)); err != nil {
			fail("widget never rendered its checkbox", err)
		}
		start := time.Now()
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.JSPath(widgetCheckbox))); err != nil {
			fail("click the widget", err)
		}
		state, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const s = document.getElementById('auth').dataset.state;
			return s === 'ok' || s === 'error' ? s : false; })()`, chromedp.WithPollingTimeout(90*time.Second)))
		if err != nil {
			fail("wait for the authorization", err)
		}
		wall = time.Since(start)
		text, _ := chromedp.Run(ctx, chromedp.Text("#auth"))
		if state != "ok" {
			fail("the session was not authorized", fmt.Errorf("%s", text))
		}
		ms, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('demo').dataset.solveMs || ''`))
		if err != nil {
			fail("read the solve time", err)
		}
		widgetMs, err = strconv.ParseFloat(ms, 64)
		if err != nil {
			fail("no solve time recorded", fmt.Errorf("%q: %s", ms, text))
		}
		return widgetMs, wall
	}

	// outcome clicks a button and returns the new log entry's data attributes and text.
	outcome := func(button string, n int) (map[string]string, string) {
		t.Helper()
		sel := fmt.Sprintf("#log li:nth-child(%d)", n)
		if err := chromedp.Do(ctx, chromedp.Click(button), chromedp.WaitVisible(sel)); err != nil {
			fail("click "+button, err)
		}
		attrs, err := chromedp.Run(ctx, chromedp.Attributes(sel))
		if err != nil {
			fail("read "+sel, err)
		}
		text, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			fail("read "+sel, err)
		}
		return attrs, text
	}

	widgetMs, wall := solve()
	solves, walls := []float64{widgetMs}, []float64{float64(wall.Milliseconds())}
	for i := 1; i <= 3; i++ {
		attrs, text := outcome("#action", i)
		if attrs["data-outcome"] != "ok" || attrs["data-status"] != "200" {
			t.Fatalf("action %d by the authorized session: %v %q", i, attrs, text)
		}
	}
	attrs, text := outcome("#action", 4)
	if ra, _ := strconv.Atoi(attrs["data-retry-after"]); attrs["data-outcome"] != "refused" || ra <= 0 || !strings.Contains(text, "retry after") {
		t.Fatalf("fourth action: %v %q, want a refusal showing retryAfter", attrs, text)
	}
	shown, err := chromedp.Run(ctx, chromedp.Text("#result"))
	if err != nil || !strings.Contains(shown, "retry after") {
		t.Fatalf("the page does not show the refusal: %q (%v)", shown, err)
	}
	attrs, text = outcome("#unauthorized", 5)
	if attrs["data-status"] != "403" || attrs["data-code"] != "session_not_authorized" {
		t.Fatalf("unauthorized session: %v %q", attrs, text)
	}
	t.Logf("page showed: %q / %q", shown, text)

	for range 4 {
		ms, wall := solve()
		solves = append(solves, ms)
		walls = append(walls, float64(wall.Milliseconds()))
	}
	t.Logf("headless Chromium, difficulty %d: widget click-to-verified median %.0f ms over %d solves %v; "+
		"click-to-authorized (incl. backend) median %.0f ms %v",
		captcha.DefaultMaxNumber, median(solves), len(solves), solves, median(walls), walls)
	// The widget (its styles and its proof-of-work worker included) works under the strict CSP.
	watch.wantSecureResponses(t, s.base, "/demo")
	consoleMu.Lock()
	defer consoleMu.Unlock()
	if len(console) > 0 {
		t.Logf("browser console (errors and warnings):\n%s", strings.Join(console, "\n"))
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
