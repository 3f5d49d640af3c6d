package demo_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/config"
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

// newStack runs the real application with SLUICE_DEMO=true on a SQLite file, its BASE_URL
// http://localhost:8080 and a stub in place of the vendored captcha widget.
func newStack(t *testing.T) *stack {
	t.Helper()
	s, _ := startStack(t, demoConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "demo.db")))
	return s
}

func demoConfig(t *testing.T, dbURL string) config.Config {
	t.Helper()
	cfg := apptest.Config(dbURL)
	cfg.BaseURL = "http://localhost:8080"
	cfg.Demo = true
	return cfg
}

// startStack runs the application with cfg; stop ends it (for restarts).
func startStack(t *testing.T, cfg config.Config) (*stack, func()) {
	t.Helper()
	a, stop := apptest.StartStoppable(t, cfg, app.Options{Widget: fstest.MapFS{
		"external/altcha.min.js": {Data: []byte("/* widget */")},
		"external/altcha.css":    {Data: []byte("/* widget styles */")},
		"workers/sha.js":         {Data: []byte("/* worker */")},
	}})
	return &stack{url: a.BaseURL(), tenants: a.Tenants, engine: a.Engine, demo: a.Demo}, stop
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

func TestDemoIsOffUnlessEnabled(t *testing.T) {
	cfg := apptest.Config("sqlite:" + filepath.Join(t.TempDir(), "demo.db"))
	a := apptest.Start(t, cfg, app.Options{})
	for _, path := range []string{"/demo", "/demo/static/demo.js"} {
		res, err := http.Get(a.BaseURL() + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			t.Fatalf("GET %s without SLUICE_DEMO: %d, want 404", path, res.StatusCode)
		}
	}
	if _, err := a.Tenants.TenantByName(context.Background(), demo.TenantName); !errors.Is(err, tenants.ErrNotFound) {
		t.Fatalf("a demo tenant exists although the demo is off: %v", err)
	}
}

// TestDemoNeverTouchesATenantItDidNotCreate: an operator's own tenant named "demo" keeps its
// origins, difficulty, keys and limits; the demo is unavailable instead.
func TestDemoNeverTouchesATenantItDidNotCreate(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	tn, err := s.tenants.CreateTenant(ctx, demo.TenantName)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.tenants.UpdateCaptchaSettings(ctx, tn.ID, []string{"https://existing.example"}, 2000, "operator"); err != nil {
		t.Fatal(err)
	}
	tuned := limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 1000}
	if _, _, err := s.engine.PutDefinition(ctx, tn.ID, demo.ActionLimit, tuned, nil); err != nil {
		t.Fatal(err)
	}
	if res, _ := s.get(t, "/demo"); res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("GET /demo with an operator's tenant named demo: %d, want 503", res.StatusCode)
	}
	got, err := s.tenants.TenantByName(ctx, demo.TenantName)
	if err != nil || !slices.Equal(got.AllowedOrigins, []string{"https://existing.example"}) || got.CaptchaDifficulty != 2000 {
		t.Fatalf("the operator's tenant changed: %+v (%v)", got, err)
	}
	if keys, err := s.tenants.ListKeys(ctx, tn.ID); err != nil || len(keys) != 0 {
		t.Fatalf("the demo made keys on the operator's tenant: %v (%v)", keys, err)
	}
	def, err := s.engine.GetDefinition(ctx, tn.ID, demo.ActionLimit)
	if err != nil || def.Definition.Kind != limiter.FixedWindow || def.Definition.Rate != 10 {
		t.Fatalf("the operator's %s was replaced: %+v (%v)", demo.ActionLimit, def, err)
	}
}

