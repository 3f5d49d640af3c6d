package demo_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/demo"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// stack is the real application (the API and the demo) over one SQLite file.
type stack struct {
	url     string // where the server answers
	tenants *tenants.Service
	engine  *limiter.Engine
	demo    *demo.Demo
}

// newStack runs the real application on a SQLite file, its BASE_URL http://localhost:8080 and a
// stub in place of the vendored captcha widget.
func newStack(t *testing.T) *stack {
	t.Helper()
	cfg := apptest.Config("sqlite:" + filepath.Join(t.TempDir(), "demo.db"))
	cfg.BaseURL = "http://localhost:8080"
	a := apptest.Start(t, cfg, app.Options{Widget: fstest.MapFS{
		"external/altcha.min.js": {Data: []byte("/* widget */")},
		"external/altcha.css":    {Data: []byte("/* widget styles */")},
		"workers/sha.js":         {Data: []byte("/* worker */")},
	}})
	return &stack{url: a.BaseURL(), tenants: a.Tenants, engine: a.Engine, demo: a.Demo}
}

func (s *stack) get(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	res, err := http.Get(s.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

var pkRE = regexp.MustCompile(`data-pk="(pk_live_[A-Za-z0-9]+)"`)

func TestDemoBootstrapAddsOriginsAndKeepsWhatTheOperatorSet(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	// An operator already has a "demo" tenant with its own origin, difficulty and limit.
	tn, err := s.tenants.CreateTenant(ctx, demo.TenantName)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.tenants.UpdateCaptchaSettings(ctx, tn.ID, []string{"https://existing.example"}, 2000); err != nil {
		t.Fatal(err)
	}
	tuned := limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 1000}
	if _, _, err := s.engine.PutDefinition(ctx, tn.ID, demo.ActionLimit, tuned); err != nil {
		t.Fatal(err)
	}
	s.demo.AddOrigin("not an origin")      // ignored
	s.demo.AddOrigin("http://127.0.0.1:0") // not a valid origin: ignored
	s.demo.AddOrigin("http://127.0.0.1:5555")

	res, page := s.get(t, "/demo")
	m := pkRE.FindStringSubmatch(page)
	if res.StatusCode != http.StatusOK || m == nil || res.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("GET /demo: %d %v\n%s", res.StatusCode, res.Header, page)
	}
	if strings.Contains(page, "<script>") || !strings.Contains(page, `src="/demo/static/demo.js"`) {
		t.Fatal("the page must load its script from a file: the CSP forbids inline scripts")
	}
	got, err := s.tenants.TenantByName(ctx, demo.TenantName)
	if err != nil {
		t.Fatal(err)
	}
	// BASE_URL, then the address the server really listens on (added by app.Run), then ours.
	want := []string{"https://existing.example", "http://localhost:8080", s.url, "http://127.0.0.1:5555"}
	if !slices.Equal(got.AllowedOrigins, want) || got.CaptchaDifficulty != 2000 {
		t.Fatalf("demo tenant origins %v difficulty %d, want %v and 2000", got.AllowedOrigins, got.CaptchaDifficulty, want)
	}
	def, err := s.engine.GetDefinition(ctx, tn.ID, demo.ActionLimit)
	if err != nil || def.Definition.Kind != limiter.FixedWindow || def.Definition.Rate != 10 {
		t.Fatalf("the operator's %s was replaced: %+v (%v)", demo.ActionLimit, def, err)
	}

	// Keys are made once per process, not per page view.
	_, again := s.get(t, "/demo")
	if m2 := pkRE.FindStringSubmatch(again); m2 == nil || m2[1] != m[1] {
		t.Fatalf("second page view has another publishable key")
	}
	keys, err := s.tenants.ListKeys(ctx, tn.ID)
	if err != nil || len(keys) != 2 {
		t.Fatalf("demo keys = %v (%v), want one publishable and one secret", keys, err)
	}
	// The page's key fetches challenges from the added origin.
	req, _ := http.NewRequest(http.MethodGet, s.url+"/v1/captcha/challenge?pk="+m[1]+"&sid=AAAAAAAAAAAAAAAAAAAAAA", nil)
	req.Header.Set("Origin", "http://127.0.0.1:5555")
	cres, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	cres.Body.Close()
	if cres.StatusCode != http.StatusOK || cres.Header.Get("Access-Control-Allow-Origin") != "http://127.0.0.1:5555" {
		t.Fatalf("challenge from the added origin: %d %v", cres.StatusCode, cres.Header)
	}
}

func TestDemoCreatesItsTenantAndLimitOnFirstUse(t *testing.T) {
	s := newStack(t)
	if res, _ := s.get(t, "/demo"); res.StatusCode != http.StatusOK {
		t.Fatalf("GET /demo: %d", res.StatusCode)
	}
	ctx := context.Background()
	tn, err := s.tenants.TenantByName(ctx, demo.TenantName)
	if err != nil {
		t.Fatal(err)
	}
	def, err := s.engine.GetDefinition(ctx, tn.ID, demo.ActionLimit)
	if err != nil || def.Definition.Kind != limiter.TokenBucket || def.Definition.Rate != 3 || def.Definition.Period != 60_000 {
		t.Fatalf("%s = %+v (%v), want a token bucket of 3 per minute", demo.ActionLimit, def, err)
	}
	if !slices.Equal(tn.AllowedOrigins, []string{"http://localhost:8080", s.url}) {
		t.Fatalf("origins = %v", tn.AllowedOrigins)
	}
}

func TestDemoServesItsAssetsAndRefusesBadBackendCalls(t *testing.T) {
	s := newStack(t)
	for name, ctype := range map[string]string{"demo.js": "text/javascript", "demo.css": "text/css", "altcha.min.js": "text/javascript", "altcha.css": "text/css", "altcha-sha.js": "text/javascript"} {
		res, body := s.get(t, "/demo/static/"+name)
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), ctype) || body == "" {
			t.Errorf("%s: %d %q", name, res.StatusCode, res.Header.Get("Content-Type"))
		}
	}
	if res, _ := s.get(t, "/demo/static/nope.js"); res.StatusCode != http.StatusNotFound {
		t.Errorf("unknown asset: %d", res.StatusCode)
	}
	for _, body := range []string{`not json`, `{"sessionId":"x","extra":1}`} {
		res, err := http.Post(s.url+"/demo/api/action", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("body %s: %d, want 400", body, res.StatusCode)
		}
	}
	// The API's own refusals pass through: an impossible session ID is the API's 400.
	res, err := http.Post(s.url+"/demo/api/action", "application/json", strings.NewReader(`{"sessionId":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"code":"invalid_request"`) {
		t.Fatalf("impossible session ID: %d %s", res.StatusCode, b)
	}
}
