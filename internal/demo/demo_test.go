package demo_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/captcha"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/demo"
	"github.com/sluice-dev/sluice/internal/httpserver"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// stack is the real API and the demo over one SQLite file.
type stack struct {
	srv     *httptest.Server
	tenants *tenants.Service
	engine  *limiter.Engine
	demo    *demo.Demo
}

func newStack(t *testing.T, origins ...string) *stack {
	t.Helper()
	ctx := context.Background()
	d, err := db.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "demo.db"), db.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	svc := tenants.NewService(d, bytes.Repeat([]byte("p"), 32), nil)
	t.Cleanup(svc.Close)
	engine := limiter.NewEngine(d, limiter.Options{})
	engineCtx, stopEngine := context.WithCancel(context.Background())
	go engine.Run(engineCtx)
	t.Cleanup(stopEngine)
	issuer, err := captcha.NewIssuer(bytes.Repeat([]byte("k"), 32), nil)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := captcha.NewSigner(bytes.Repeat([]byte("s"), 32), "http://localhost:8080")
	if err != nil {
		t.Fatal(err)
	}
	store := captcha.NewStore(d, nil)
	sessions, err := api.NewSessions(api.SessionsDeps{Issuer: issuer, Store: store, Signer: signer, Auth: svc, Tenants: svc, Limiter: engine})
	if err != nil {
		t.Fatal(err)
	}
	widget := fstest.MapFS{"altcha.min.js": {Data: []byte("/* widget */")}}
	dm, err := demo.New(demo.Deps{Tenants: svc, Widget: widget, Origins: origins})
	if err != nil {
		t.Fatal(err)
	}
	apiSrv := api.New(api.Deps{Engine: engine, Auth: svc, Audit: svc, Sessions: store,
		Extra: []func(public, authed *gin.RouterGroup){sessions.Routes}})
	router, err := httpserver.NewRouter(httpserver.Options{API: apiSrv, Surfaces: []httpserver.Surface{sessions, dm}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(router)
	t.Cleanup(srv.Close)
	return &stack{srv: srv, tenants: svc, engine: engine, demo: dm}
}

func (s *stack) get(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	res, err := http.Get(s.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

var pkRE = regexp.MustCompile(`data-pk="(pk_live_[A-Za-z0-9]+)"`)

func TestDemoBootstrapAddsOriginsAndKeepsWhatTheOperatorSet(t *testing.T) {
	s := newStack(t, "http://localhost:8080", "not an origin")
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
	want := []string{"https://existing.example", "http://localhost:8080", "http://127.0.0.1:5555"}
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
	req, _ := http.NewRequest(http.MethodGet, s.srv.URL+"/v1/captcha/challenge?pk="+m[1]+"&sid=AAAAAAAAAAAAAAAAAAAAAA", nil)
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
	s := newStack(t, "http://localhost:8080")
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
	if !slices.Equal(tn.AllowedOrigins, []string{"http://localhost:8080"}) {
		t.Fatalf("origins = %v", tn.AllowedOrigins)
	}
}

func TestDemoServesItsAssetsAndRefusesBadBackendCalls(t *testing.T) {
	s := newStack(t, "http://localhost:8080")
	for name, ctype := range map[string]string{"demo.js": "text/javascript", "demo.css": "text/css", "altcha.min.js": "text/javascript"} {
		res, body := s.get(t, "/demo/static/"+name)
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), ctype) || body == "" {
			t.Errorf("%s: %d %q", name, res.StatusCode, res.Header.Get("Content-Type"))
		}
	}
	if res, _ := s.get(t, "/demo/static/nope.js"); res.StatusCode != http.StatusNotFound {
		t.Errorf("unknown asset: %d", res.StatusCode)
	}
	for _, body := range []string{`not json`, `{"sessionId":"x","extra":1}`} {
		res, err := http.Post(s.srv.URL+"/demo/api/action", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("body %s: %d, want 400", body, res.StatusCode)
		}
	}
	// The API's own refusals pass through: an impossible session ID is the API's 400.
	res, err := http.Post(s.srv.URL+"/demo/api/action", "application/json", strings.NewReader(`{"sessionId":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"code":"invalid_request"`) {
		t.Fatalf("impossible session ID: %d %s", res.StatusCode, b)
	}
}
