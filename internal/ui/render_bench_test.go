package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// renderScale is the size of the data the render benchmark seeds.
type renderScale struct {
	tenants, limitsPerTenant, keysPerLimit int
	// The measured tenant (the first) also gets a week of usage per minute for each of its
	// limits and, per hour and per minute of the last hour, full top-keys sketches (32 keys of
	// each kind): the most its analytics can ever have to read.
	topKeys int
	// bigLimit is the number of keys of one more limit of the measured tenant, "big": a limit
	// with many keys is what a listing without an index would scan.
	bigLimit int
	// members of the measured tenant (and as many users on /users), and webhook deliveries
	// of its one endpoint (its log lists up to 100).
	members, deliveries int
}

// fullRenderScale is the issue's: 100 tenants, 1,000 limits, 1,000,000 state rows (900 keys in
// each of 999 limits and 100,900 in the measured tenant's "big").
var fullRenderScale = renderScale{tenants: 100, limitsPerTenant: 10, keysPerLimit: 900, topKeys: 32, bigLimit: 100_000, members: 5, deliveries: 100}

// renderFixture is a started application over seeded data, and an operator's session.
type renderFixture struct {
	router *gin.Engine
	db     *db.DB
	cookie *http.Cookie
	tenant int64
	limit  string
	big    string
	// The measured tenant also has a limit in shadow mode and a concurrency limit, an override
	// and an open hold on limit, an open lease on jobs, and a webhook endpoint with deliveries.
	shadow, jobs string
	override     string // the override's match
	hold, lease  string
	webhookID    int64
}

// seedRender starts the application on url and seeds s with set-based SQL (generate_series on
// PostgreSQL, a recursive CTE on SQLite), so that a million rows take seconds.
func seedRender(tb testing.TB, dbURL string, s renderScale) renderFixture {
	tb.Helper()
	ctx := context.Background()
	hooks := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	tb.Cleanup(hooks.Close)
	cfg := apptest.Config(dbURL)
	cfg.WebhookAllowPrivate = true // the receiver is on 127.0.0.1
	a := apptest.Start(tb, cfg, app.Options{})
	if _, err := a.Tenants.CreateUser(ctx, opEmail, opPassword, true, nil, "test", ""); err != nil {
		tb.Fatal(err)
	}
	var first int64
	for i := range s.tenants {
		tn, err := a.Tenants.CreateTenant(ctx, fmt.Sprintf("tenant-%03d", i))
		if err != nil {
			tb.Fatal(err)
		}
		if i == 0 {
			first = tn.ID
		}
	}
	series := func(n int) string { // a relation "g(i)" of 1..n
		if a.DB.Dialect == db.Postgres {
			return fmt.Sprintf("generate_series(1, %d) AS g(i)", n)
		}
		return fmt.Sprintf("(WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < %d) SELECT i FROM r) AS g", n)
	}
	nowMS := time.Now().UnixMilli()
	minute := nowMS - nowMS%60_000
	hour := nowMS - nowMS%3_600_000
	stmts := []string{
		`INSERT INTO limit_definitions (tenant_id, name, kind, rate, period, created_at, updated_at)
			SELECT t.id, CASE WHEN g.i = ` + strconv.Itoa(s.limitsPerTenant) + ` AND t.id = ` + strconv.FormatInt(first, 10) + ` THEN 'big' ELSE 'limit-' || g.i END,
				'token bucket', 100, 60000, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP FROM tenants t, ` + series(s.limitsPerTenant),
		`INSERT INTO limit_state (tenant_id, name, key, shard, value, ts)
			SELECT d.tenant_id, d.name, 'user:' || g.i, 0, 50, ` + strconv.FormatInt(nowMS, 10) + ` - g.i FROM limit_definitions d, ` + series(s.keysPerLimit),
		fmt.Sprintf(`INSERT INTO limit_state (tenant_id, name, key, shard, value, ts)
			SELECT %d, 'big', 'big:' || g.i, 0, 50, %d - g.i FROM %s`, first, nowMS, series(max(s.bigLimit, 1))),
		fmt.Sprintf(`INSERT INTO usage_stats (tenant_id, name, bucket_start, allowed, refused, shadow_refused)
			SELECT d.tenant_id, d.name, %d - g.i * 60000, 90, 10, 0 FROM limit_definitions d, %s WHERE d.tenant_id = %d`, minute, series(7*24*60-1), first),
		// The same minutes summed per hour, as the flush writes them (and migration 00014 backfills).
		fmt.Sprintf(`INSERT INTO usage_stats_hourly (tenant_id, name, bucket_start, allowed, refused, shadow_refused)
			SELECT tenant_id, name, bucket_start - bucket_start %% 3600000, SUM(allowed), SUM(refused), SUM(shadow_refused)
			FROM usage_stats WHERE tenant_id = %d GROUP BY tenant_id, name, bucket_start - bucket_start %% 3600000`, first),
	}
	if s.topKeys > 0 {
		for _, kind := range []string{"refused", "near", "shadow"} {
			stmts = append(stmts,
				fmt.Sprintf(`INSERT INTO usage_top_keys_hourly (tenant_id, name, kind, bucket_start, limit_key, hits, overcount)
					SELECT d.tenant_id, d.name, '%s', %d - (g.i / %d) * 3600000, 'user:' || (g.i %% %d), 1 + g.i %% 97, 0
					FROM limit_definitions d, %s WHERE d.tenant_id = %d`, kind, hour, s.topKeys, s.topKeys*3, series(8*24*s.topKeys), first),
				fmt.Sprintf(`INSERT INTO usage_top_keys (tenant_id, name, kind, bucket_start, limit_key, hits, overcount)
					SELECT d.tenant_id, d.name, '%s', %d - (g.i / %d) * 60000, 'user:' || (g.i %% %d), 1 + g.i %% 97, 0
					FROM limit_definitions d, %s WHERE d.tenant_id = %d`, kind, minute, s.topKeys, s.topKeys*3, series(60*s.topKeys), first))
		}
	}
	for _, q := range stmts {
		if err := a.DB.Gorm.WithContext(ctx).Exec(q).Error; err != nil {
			tb.Fatalf("seed: %v\n%s", err, q)
		}
	}
	if a.DB.Dialect == db.Postgres {
		if err := a.DB.Gorm.Exec("ANALYZE").Error; err != nil {
			tb.Fatal(err)
		}
	}
	f := renderFixture{router: a.Router, db: a.DB, tenant: first, limit: "limit-1", big: "big", shadow: "shadow", jobs: "jobs", override: "user:1"}
	f.seedExtras(tb, a, hooks.URL, s)
	res := f.serve(tb, http.MethodPost, "/login", url.Values{"email": {opEmail}, "password": {opPassword}})
	if res.Code != http.StatusSeeOther {
		tb.Fatalf("login: %d %s", res.Code, res.Body)
	}
	for _, c := range res.Result().Cookies() {
		if c.Name == cookieName {
			f.cookie = c
		}
	}
	if f.cookie == nil {
		tb.Fatal("login set no session cookie")
	}
	return f
}

