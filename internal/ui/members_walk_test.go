package ui_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// dashboardRoutes are the dashboard's registered routes (not the API's, the operations routes
// or static files), in registration order.
func dashboardRoutes(t *testing.T, e *env) []gin.RouteInfo {
	t.Helper()
	var out []gin.RouteInfo
	for _, ri := range e.app.Router.Routes() {
		switch {
		case api.IsAPIPath(ri.Path), strings.HasPrefix(ri.Path, "/static/"), strings.HasPrefix(ri.Path, "/.well-known/"),
			strings.HasPrefix(ri.Path, "/demo"), slices.Contains([]string{"/healthz", "/readyz", "/metrics"}, ri.Path):
			continue
		}
		out = append(out, ri)
	}
	if len(out) < 40 {
		t.Fatalf("only %d dashboard routes: %v", len(out), out)
	}
	return out
}

// walkTenant is a tenant with one object of every kind a dashboard route can name.
type walkTenant struct {
	tenants.Tenant
	ids map[string]string // route parameter -> an object of this tenant
}

func (e *env) walkTenant(t *testing.T, name string) walkTenant {
	t.Helper()
	ctx := context.Background()
	tn := e.tenant(name)
	// In shadow mode, so that its enforce confirmation page exists; with an override to edit.
	if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000, Mode: limiter.Shadow}, nil); err != nil {
		t.Fatal(err)
	}
	rate := 20.0
	if _, _, err := e.engine.PutOverride(ctx, tn.ID, "api", limiter.Override{Match: "alice", Rate: &rate}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.engine.Limit(ctx, tn.ID, limiter.Request{Name: "api", Key: "alice", Count: 1}); err != nil {
		t.Fatal(err)
	}
	// An open hold and an open lease, whose release confirmation pages exist.
	h, err := e.engine.Hold(ctx, tn.ID, []limiter.HoldLimit{{Name: "api", Key: "bob", Count: 1}}, 3_600_000)
	if err != nil || h.ID == "" {
		t.Fatalf("hold: %+v %v", h, err)
	}
	if _, _, err := e.engine.PutDefinition(ctx, tn.ID, "jobs", limiter.Definition{Kind: limiter.Concurrency, Rate: 2, LeaseTTL: 3_600_000}, nil); err != nil {
		t.Fatal(err)
	}
	lease := e.consume(tn, "jobs", "worker", 1)
	k, _, err := e.svc.CreateKey(ctx, tn.ID, tenants.KindSecret, "walk", "test")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := e.svc.CreateUser(ctx, "admin@"+name+".example", "admin-password-1", false, &tn.ID, "test", "")
	if err != nil {
		t.Fatal(err)
	}
	inv, _, err := e.svc.CreateInvite(ctx, &tn.ID, "invited@"+name+".example", tenants.RoleViewer, 0, "test")
	if err != nil {
		t.Fatal(err)
	}
	ep, _, err := e.app.Webhooks.CreateEndpoint(ctx, tn.ID, "https://hooks.example.com/"+name, []string{"key.created"})
	if err != nil {
		t.Fatal(err)
	}
	return walkTenant{tn, map[string]string{
		"tid": strconv.FormatInt(tn.ID, 10), "name": "api", "kid": k.ID, "uid": strconv.FormatInt(admin.ID, 10),
		"iid": strconv.FormatInt(inv.ID, 10), "id": strconv.FormatInt(ep.ID, 10), "did": "none", "hash": "none",
		"hid": h.ID, "lid": lease.LeaseID, "leaseName": "jobs",
	}}
}

// walkForm is a form that every dashboard action would accept from an admin: every field any
// handler reads, confirmed, so that only the role check stands between it and a change.
var walkForm = url.Values{
	"confirm": {"yes"}, "name": {"walked"}, "kind": {"token_bucket"}, "rate": {"5"}, "period": {"60000"},
	"label": {"walked"}, "email": {"walked@example.com"}, "role": {"admin"}, "disable": {"true"},
	"key": {"alice"}, "match": {"alice"}, "action": {"deny"}, "url": {"https://walked.example.com/"},
	"events": {"key.created"}, "origins": {"https://walked.example.com"}, "difficulty": {"60000"}, "suspend": {"true"},
}

