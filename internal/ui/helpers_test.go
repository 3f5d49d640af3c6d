package ui_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
	"github.com/sluice-dev/sluice/internal/ui"
	"github.com/sluice-dev/sluice/internal/usage"
)

// TestMain gives the tests that run on every dialect (testkit.EachURL) a PostgreSQL server.
func TestMain(m *testing.M) { testkit.Main(m) }

const (
	opEmail    = "op@example.com"
	opPassword = "operator-password-1"
	cookieName = "sluice_session" // BaseURL is plain-HTTP loopback in these tests
)

// sessionKey signs dashboard session cookies: what the application derives from its secret.
var sessionKey = string(app.NewSecrets(apptest.SecretKey).Derive("dashboard-session"))

// clock is the UI's clock; tests move it to expire session tokens.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// env is the real application (app.New and app.Run) on a real SQLite database.
type env struct {
	t      *testing.T
	app    *app.App
	db     *db.DB
	svc    *tenants.Service
	engine *limiter.Engine
	usage  *usage.Aggregator
	ui     *ui.UI
	clock  *clock
	url    string // where the server answers
}

// option changes the test application's configuration or options before it starts.
type option func(c *config.Config, o *app.Options)

// onDatabase runs the test application on the database at url (testkit.EachURL) instead of a
// SQLite file of its own.
func onDatabase(url string) option {
	return func(c *config.Config, _ *app.Options) { c.DatabaseURL = url }
}

func newEnv(t *testing.T, opts ...option) *env {
	t.Helper()
	clk := &clock{}
	cfg := apptest.Config("sqlite:" + t.TempDir() + "/ui.db")
	o := app.Options{Now: clk.Now}
	for _, opt := range opts {
		opt(&cfg, &o)
	}
	a := apptest.Start(t, cfg, o)
	return &env{t: t, app: a, db: a.DB, svc: a.Tenants, engine: a.Engine, usage: a.Usage, ui: a.UI, clock: clk, url: a.BaseURL()}
}

func (e *env) operator() tenants.User {
	e.t.Helper()
	u, err := e.svc.CreateUser(context.Background(), opEmail, opPassword, true, nil, "test", "")
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

func (e *env) tenant(name string) tenants.Tenant {
	e.t.Helper()
	tn, err := e.svc.CreateTenant(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	return tn
}

// client is a browser-like client: it keeps cookies but does not follow redirects, so tests see
// every 303.
type client struct {
	e *env
	c *http.Client
}

func (e *env) client() *client {
	jar, _ := cookiejar.New(nil)
	return &client{e: e, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

// login logs in through the form and fails the test unless it worked.
func (e *env) login(email, password string) *client {
	e.t.Helper()
	c := e.client()
	res := c.post("/login", url.Values{"email": {email}, "password": {password}})
	if res.StatusCode != http.StatusSeeOther {
		e.t.Fatalf("login: status %d, want 303:\n%s", res.StatusCode, res.body)
	}
	if c.cookie() == "" {
		e.t.Fatal("login set no session cookie")
	}
	return c
}

type response struct {
	*http.Response
	body string
}

func (r response) doc(t *testing.T) *goquery.Document {
	t.Helper()
	d, err := goquery.NewDocumentFromReader(strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (c *client) do(req *http.Request) response {
	c.e.t.Helper()
	res, err := c.c.Do(req)
	if err != nil {
		c.e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{res, string(b)}
}

func (c *client) get(path string) response {
	c.e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.e.url+path, nil)
	return c.do(req)
}

func (c *client) post(path string, form url.Values, headers ...string) response {
	c.e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, c.e.url+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return c.do(req)
}

// getWithCookie sends one GET with exactly the given session cookie value.
func (e *env) getWithCookie(path, value string) response {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.url+path, nil)
	req.AddCookie(&http.Cookie{Name: cookieName, Value: value})
	return e.client().do(req)
}

func (c *client) cookie() string {
	u, _ := url.Parse(c.e.url)
	for _, ck := range c.c.Jar.Cookies(u) {
		if ck.Name == cookieName {
			return ck.Value
		}
	}
	return ""
}

func tpath(tn tenants.Tenant, rest string) string {
	return "/tenants/" + strconv.FormatInt(tn.ID, 10) + rest
}

func text(d *goquery.Document, sel string) string {
	return strings.TrimSpace(d.Find(sel).First().Text())
}

func wantStatus(t *testing.T, r response, want int) {
	t.Helper()
	if r.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d\n%s", r.Request.Method, r.Request.URL.Path, r.StatusCode, want, r.body)
	}
}