// seedExtras gives the measured tenant what the pages beyond its limits need: a shadow limit
// (its enforce confirmation), a concurrency limit with an open lease and an open hold on limit
// (their release confirmations), an override (its edit form), members and invitations, and a
// webhook endpoint whose deliveries were all sent.
func (f *renderFixture) seedExtras(tb testing.TB, a *app.App, hookURL string, s renderScale) {
	tb.Helper()
	ctx := context.Background()
	shadow := limiter.Definition{Kind: limiter.TokenBucket, Rate: 100, Period: 60_000, Mode: limiter.Shadow}
	jobs := limiter.Definition{Kind: limiter.Concurrency, Rate: 10, LeaseTTL: 3_600_000}
	for name, d := range map[string]limiter.Definition{f.shadow: shadow, f.jobs: jobs} {
		if _, _, err := a.Engine.PutDefinition(ctx, f.tenant, name, d, nil); err != nil {
			tb.Fatal(err)
		}
	}
	if _, _, err := a.Engine.PutOverride(ctx, f.tenant, f.limit, limiter.Override{Match: f.override, Action: limiter.ActionAllow}, nil); err != nil {
		tb.Fatal(err)
	}
	h, err := a.Engine.Hold(ctx, f.tenant, []limiter.HoldLimit{{Name: f.limit, Key: "user:2", Count: 1}}, 3_600_000)
	if err != nil || !h.Decision.OK {
		tb.Fatalf("hold: %+v %v", h, err)
	}
	lease, err := a.Engine.Limit(ctx, f.tenant, limiter.Request{Name: f.jobs, Key: "worker", Count: 1})
	if err != nil || lease.LeaseID == "" {
		tb.Fatalf("lease: %+v %v", lease, err)
	}
	f.hold, f.lease = h.ID, lease.LeaseID
	for i := range s.members {
		if _, err := a.Tenants.CreateUser(ctx, fmt.Sprintf("member-%d@example.com", i), "member-password-1", false, &f.tenant, "test", ""); err != nil {
			tb.Fatal(err)
		}
		if i%2 == 0 {
			if _, _, err := a.Tenants.CreateInvite(ctx, &f.tenant, fmt.Sprintf("invited-%d@example.com", i), tenants.RoleViewer, 24*time.Hour, "user:"+opEmail); err != nil {
				tb.Fatal(err)
			}
		}
	}
	ep, _, err := a.Webhooks.CreateEndpoint(ctx, f.tenant, hookURL+"/sluice", []string{"key.created", "key.revoked"})
	if err != nil {
		tb.Fatal(err)
	}
	f.webhookID = ep.ID
	for range s.deliveries {
		if err := a.Webhooks.SendTest(ctx, f.tenant, ep.ID); err != nil {
			tb.Fatal(err)
		}
	}
	// Sent now, so that the dispatcher does not deliver them while the pages are timed.
	if _, err := a.Webhooks.DeliverDue(ctx); err != nil {
		tb.Fatal(err)
	}
}

