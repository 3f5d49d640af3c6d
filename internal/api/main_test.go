package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// Fuzz workers are separate processes that only run fuzz targets on SQLite: starting a
	// PostgreSQL server in each of them would cost seconds per worker for nothing.
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		os.Exit(m.Run())
	}
	testkit.Main(m)
}

// harness is the real application (app.New and app.Run, as `app serve` runs them) over one real
// database, listening on a loopback port.
type harness struct {
	app     *app.App
	db      *db.DB
	tenants *tenants.Service
	engine  *limiter.Engine
	router  *gin.Engine
	url     string // where the server answers
}

func sqliteURL(tb testing.TB) string {
	tb.Helper()
	return "sqlite:" + filepath.Join(tb.TempDir(), "sluice.db")
}

// startApp runs the application on url with o and returns its harness.
func startApp(tb testing.TB, url string, o app.Options) *harness {
	tb.Helper()
	a := apptest.Start(tb, apptest.Config(url), o)
	return &harness{app: a, db: a.DB, tenants: a.Tenants, engine: a.Engine, router: a.Router, url: a.BaseURL()}
}

func newHarness(tb testing.TB, url string) *harness {
	tb.Helper()
	return startApp(tb, url, app.Options{})
}

// eachDB runs fn on a fresh SQLite file and a fresh PostgreSQL database, as parallel subtests.
func eachDB(t *testing.T, fn func(t *testing.T, h *harness)) {
	t.Helper()
	t.Parallel() // every test has databases of its own
	testkit.EachURL(t, func(t *testing.T, url string) { fn(t, newHarness(t, url)) })
}

// tenantKey is a tenant with one secret key.
type tenantKey struct {
	id     int64
	key    string
	keyID  string
	tenant string
}

func (h *harness) newTenant(t testing.TB, name string) tenantKey {
	t.Helper()
	ctx := context.Background()
	tn, err := h.tenants.CreateTenant(ctx, name)
	if err != nil {
		t.Fatalf("create tenant %s: %v", name, err)
	}
	k, secret, err := h.tenants.CreateKey(ctx, tn.ID, tenants.KindSecret, "tests", "test")
	if err != nil {
		t.Fatalf("create key: %v", err)
	}
	return tenantKey{id: tn.ID, key: secret, keyID: k.ID, tenant: name}
}

// response is a fully read HTTP response.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string {
	return http.StatusText(r.status) + " " + r.header.Get("Content-Type") + " " + truncate(string(r.body), 400)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// send sends body (nil: none; string or []byte: raw; anything else: JSON) with an
// "Authorization: Bearer key" header when key is not empty.
func (h *harness) send(t testing.TB, method, path, key string, body any) response {
	t.Helper()
	return sendAuth(t, h.url, method, path, bearer(key), body)
}

func bearer(key string) string {
	if key == "" {
		return ""
	}
	return "Bearer " + key
}

// sendAuth sends a request as send does, with any Authorization header, and checks the response
// against the OpenAPI document (checkContract).
func sendAuth(t testing.TB, base, method, path, authorization string, body any) response {
	t.Helper()
	var rd io.Reader
	var sent []byte
	switch b := body.(type) {
	case nil:
	case string:
		sent = []byte(b)
	case []byte:
		sent = b
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("marshal body: %v", err)
		}
		sent = raw
	}
	if body != nil {
		rd = bytes.NewReader(sent)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatalf("new request %s %s: %v", method, path, err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	r := response{status: res.StatusCode, header: res.Header, body: raw}
	checkContract(t, request{method: method, target: path, contentType: req.Header.Get("Content-Type"), body: sent}, r)
	return r
}

// requireJSON asserts a JSON success response with the given status and decodes it.
func requireJSON(t testing.TB, r response, status int) map[string]any {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type %q, want application/json: %s", ct, r)
	}
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %s", err, r)
	}
	return m
}

// requireProblem asserts an RFC 9457 problem with status and code and returns its body.
func requireProblem(t testing.TB, r response, status int, code string) map[string]any {
	t.Helper()
	p := problemOf(t, r)
	if r.status != status || p["code"] != code {
		t.Fatalf("got %d %v, want %d %s: %s", r.status, p["code"], status, code, r)
	}
	if int(p["status"].(float64)) != status {
		t.Fatalf("problem status %v differs from HTTP status %d", p["status"], status)
	}
	for _, f := range []string{"type", "title", "detail"} {
		if s, _ := p[f].(string); s == "" {
			t.Fatalf("problem lacks %q: %s", f, r)
		}
	}
	return p
}

// problemOf asserts the response is application/problem+json and decodes it.
func problemOf(t testing.TB, r response) map[string]any {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json: %s", ct, r)
	}
	var p map[string]any
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body is not JSON: %v: %s", err, r)
	}
	if c, _ := p["code"].(string); c == "" {
		t.Fatalf("problem without code: %s", r)
	}
	return p
}

// number reads a JSON number field.
func number(t testing.TB, m map[string]any, field string) float64 {
	t.Helper()
	v, ok := m[field].(float64)
	if !ok {
		t.Fatalf("field %q is %T (%v), want a number in %v", field, m[field], m[field], m)
	}
	return v
}

// Definitions used throughout.
var (
	bucket10PerMinute = map[string]any{"kind": "token bucket", "rate": 10, "period": 60000}
	// A fixed window so long (ten years, from the epoch) that its value cannot change during a test.
	frozenWindow = map[string]any{"kind": "fixed window", "rate": 10, "period": 315360000000, "start": 0}
)

func (h *harness) define(t testing.TB, key, name string, def map[string]any) {
	t.Helper()
	requireJSON(t, h.send(t, http.MethodPut, "/v1/limits/"+name, key, def), http.StatusOK)
}