// walkPath is route with its parameters replaced by the objects of ids, and the query a route
// needs to name its object (the override to edit). A lease is released on the page of its own
// limit, ids["leaseName"].
func walkPath(route string, ids map[string]string) string {
	parts := strings.Split(route, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, ":") {
			id := ids[p[1:]]
			if p == ":name" && strings.Contains(route, "/:lid/") {
				id = ids["leaseName"]
			}
			parts[i] = url.PathEscape(id)
		}
	}
	path := strings.Join(parts, "/")
	if route == "/tenants/:tid/limits/:name/overrides/edit" {
		path += "?match=alice"
	}
	return path
}

// snapshot is every row of every table but the ones a request may write without changing
// anything of a tenant: the audit log, sessions, the login limits' state (tenant 0), and the
// key last-used times.
func (e *env) snapshot(t *testing.T) string {
	t.Helper()
	var lines []string
	for _, table := range testkit.Tables(t, e.db) {
		switch table {
		case "audit_log", "admin_sessions", "sqlite_sequence":
			continue
		}
		for _, row := range testkit.Rows(t, e.db, table) {
			cells := make([]string, 0, len(row))
			for _, c := range row {
				cells = append(cells, c.Text)
			}
			if table == "limit_state" && cells[0] == "0" {
				continue // the login limits
			}
			lines = append(lines, table+": "+strings.Join(cells, "|"))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// outsideTenant are the POST routes outside /tenants/:tid that anyone may reach: what each does
// to a viewer is checked by its own expectation below.
var outsideTenant = map[string]int{
	"POST /login":            http.StatusUnauthorized, // the form again, for a wrong password: no tenant state
	"POST /setup":            http.StatusNotFound,
	"POST /invite":           http.StatusNotFound, // no live token
	"POST /reset":            http.StatusNotFound,
	"POST /account/password": http.StatusUnprocessableEntity, // the current password is required
}

// TestViewerChangesNothingOnAnyDashboardRoute walks every registered dashboard route as a viewer
// of tenant A: every POST below /tenants/:tid is 403, every operator route 404, the rest as
// listed in outsideTenant; every GET of a tenant page is 200 (a viewer reads everything), no
// other GET fails, and no table changes. On SQLite and PostgreSQL.
func TestViewerChangesNothingOnAnyDashboardRoute(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL), func(c *config.Config, _ *app.Options) { c.WebhookAllowPrivate = true })
		e.operator()
		a := e.walkTenant(t, "acme")
		e.walkTenant(t, "other")
		ctx := context.Background()
		if _, err := e.svc.CreateUser(ctx, "viewer@acme.example", "viewer-password-1", false, &a.ID, "test", ""); err != nil {
			t.Fatal(err)
		}
		v, _ := e.svc.UserByEmail(ctx, "viewer@acme.example")
		if err := e.svc.SetRole(ctx, &a.ID, v.ID, tenants.RoleViewer, &a.ID, "test"); err != nil {
			t.Fatal(err)
		}
		viewer := e.login("viewer@acme.example", "viewer-password-1")
		before := e.snapshot(t)
		posts := 0
		for _, ri := range dashboardRoutes(t, e) {
			if ri.Path == "/logout" {
				continue // ends the viewer's own session only; checked last
			}
			path := walkPath(ri.Path, a.ids)
			var res response
			if ri.Method == http.MethodGet {
				res = viewer.get(path)
				switch {
				case strings.HasPrefix(ri.Path, "/tenants/:tid/manage"):
					if res.StatusCode != http.StatusNotFound { // operators only
						t.Errorf("viewer GET %s: status %d, want 404", path, res.StatusCode)
					}
				case ri.Path == "/tenants/:tid": // the tenant's home is its limits page
					if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != tpath(a.Tenant, "/limits") {
						t.Errorf("viewer GET %s: status %d to %q, want 303 to its limits", path, res.StatusCode, res.Header.Get("Location"))
					}
				case changeOnlyPages[ri.Path]:
					if res.StatusCode != http.StatusForbidden {
						t.Errorf("viewer GET %s: status %d, want 403 (the page only leads to a change)", path, res.StatusCode)
					}
				case strings.HasPrefix(ri.Path, "/tenants/:tid/"):
					if res.StatusCode != http.StatusOK {
						t.Errorf("viewer GET %s: status %d, want 200", path, res.StatusCode)
					}
					offersNoChange(t, viewer, path, res)
				case res.StatusCode >= 500:
					t.Errorf("GET %s: status %d", path, res.StatusCode)
				}
				continue
			}
			posts++
			form := walkForm
			if ri.Path == "/login" {
				form = url.Values{"email": {"viewer@acme.example"}, "password": {"wrong-password-1"}}
			}
			res = viewer.post(path, form)
			want, listed := outsideTenant[ri.Method+" "+ri.Path]
			switch {
			case strings.HasPrefix(ri.Path, "/tenants/:tid/manage"), strings.HasPrefix(ri.Path, "/users"), ri.Path == "/tenants":
				want = http.StatusNotFound // operators only: the page does not exist for a member
			case strings.HasPrefix(ri.Path, "/tenants/:tid"):
				want = http.StatusForbidden
			case !listed:
				t.Errorf("%s %s: a POST route outside /tenants/:tid that this walk does not know; add it to outsideTenant", ri.Method, ri.Path)
				continue
			}
			if res.StatusCode != want {
				t.Errorf("viewer %s %s: status %d, want %d", ri.Method, path, res.StatusCode, want)
			}
			if after := e.snapshot(t); after != before {
				t.Fatalf("viewer %s %s changed the database: %s", ri.Method, path, changed(before, after))
			}
		}
		if posts < 30 {
			t.Fatalf("only %d POST routes walked", posts)
		}
		if r := viewer.get(tpath(a.Tenant, "/limits")); r.StatusCode != http.StatusOK || r.doc(t).Find("#viewer-banner").Length() != 1 {
			t.Fatalf("the viewer's limits page: status %d, without the viewer banner", r.StatusCode)
		}
		if r := e.login("admin@acme.example", "admin-password-1").get(tpath(a.Tenant, "/limits")); r.doc(t).Find("#viewer-banner").Length() != 0 {
			t.Fatal("an admin is told they are a viewer")
		}
	})
}