// serve sends one request through the real router, in process: server time only.
func (f renderFixture) serve(tb testing.TB, method, path string, form url.Values) *httptest.ResponseRecorder {
	var req *http.Request
	if form != nil {
		req = httptest.NewRequest(method, path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequest(method, path, nil)
	}
	if f.cookie != nil {
		req.AddCookie(f.cookie)
	}
	rec := httptest.NewRecorder()
	f.router.ServeHTTP(rec, req)
	return rec
}

// renderPages are every dashboard page and fragment a GET renders, for the measured tenant.
func (f renderFixture) renderPages() []string {
	t := "/tenants/" + strconv.FormatInt(f.tenant, 10)
	l := t + "/limits/" + f.limit
	return []string{
		"/tenants", "/audit", "/users", "/account", t + "/manage",
		t + "/limits", t + "/limit-values", t + "/new-limit",
		l, l + "?key=user:1", l + "/keys", t + "/limits/" + f.big, t + "/limits/" + f.big + "/keys", l + "/edit", l + "/reset-all", l + "/delete", l + "/overrides/new",
		l + "/overrides/edit?match=" + url.QueryEscape(f.override), l + "/holds/" + f.hold + "/release",
		t + "/limits/" + f.shadow + "/enforce", t + "/limits/" + f.jobs + "/leases/" + f.lease + "/release",
		t + "/keys", t + "/captcha", t + "/webhooks", t + "/webhooks/" + strconv.FormatInt(f.webhookID, 10), t + "/audit",
		t + "/plan", t + "/members",
		t + "/analytics", t + "/analytics?range=day", t + "/analytics?range=week", t + "/analytics/panel?range=week",
		t + "/analytics?range=week&limit=" + f.limit, t + "/analytics/keys.csv?range=week", t + "/analytics/ratio.csv?range=week",
	}
}

// BenchmarkDashboardRender times the server-side render of every dashboard page through the real
// router, on PostgreSQL seeded with 100 tenants, 1,000 limits and 1,000,000 state rows (make
// bench-ui; docs/performance.md has the figures). Without PostgreSQL it is skipped.
func BenchmarkDashboardRender(b *testing.B) {
	f := seedRender(b, testkit.URL(b, db.Postgres), fullRenderScale)
	for _, p := range f.renderPages() {
		b.Run(strings.TrimPrefix(p, "/"), func(b *testing.B) {
			for b.Loop() {
				if res := f.serve(b, http.MethodGet, p, nil); res.Code != http.StatusOK {
					b.Fatalf("GET %s: %d", p, res.Code)
				}
			}
		})
	}
}

// TestRenderBenchmarkSeedsAndRendersEveryPage is the benchmark in small, on both dialects, so
// that it cannot rot: the seed works and every page it times answers 200.
func TestRenderBenchmarkSeedsAndRendersEveryPage(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		f := seedRender(t, url, renderScale{tenants: 3, limitsPerTenant: 2, keysPerLimit: 20, topKeys: 4, members: 2, deliveries: 3})
		for _, p := range f.renderPages() {
			if res := f.serve(t, http.MethodGet, p, nil); res.Code != http.StatusOK {
				t.Fatalf("GET %s: %d\n%.500s", p, res.Code, res.Body)
			}
		}
		// The pages the extras are for show them.
		tenant := "/tenants/" + strconv.FormatInt(f.tenant, 10)
		doc := func(path string) *goquery.Document {
			d, err := goquery.NewDocumentFromReader(f.serve(t, http.MethodGet, path, nil).Body)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		if n := doc(tenant + "/webhooks/" + strconv.FormatInt(f.webhookID, 10)).Find("#deliveries tbody tr").Length(); n != 3 {
			t.Errorf("the webhook log lists %d deliveries, want 3", n)
		}
		if n := doc(tenant + "/members").Find(`tr[data-member^="member-"]`).Length(); n != 2 {
			t.Errorf("the members page lists %d seeded members, want 2", n)
		}
		// The week's chart (hourly rows) and the hour's (minute rows) agree with the seed.
		var minutes, hours int64
		for q, n := range map[string]*int64{`SELECT SUM(allowed) FROM usage_stats`: &minutes, `SELECT SUM(allowed) FROM usage_stats_hourly`: &hours} {
			if err := f.db.Gorm.Raw(q).Scan(n).Error; err != nil {
				t.Fatal(err)
			}
		}
		if minutes == 0 || hours != minutes {
			t.Errorf("seeded %d allowed per minute and %d per hour, want the same (and some)", minutes, hours)
		}
	})
}