// TestDemoKeepsItsKeysAndWhatTheOperatorSetAcrossRestarts: the demo's own tenant, tuned by an
// operator, keeps the operator's origins, difficulty and limit after a restart; the demo adds
// the origins it is served from, reuses its two keys (no new key per process) and audits
// every change it makes.
func TestDemoKeepsItsKeysAndWhatTheOperatorSetAcrossRestarts(t *testing.T) {
	cfg := demoConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "demo.db"))
	first, stop := startStack(t, cfg)
	res, page := first.get(t, "/demo")
	m := pkRE.FindStringSubmatch(page)
	if res.StatusCode != http.StatusOK || m == nil || res.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("GET /demo: %d %v\n%s", res.StatusCode, res.Header, page)
	}
	if strings.Contains(page, "<script>") || !strings.Contains(page, `src="/demo/static/demo.js"`) {
		t.Fatal("the page must load its script from a file: the CSP forbids inline scripts")
	}
	ctx := context.Background()
	tn, err := first.tenants.TenantByName(ctx, demo.TenantName)
	if err != nil {
		t.Fatal(err)
	}
	// An operator tunes the demo's tenant.
	if err := first.tenants.UpdateCaptchaSettings(ctx, tn.ID, []string{"https://existing.example"}, 2000, "operator"); err != nil {
		t.Fatal(err)
	}
	tuned := limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 1000}
	if _, _, err := first.engine.PutDefinition(ctx, tn.ID, demo.ActionLimit, tuned, nil); err != nil {
		t.Fatal(err)
	}
	stop()

	s, _ := startStack(t, cfg)
	s.demo.AddOrigin("not an origin")      // ignored
	s.demo.AddOrigin("http://127.0.0.1:0") // not a valid origin: ignored
	s.demo.AddOrigin("http://127.0.0.1:5555")
	_, again := s.get(t, "/demo")
	if m2 := pkRE.FindStringSubmatch(again); m2 == nil || m2[1] != m[1] {
		t.Fatalf("after a restart the page has another publishable key")
	}
	got, err := s.tenants.TenantByName(ctx, demo.TenantName)
	if err != nil {
		t.Fatal(err)
	}
	// The operator's origin, then BASE_URL, the address the server listens on now (added by
	// app.Run), and ours.
	want := []string{"https://existing.example", "http://localhost:8080", s.url, "http://127.0.0.1:5555"}
	if !slices.Equal(got.AllowedOrigins, want) || got.CaptchaDifficulty != 2000 {
		t.Fatalf("demo tenant origins %v difficulty %d, want %v and 2000", got.AllowedOrigins, got.CaptchaDifficulty, want)
	}
	def, err := s.engine.GetDefinition(ctx, tn.ID, demo.ActionLimit)
	if err != nil || def.Definition.Kind != limiter.FixedWindow || def.Definition.Rate != 10 {
		t.Fatalf("the operator's %s was replaced: %+v (%v)", demo.ActionLimit, def, err)
	}
	keys, err := s.tenants.ListKeys(ctx, tn.ID)
	if err != nil || len(keys) != 2 {
		t.Fatalf("demo keys after a restart = %v (%v), want the same publishable and secret key", keys, err)
	}
	entries, err := s.tenants.AuditLog(ctx, tn.ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	byDemo := map[string]int{}
	for _, e := range entries {
		if e.Actor == "demo" {
			byDemo[e.Action]++
		}
	}
	if byDemo["tenant.create"] != 1 || byDemo["key.create"] != 2 || byDemo["captcha.settings"] != 2 {
		t.Fatalf("the demo's audited changes = %v, want its tenant, two keys and two origin updates", byDemo)
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
	ctx := context.Background()
	// A HEAD (a link checker, a probe) sets nothing up: HEAD changes nothing.
	res, err := http.Head(s.url + "/demo")
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("HEAD /demo: %d %v; want 200 with the page's type", res.StatusCode, res.Header)
	}
	if _, err := s.tenants.TenantByName(ctx, demo.TenantName); !errors.Is(err, tenants.ErrNotFound) {
		t.Fatalf("after a HEAD of /demo, the demo tenant: %v; want none (not set up)", err)
	}
	if res, _ := s.get(t, "/demo"); res.StatusCode != http.StatusOK {
		t.Fatalf("GET /demo: %d", res.StatusCode)
	}
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
	// A body over the demo's 16 KiB is 413, as every other surface answers one.
	big := `{"sessionId":"` + strings.Repeat("x", 20<<10) + `"}`
	res, err := http.Post(s.url+"/demo/api/action", "application/json", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a 20 KiB body: %d, want 413", res.StatusCode)
	}
	// The API's own refusals pass through: an impossible session ID is the API's 400.
	res, err = http.Post(s.url+"/demo/api/action", "application/json", strings.NewReader(`{"sessionId":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"code":"invalid_request"`) {
		t.Fatalf("impossible session ID: %d %s", res.StatusCode, b)
	}
}

// TestDemoRecoversFromTheDeletionOfItsTenant: an operator deletes the demo tenant. The next
// request makes a new one, in the same process (the keys the demo knew were deleted with the old
// tenant, and the page's key works again) and after a restart; the demo records the new tenant as
// its own, so that the restart after that finds it instead of refusing it as an operator's. Each
// creation is audited as "demo" in the tenant's log and in the security log.
func TestDemoRecoversFromTheDeletionOfItsTenant(t *testing.T) {
	cfg := demoConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "demo.db"))
	ctx := context.Background()
	// page gets /demo and checks that it is served with a working key of a live demo tenant
	// whose limit is defined (which the demo does with its secret key, through the API).
	page := func(s *stack, step string) tenants.Tenant {
		t.Helper()
		res, body := s.get(t, "/demo")
		m := pkRE.FindStringSubmatch(body)
		if res.StatusCode != http.StatusOK || m == nil {
			t.Fatalf("%s: GET /demo: %d\n%s", step, res.StatusCode, body)
		}
		tn, err := s.tenants.TenantByName(ctx, demo.TenantName)
		if err != nil {
			t.Fatalf("%s: no demo tenant: %v", step, err)
		}
		if keys, err := s.tenants.ListKeys(ctx, tn.ID); err != nil || len(keys) != 2 {
			t.Fatalf("%s: demo tenant %d keys = %v (%v), want 2", step, tn.ID, keys, err)
		}
		if _, err := s.engine.GetDefinition(ctx, tn.ID, demo.ActionLimit); err != nil {
			t.Fatalf("%s: %s of demo tenant %d: %v", step, demo.ActionLimit, tn.ID, err)
		}
		req, _ := http.NewRequest(http.MethodGet, s.url+"/v1/captcha/challenge?pk="+m[1]+"&sid=AAAAAAAAAAAAAAAAAAAAAA", nil)
		req.Header.Set("Origin", s.url)
		cres, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		cres.Body.Close()
		if cres.StatusCode != http.StatusOK {
			t.Fatalf("%s: the page's key fetches no challenge: %d", step, cres.StatusCode)
		}
		if owner, err := s.tenants.Setting(ctx, "demo.tenant_id"); err != nil || owner != strconv.FormatInt(tn.ID, 10) {
			t.Fatalf("%s: the demo records tenant %q (%v) as its own, want %d", step, owner, err, tn.ID)
		}
		return tn
	}
	deleteTenant := func(s *stack, tn tenants.Tenant) {
		t.Helper()
		if err := s.tenants.DeleteTenant(ctx, tn.ID, "operator"); err != nil {
			t.Fatal(err)
		}
	}

	s, stop := startStack(t, cfg)
	first := page(s, "first use")
	// An operator revokes the demo's secret key (it leaked, say): the demo is off, and stays
	// off, until its tenant is deleted.
	firstKeys, err := s.tenants.ListKeys(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range firstKeys {
		if k.Kind == tenants.KindSecret {
			if err := s.tenants.RevokeKey(ctx, first.ID, k.ID, "operator"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if res, body := s.get(t, "/demo"); res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("GET /demo with the demo's secret key revoked, in the process that prepared it: %d, want 503\n%s", res.StatusCode, body)
	}
	stop()
	s, stop = startStack(t, cfg)
	if res, body := s.get(t, "/demo"); res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("GET /demo with the demo's secret key revoked, after a restart: %d, want 503\n%s", res.StatusCode, body)
	}
	deleteTenant(s, first)
	second := page(s, "after the deletion, same process")
	if second.ID == first.ID {
		t.Fatal("the deleted tenant is still served")
	}
	// The new tenant's keys are new: the revoked one did not come back with it.
	secondKeys, err := s.tenants.ListKeys(ctx, second.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range secondKeys {
		for _, old := range firstKeys {
			if k.Hint == old.Hint {
				t.Fatalf("the new demo tenant has the %s key %s of the deleted one", k.Kind, k.Hint)
			}
		}
	}
	// The backend's calls use the new tenant's keys too: the API answers, not 401.
	res, err := http.Post(s.url+"/demo/api/action", "application/json", strings.NewReader(`{"sessionId":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("backend call after the deletion: %d, want the API's 400 for an impossible session ID", res.StatusCode)
	}

	deleteTenant(s, second) // and restart before anything uses the demo
	stop()
	s, stop = startStack(t, cfg)
	third := page(s, "after the deletion, first restart")
	if third.ID == second.ID {
		t.Fatal("the deleted tenant is still served after a restart")
	}
	stop()
	s, _ = startStack(t, cfg)
	if again := page(s, "second restart"); again.ID != third.ID {
		t.Fatalf("second restart: demo tenant %d, want %d (no new one)", again.ID, third.ID)
	}

	server, err := s.tenants.ServerAuditLog(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var created []string
	for _, e := range server {
		if e.Action == "tenant.create" && e.Actor == "demo" {
			created = append(created, e.Target)
		}
	}
	want := []string{"tenant:" + strconv.FormatInt(third.ID, 10), "tenant:" + strconv.FormatInt(second.ID, 10), "tenant:" + strconv.FormatInt(first.ID, 10)}
	if !slices.Equal(created, want) {
		t.Fatalf("security log: the demo's tenant.create entries name %v, want %v", created, want)
	}
	own, err := s.tenants.AuditLog(ctx, third.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range own {
		if e.Action == "tenant.create" && e.Actor == "demo" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the demo tenant's log holds %d tenant.create entries by the demo, want 1", n)
	}
}

// TestDemoKeepsTheKeysOfEarlierBuilds: a demo tenant that has the keys earlier builds derived
// (from the root secret alone) keeps using them after an upgrade, so that revoking them still
// switches its demo off, rather than getting two new keys that switch it back on.
func TestDemoKeepsTheKeysOfEarlierBuilds(t *testing.T) {
	cfg := demoConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "demo.db"))
	ctx := context.Background()
	s, stop := startStack(t, cfg)
	if res, body := s.get(t, "/demo"); res.StatusCode != http.StatusOK {
		t.Fatalf("GET /demo: %d\n%s", res.StatusCode, body)
	}
	tn, err := s.tenants.TenantByName(ctx, demo.TenantName)
	if err != nil {
		t.Fatal(err)
	}
	// The tenant as an earlier build left it: its keys are the legacy ones.
	legacyPK, legacySK := demo.LegacyKeys(s.demo)
	keys, err := s.tenants.ListKeys(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := s.tenants.RevokeKey(ctx, tn.ID, k.ID, "test"); err != nil {
			t.Fatal(err)
		}
	}
	for kind, secret := range map[tenants.KeyKind]string{tenants.KindPublishable: legacyPK, tenants.KindSecret: legacySK} {
		if _, err := s.tenants.EnsureKey(ctx, tn.ID, kind, "demo "+string(kind), secret, "earlier build"); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	s, stop = startStack(t, cfg) // the upgrade
	res, page := s.get(t, "/demo")
	if m := pkRE.FindStringSubmatch(page); res.StatusCode != http.StatusOK || m == nil || m[1] != legacyPK {
		t.Fatalf("GET /demo after the upgrade: %d, want 200 with the earlier builds' publishable key\n%s", res.StatusCode, page)
	}
	for _, k := range mustKeys(t, s, tn.ID) {
		if k.Kind == tenants.KindSecret && k.RevokedAt == nil {
			if err := s.tenants.RevokeKey(ctx, tn.ID, k.ID, "operator"); err != nil {
				t.Fatal(err)
			}
		}
	}
	stop()
	s, _ = startStack(t, cfg)
	if res, body := s.get(t, "/demo"); res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("GET /demo with the earlier builds' secret key revoked: %d, want 503 (switched off)\n%s", res.StatusCode, body)
	}
	if n := len(mustKeys(t, s, tn.ID)); n != 4 {
		t.Fatalf("the demo tenant has %d keys, want 4 (two revoked new ones, the two earlier ones): no new keys were made", n)
	}
}

func mustKeys(t *testing.T, s *stack, tenantID int64) []tenants.APIKey {
	t.Helper()
	keys, err := s.tenants.ListKeys(context.Background(), tenantID)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}