// changeOnlyPages are the dashboard's GET routes whose only use is a change (a form to fill in, a
// confirmation): a user who may not change the tenant gets 403 for them.
var changeOnlyPages = map[string]bool{
	"/tenants/:tid/new-limit":                        true,
	"/tenants/:tid/limits/:name/edit":                true,
	"/tenants/:tid/limits/:name/reset-all":           true,
	"/tenants/:tid/limits/:name/delete":              true,
	"/tenants/:tid/limits/:name/enforce":             true,
	"/tenants/:tid/limits/:name/overrides/new":       true,
	"/tenants/:tid/limits/:name/overrides/edit":      true,
	"/tenants/:tid/limits/:name/holds/:hid/release":  true,
	"/tenants/:tid/limits/:name/leases/:lid/release": true,
}

// offersNoChange fails the test when the page res (GET path as reader, who may not change the
// tenant) offers a change anyway: a form that posts anywhere but /logout, an htmx post, or a link
// below /tenants/ that answers reader 403.
func offersNoChange(t *testing.T, reader *client, path string, res response) {
	t.Helper()
	if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		return
	}
	doc := res.doc(t)
	doc.Find("form").Each(func(_ int, f *goquery.Selection) {
		method, _ := f.Attr("method")
		if action, _ := f.Attr("action"); strings.EqualFold(method, http.MethodPost) && action != "/logout" {
			t.Errorf("GET %s offers a user who may change nothing the form that posts to %s", path, action)
		}
	})
	doc.Find("[hx-post], [hx-put], [hx-delete], [hx-patch]").Each(func(_ int, el *goquery.Selection) {
		t.Errorf("GET %s offers a user who may change nothing an htmx change: %s", path, goquery.NodeName(el))
	})
	doc.Find("a[href^='/tenants/']").Each(func(_ int, a *goquery.Selection) {
		href, _ := a.Attr("href")
		if r := reader.get(href); r.StatusCode == http.StatusForbidden {
			t.Errorf("GET %s links a user who may change nothing to %s, which refuses them", path, href)
		}
	})
}

// walkOfferingNoChange reads every page of tenant a's dashboard (the operator's Manage pages
// aside) as c, who (named by who) may change nothing in it: each page that leads only to a change
// is 403, every other one 200 offering no change (offersNoChange); with posts, every post is 403
// too. It fails when fewer than ten pages were read.
func walkOfferingNoChange(t *testing.T, e *env, c *client, a walkTenant, who string, posts bool) {
	t.Helper()
	pages := 0
	for _, ri := range dashboardRoutes(t, e) {
		if !strings.HasPrefix(ri.Path, "/tenants/:tid/") || strings.HasPrefix(ri.Path, "/tenants/:tid/manage") {
			continue
		}
		path := walkPath(ri.Path, a.ids)
		if ri.Method != http.MethodGet {
			if !posts {
				continue
			}
			if res := c.post(path, walkForm); res.StatusCode != http.StatusForbidden {
				t.Errorf("%s: POST %s: status %d, want 403", who, path, res.StatusCode)
			}
			continue
		}
		res := c.get(path)
		want := http.StatusOK
		if changeOnlyPages[ri.Path] {
			want = http.StatusForbidden
		}
		if res.StatusCode != want {
			t.Errorf("%s: GET %s: status %d, want %d", who, path, res.StatusCode, want)
			continue
		}
		if want == http.StatusOK {
			pages++
			offersNoChange(t, c, path, res)
		}
	}
	if pages < 10 {
		t.Fatalf("%s: only %d pages read", who, pages)
	}
}

// TestASuspendedTenantsMembersAreOfferedNoChange: a suspended tenant's admin reads every page of
// it (the pages that only lead to a change are 403) and is offered no change on any, while an
// operator still is. On SQLite.
func TestASuspendedTenantsMembersAreOfferedNoChange(t *testing.T) {
	e := newEnv(t, func(c *config.Config, _ *app.Options) { c.WebhookAllowPrivate = true })
	e.operator()
	a := e.walkTenant(t, "acme")
	if err := e.svc.SetSuspended(context.Background(), a.ID, true, "test"); err != nil {
		t.Fatal(err)
	}
	walkOfferingNoChange(t, e, e.login("admin@acme.example", "admin-password-1"), a, "the suspended tenant's admin", false)
	page := e.login(opEmail, opPassword).get(walkPath("/tenants/:tid/limits/:name", a.ids)).doc(t)
	if page.Find("#edit-limit").Length() != 1 || page.Find("form[method=post]").Length() < 2 {
		t.Fatal("an operator is offered no change on a suspended tenant's limit page")
	}
}

// TestMemberOfOneTenantReachesNothingOfAnother walks every dashboard route under /tenants/:tid
// as an admin of A with B's ID and B's objects: every one is 404, GET or POST, and nothing
// changes. On SQLite and PostgreSQL.
func TestMemberOfOneTenantReachesNothingOfAnother(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL), func(c *config.Config, _ *app.Options) { c.WebhookAllowPrivate = true })
		e.operator()
		e.walkTenant(t, "acme")
		b := e.walkTenant(t, "other")
		admin := e.login("admin@acme.example", "admin-password-1")
		before := e.snapshot(t)
		n := 0
		for _, ri := range dashboardRoutes(t, e) {
			if !strings.HasPrefix(ri.Path, "/tenants/:tid") {
				continue
			}
			n++
			path := walkPath(ri.Path, b.ids)
			var res response
			if ri.Method == http.MethodGet {
				res = admin.get(path)
			} else {
				res = admin.post(path, walkForm)
			}
			if res.StatusCode != http.StatusNotFound {
				t.Errorf("admin of acme %s %s (other's): status %d, want 404", ri.Method, path, res.StatusCode)
			}
		}
		if n < 40 {
			t.Fatalf("only %d tenant routes walked", n)
		}
		if after := e.snapshot(t); after != before {
			t.Fatalf("the walk changed the database: %s", changed(before, after))
		}
	})
}

// changed lists the rows of one snapshot that the other lacks.
func changed(before, after string) string {
	b, a := strings.Split(before, "\n"), strings.Split(after, "\n")
	var out []string
	for _, l := range b {
		if !slices.Contains(a, l) {
			out = append(out, "\n- "+l)
		}
	}
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, "\n+ "+l)
		}
	}
	return strings.Join(out, "")
}

// TestATenantBeingDeletedIsOfferedToNoOneForChange: once a tenant's deletion has begun (here cut
// short, so that it stays marked), even an operator is offered no change in its dashboard and
// is refused one (403): what a change made would be deleted with the tenant, its audit entry too.
func TestATenantBeingDeletedIsOfferedToNoOneForChange(t *testing.T) {
	e := newEnv(t, func(c *config.Config, _ *app.Options) { c.WebhookAllowPrivate = true })
	e.operator()
	a := e.walkTenant(t, "acme")
	_, invitation, err := e.svc.CreateInvite(context.Background(), &a.ID, "late@acme.example", tenants.RoleViewer, 0, "test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.svc.DeleteTenant(ctx, a.ID, "test") }()
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := e.svc.Tenant(context.Background(), a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Deleting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("waited a minute for the deletion to mark the tenant as being deleted")
		}
		time.Sleep(5 * time.Millisecond) // the poll's interval, not a guess at the ordering
	}
	cancel() // the deletion stops at its wait for the key caches, the tenant marked
	if err := <-done; err == nil {
		t.Fatal("the deletion cancelled during its wait finished")
	}
	op := e.login(opEmail, opPassword)
	walkOfferingNoChange(t, e, op, a, "an operator in a tenant being deleted", true)
	// An invitation made before opens on a page that says the tenant takes no members, plainly
	// (a dead link's page, 404).
	guest := e.client()
	page := guest.get("/invite?token=" + url.QueryEscape(invitation))
	if page.StatusCode != http.StatusNotFound || !strings.Contains(page.body, "no longer accepts members") || page.doc(t).Find("form button[type=submit]:not([disabled])").Length() != 0 {
		t.Errorf("an invitation to the tenant being deleted: status %d\n%s\nwant a page saying it no longer accepts members, and no form to send", page.StatusCode, page.body)
	}
	if res := guest.post("/invite", url.Values{"token": {invitation}, "password": {"late-password-1"}, "confirm": {"late-password-1"}}); res.StatusCode != http.StatusNotFound {
		t.Errorf("accepting an invitation to the tenant being deleted: status %d, want 404", res.StatusCode)
	}
	// Its pages say so, and its Manage page offers only to delete it again, which finishes it.
	if limits := op.get(walkPath("/tenants/:tid/limits", a.ids)).doc(t); limits.Find("#deleting-banner").Length() != 1 {
		t.Error("a page of the tenant being deleted shows no banner saying so")
	}
	if list := op.get("/tenants").doc(t); !strings.Contains(list.Find(`tr[data-tenant="acme"]`).Text(), "being deleted") {
		t.Error("the tenants list does not say the tenant is being deleted")
	}
	manage := op.get(fmt.Sprintf("/tenants/%d/manage", a.ID)).doc(t)
	for _, gone := range []string{"#rename-tenant", "#resume-tenant", "#suspend-tenant", "form[action$='/manage/plan']"} {
		if manage.Find(gone).Length() != 0 {
			t.Errorf("the Manage page of a tenant being deleted offers %s", gone)
		}
	}
	if manage.Find("#delete-tenant").Length() != 1 || manage.Find("#deletion-unfinished").Length() != 1 {
		t.Error("the Manage page of a tenant being deleted does not offer to finish the deletion")
	}
	// Deleting it again from the page while another deletion runs (started just before, so it
	// most likely ends first): whichever ends second finds it gone, which is what was asked.
	other := make(chan error, 1)
	go func() { other <- e.svc.DeleteTenant(context.Background(), a.ID, "test") }()
	res := op.post(fmt.Sprintf("/tenants/%d/manage/delete", a.ID), url.Values{"confirm": {"acme"}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("deleting the tenant again beside another deletion of it: status %d, want 303", res.StatusCode)
	}
	if err := <-other; err != nil && !errors.Is(err, tenants.ErrNotFound) {
		t.Fatalf("the other deletion: %v", err)
	}
	if _, err := e.svc.Tenant(context.Background(), a.ID); !errors.Is(err, tenants.ErrNotFound) {
		t.Fatalf("the tenant after its deletion was finished: %v, want not found", err)
	}
}
