package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// The hostile walk: every dashboard route that changes something, as a tenant admin and as an
// operator, with bodies no form sends. The promise is "never a 500": whatever a client
// sends, the dashboard answers with a page that says what is wrong (an inline error, 400, 403,
// 404), never with an internal error or a panic.

// hostileBody is one request body of the walk.
type hostileBody struct {
	name        string
	contentType string // "" sends no Content-Type header
	body        string
}

func formBody(name string, v url.Values) hostileBody {
	return hostileBody{name, "application/x-www-form-urlencoded", v.Encode()}
}

// hostileValues are what the walk puts into fields: overlong, NUL and invalid UTF-8, and numbers
// no form field accepts.
var hostileValues = []struct{ name, value string }{
	{"10,000 letters", strings.Repeat("x", 10_000)},
	{"10,000 digits", strings.Repeat("9", 10_000)},
	{"NUL", "walked\x00"},
	{"invalid UTF-8", "\xff\xfe\xfd"},
	{"negative", "-1"},
	{"huge", "99999999999999999999999"},
	{"overflowing float", "1e309"},
	{"NaN", "NaN"},
}

// unknownIDs replace one path parameter at a time: ids of nothing, of the wrong type, out of
// every integer's range, and bytes no id has.
var unknownIDs = []string{"999999999", "0", "-1", "9223372036854775808", "1e309", "NaN", "no-such-thing",
	"\x00", "\xff\xfe", strings.Repeat("9", 10_000)}

// hostileBodies are the bodies sent to one route: fields names every field of every dashboard
// form, own the fields of this route's forms, baseline a valid form for the route (what an
// admin's browser would send). The last one may perform the action: it comes last, so the
// hostile ones reach the route's objects as they were.
func hostileBodies(fields, own []string, baseline url.Values) []hostileBody {
	every := func(v ...string) url.Values {
		out := url.Values{}
		for _, f := range fields {
			out[f] = v
		}
		return out
	}
	bodies := []hostileBody{
		{"no body, no content type", "", ""},
		{"empty body", "application/x-www-form-urlencoded", ""},
		formBody("every field empty", every("")),
	}
	for _, h := range hostileValues {
		bodies = append(bodies, formBody("every field "+h.name, every(h.value)))
	}
	hostileTwice := url.Values{}
	for _, f := range fields {
		hostileTwice[f] = append([]string{"", "-1", "NaN"}, baseline[f]...)
	}
	bodies = append(bodies,
		formBody("every field hostile, then valid", hostileTwice),
		hostileBody{"malformed percent-encoding", "application/x-www-form-urlencoded", "%zz=%&name=%e&confirm=%Y&" + baseline.Encode() + "&%"},
		hostileBody{"raw NUL and invalid UTF-8", "application/x-www-form-urlencoded", "name=\x00\xff&confirm=\xfe&" + baseline.Encode()},
		hostileBody{"a JSON body", "application/json", jsonOf(baseline)},
		hostileBody{"a text/plain body", "text/plain", baseline.Encode()},
		hostileBody{"multipart without a boundary", "multipart/form-data", baseline.Encode()},
		hostileBody{"multipart, truncated", "multipart/form-data; boundary=walk", "--walk\r\nContent-Disposition: form-data; name=\"confirm\"\r\n\r\nyes"},
		multipartBody("multipart, every field invalid UTF-8", every("\xff\xfe")),
	)
	for _, f := range own {
		for _, h := range hostileValues {
			v := maps.Clone(baseline)
			v[f] = []string{h.value}
			bodies = append(bodies, formBody(f+" "+h.name, v))
		}
		v := maps.Clone(baseline)
		delete(v, f)
		bodies = append(bodies, formBody(f+" missing", v))
	}
	validTwice := url.Values{}
	for f, vs := range baseline {
		validTwice[f] = append(slices.Clone(vs), "", "\x00", "-1")
	}
	return append(bodies, formBody("every field valid, then hostile", validTwice))
}

func jsonOf(v url.Values) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func multipartBody(name string, v url.Values) hostileBody {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, f := range slices.Sorted(maps.Keys(v)) {
		for _, x := range v[f] {
			_ = w.WriteField(f, x)
		}
	}
	_ = w.Close()
	return hostileBody{name, w.FormDataContentType(), buf.String()}
}

// send sends one request and returns its response, or the transport's error (a connection the
// server closed unanswered).
func (c *client) send(method, path string, b hostileBody, headers ...string) (response, error) {
	req, err := http.NewRequest(method, c.e.url+path, strings.NewReader(b.body))
	if err != nil {
		return response{}, err
	}
	if b.contentType != "" {
		req.Header.Set("Content-Type", b.contentType)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := c.c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return response{res, string(body)}, err
}

// fork is a client with c's session cookie and a jar of its own, for the routes that log in or
// out: whatever they do to the cookie stays with the fork.
func (c *client) fork() *client {
	f := c.e.client()
	u, _ := url.Parse(c.e.url)
	f.c.Jar.SetCookies(u, c.c.Jar.Cookies(u))
	return f
}

// walkObjects creates in tn a fresh object for every parameter of route, so that what the
// requests to one route did to its objects (a limit deleted, a key revoked) cannot keep another
// route's requests from reaching its handler's code.
func (e *env) walkObjects(t *testing.T, tn tenants.Tenant, route string, n int) map[string]string {
	t.Helper()
	ctx := context.Background()
	suffix := strconv.Itoa(n)
	ids := map[string]string{"tid": strconv.FormatInt(tn.ID, 10)}
	has := func(p string) bool { return strings.Contains(route+"/", "/:"+p+"/") }
	if has("name") || has("hid") || has("lid") {
		api, jobs := "api-"+suffix, "jobs-"+suffix
		// In shadow mode (its enforce confirmation exists), with an override, a used key, a hold
		// and a lease.
		if _, _, err := e.engine.PutDefinition(ctx, tn.ID, api, limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 60_000, Mode: limiter.Shadow}, nil); err != nil {
			t.Fatal(err)
		}
		rate := 20.0
		if _, _, err := e.engine.PutOverride(ctx, tn.ID, api, limiter.Override{Match: "alice", Rate: &rate}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := e.engine.Limit(ctx, tn.ID, limiter.Request{Name: api, Key: "alice", Count: 1}); err != nil {
			t.Fatal(err)
		}
		h, err := e.engine.Hold(ctx, tn.ID, []limiter.HoldLimit{{Name: api, Key: "bob", Count: 1}}, 3_600_000)
		if err != nil || h.ID == "" {
			t.Fatalf("hold: %+v %v", h, err)
		}
		if _, _, err := e.engine.PutDefinition(ctx, tn.ID, jobs, limiter.Definition{Kind: limiter.Concurrency, Rate: 2, LeaseTTL: 3_600_000}, nil); err != nil {
			t.Fatal(err)
		}
		lease := e.consume(tn, jobs, "worker", 1)
		ids["name"], ids["hid"], ids["lid"], ids["leaseName"] = api, h.ID, lease.LeaseID, jobs
	}
	if has("kid") {
		k, _, err := e.svc.CreateKey(ctx, tn.ID, tenants.KindSecret, "walk", "test")
		if err != nil {
			t.Fatal(err)
		}
		ids["kid"] = k.ID
	}
	if has("uid") {
		u, err := e.svc.CreateUser(ctx, "member-"+suffix+"@"+tn.Name+".example", "member-password-1", false, &tn.ID, "test", "")
		if err != nil {
			t.Fatal(err)
		}
		ids["uid"] = strconv.FormatInt(u.ID, 10)
	}
	if has("iid") {
		scope, role := &tn.ID, tenants.RoleViewer
		if strings.HasPrefix(route, "/users") { // the operators' page revokes invites to no tenant
			scope, role = nil, tenants.RoleOperator
		}
		inv, _, err := e.svc.CreateInvite(ctx, scope, "invited-"+suffix+"@"+tn.Name+".example", role, 0, "test")
		if err != nil {
			t.Fatal(err)
		}
		ids["iid"] = strconv.FormatInt(inv.ID, 10)
	}
	if has("id") || has("did") {
		ep, _, err := e.app.Webhooks.CreateEndpoint(ctx, tn.ID, "https://hooks.example.com/"+suffix, []string{"key.created"})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.app.Webhooks.SendTest(ctx, tn.ID, ep.ID); err != nil {
			t.Fatal(err)
		}
		ds, err := e.app.Webhooks.Deliveries(ctx, tn.ID, ep.ID, 1)
		if err != nil || len(ds) != 1 {
			t.Fatalf("deliveries: %+v %v", ds, err)
		}
		ids["id"], ids["did"] = strconv.FormatInt(ep.ID, 10), ds[0].ID
	}
	if has("hash") {
		sessionID := "walk-session-" + suffix + "-0123456789abcdef"
		authorize(t, e.app.Captcha, tn, sessionID)
		sessions, err := e.app.Captcha.ListSessions(ctx, tn.ID, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sessions {
			if s.SessionHash != "" {
				ids["hash"] = s.SessionHash
			}
		}
	}
	return ids
}

// liveTokens gives the public one-time-link routes a live link of tn, so that their forms
// reach past "this link is invalid".
func (e *env) liveTokens(t *testing.T, tn tenants.Tenant, n int) url.Values {
	t.Helper()
	ctx := context.Background()
	suffix := strconv.Itoa(n)
	_, invite, err := e.svc.CreateInvite(ctx, &tn.ID, "link-"+suffix+"@"+tn.Name+".example", tenants.RoleViewer, 0, "test")
	if err != nil {
		t.Fatal(err)
	}
	u, err := e.svc.CreateUser(ctx, "reset-"+suffix+"@"+tn.Name+".example", "reset-password-1", false, &tn.ID, "test", "")
	if err != nil {
		t.Fatal(err)
	}
	reset, err := e.svc.CreateResetLink(ctx, u.ID, time.Hour, "test")
	if err != nil {
		t.Fatal(err)
	}
	return url.Values{"/invite": {invite}, "/reset": {reset}}
}

// routeOf is the route pattern among patterns that path matches with the most literal segments.
func routeOf(path string, patterns []string) string {
	got, best := "", -1
	segs := strings.Split(path, "/")
	for _, p := range patterns {
		ps := strings.Split(p, "/")
		if len(ps) != len(segs) {
			continue
		}
		literal := 0
		for i, s := range ps {
			switch {
			case strings.HasPrefix(s, ":"):
			case s == segs[i]:
				literal++
			default:
				literal = -1
			}
			if literal < 0 {
				break
			}
		}
		if literal > best {
			got, best = p, literal
		}
	}
	return got
}

// dashboardForms reads every POST form of the pages at paths as c sees them: the fields each
// route's forms send, with the values the page fills in (a checkbox as ticked, a select's
// chosen option).
func dashboardForms(t *testing.T, c *client, paths, patterns []string) map[string]url.Values {
	t.Helper()
	forms := map[string]url.Values{}
	for _, p := range paths {
		res := c.get(p)
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
			continue
		}
		res.doc(t).Find("form").Each(func(_ int, f *goquery.Selection) {
			if m, _ := f.Attr("method"); !strings.EqualFold(m, "post") {
				return
			}
			action, _ := f.Attr("action")
			u, err := url.Parse(action)
			if err != nil {
				t.Fatalf("form action %q on %s: %v", action, p, err)
			}
			route := routeOf(u.Path, patterns)
			if route == "" {
				t.Fatalf("a form on %s posts to %q, which is no dashboard route", p, action)
			}
			if forms[route] == nil {
				forms[route] = url.Values{}
			}
			fields := forms[route]
			f.Find("input[name], select[name], textarea[name]").Each(func(_ int, in *goquery.Selection) {
				name, _ := in.Attr("name")
				var v string
				switch {
				case goquery.NodeName(in) == "select":
					opt := in.Find("option[selected]").First()
					if opt.Length() == 0 {
						opt = in.Find("option").First()
					}
					v, _ = opt.Attr("value")
				case goquery.NodeName(in) == "textarea":
					v = in.Text()
				default:
					var ok bool
					if v, ok = in.Attr("value"); !ok && (in.AttrOr("type", "") == "checkbox" || in.AttrOr("type", "") == "radio") {
						v = "on"
					}
				}
				if !slices.Contains(fields[name], v) {
					fields.Add(name, v)
				}
			})
		})
	}
	return forms
}

// walkBaseline is a valid form for a route whose forms send scraped: the values its page fills
// in, and walkForm's for the fields a user types into (empty on the page).
func walkBaseline(scraped url.Values) url.Values {
	out := maps.Clone(walkForm)
	for f, vs := range scraped {
		vs = slices.DeleteFunc(slices.Clone(vs), func(v string) bool { return v == "" })
		switch {
		case len(vs) > 0:
			out[f] = vs
		case out[f] == nil:
			out[f] = []string{""}
		}
	}
	return out
}

// operatorOnly are the routes that exist for operators only: a member gets the 404 page.
func operatorOnly(route string) bool {
	return route == "/tenants" || strings.HasPrefix(route, "/users") || strings.HasPrefix(route, "/tenants/:tid/manage")
}

// hostileWalk sends the walk's requests and checks their answers.
type hostileWalk struct {
	e        *env
	fields   []string              // every field of every dashboard form
	forms    map[string]url.Values // route -> its forms' fields, as the pages fill them in
	requests int
	reached  map[string]int // who and route -> answers neither 403 nor 404: the handler's own
}

var (
	sameOrigin  = []string{"Sec-Fetch-Site", "same-origin"}
	crossOrigin = []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}
)

// walk sends route ri (at path, its parameters filled from ids) every hostile body, then a
// valid form with each parameter in turn an unknown id, and once the valid form from another
// origin. extra are values the valid form needs beyond what its page fills in (a live token).
// No answer may be 5xx (or missing); the cross-origin one must be 403; want, when not 0, is the
// status every same-origin request must get.
func (w *hostileWalk) walk(t *testing.T, who string, c *client, ri gin.RouteInfo, ids map[string]string, extra url.Values, want int) {
	t.Helper()
	baseline := walkBaseline(w.forms[ri.Path])
	maps.Copy(baseline, extra)
	form, ok := w.forms[ri.Path]
	if !ok { // no page posts to the route (the test says so): walkForm's fields, one by one
		form = walkForm
	}
	own := slices.Sorted(maps.Keys(form)) // a form of a button alone has none

	check := func(what, path string, res response, err error, want int) {
		t.Helper()
		w.requests++
		switch {
		case err != nil:
			t.Errorf("%s %s %s (%s): no answer: %v", who, ri.Method, ri.Path, what, err)
		case res.StatusCode >= 500:
			t.Errorf("%s %s %s (%s): status %d", who, ri.Method, cut(path), what, res.StatusCode)
		case want != 0 && res.StatusCode != want:
			t.Errorf("%s %s %s (%s): status %d, want %d", who, ri.Method, cut(path), what, res.StatusCode, want)
		case res.StatusCode != http.StatusForbidden && res.StatusCode != http.StatusNotFound:
			w.reached[who+" "+ri.Path]++
		}
	}
	path := walkPath(ri.Path, ids)
	res, err := c.send(ri.Method, path, formBody("valid", baseline), crossOrigin...)
	check("valid form, from another origin", path, res, err, http.StatusForbidden)
	for _, b := range hostileBodies(w.fields, own, baseline) {
		w.beforeRequest(t, ri)
		res, err := c.send(ri.Method, path, b, sameOrigin...)
		check(b.name, path, res, err, want)
	}
	for _, p := range strings.Split(ri.Path, "/") {
		if !strings.HasPrefix(p, ":") {
			continue
		}
		for _, id := range unknownIDs {
			unknown := maps.Clone(ids)
			unknown[p[1:]] = id
			if p == ":name" {
				unknown["leaseName"] = id // the name of a lease's page (walkPath)
			}
			path := walkPath(ri.Path, unknown)
			res, err := c.send(ri.Method, path, formBody("valid", baseline), sameOrigin...)
			check(fmt.Sprintf("valid form, %s=%q", p, cut(id)), path, res, err, want)
		}
	}
}

// beforeRequest empties the login limits before each login attempt, so that every body reaches
// the password check instead of the 429 the walk's failures would soon earn.
func (w *hostileWalk) beforeRequest(t *testing.T, ri gin.RouteInfo) {
	t.Helper()
	if ri.Path != "/login" {
		return
	}
	for _, name := range []string{"dashboard.login.account_ip", "dashboard.login.ip", "dashboard.login.account"} {
		if err := w.e.engine.Reset(context.Background(), 0, name, nil, nil); err != nil && !errors.Is(err, limiter.ErrLimitNotFound) {
			t.Fatal(err)
		}
	}
}

// TestHostileFormsNeverCauseAServerError walks every dashboard route that changes something (every
// method but GET and HEAD), as a tenant admin and as an operator, on SQLite and PostgreSQL, with
// hostile bodies (hostileBodies: none, empty, every field empty, overlong, NUL, invalid UTF-8,
// negative, huge and NaN numbers, duplicated fields, malformed encodings, the wrong content type,
// and each field of the route's own forms made hostile or left out of an otherwise valid form),
// with each path parameter in turn an id of nothing (unknownIDs), and once from another origin.
// The same-origin requests reach the handlers, which must never answer 5xx nor panic (the log
// must hold no error: a recovered panic and every 500 log one); an admin gets 404 from every
// operator route whatever the body; every cross-origin request is 403. Before any user exists,
// the setup form gets the same bodies with its live token.
func TestHostileFormsNeverCauseAServerError(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		log := &testkit.SyncBuffer{}
		e := newEnv(t, onDatabase(dbURL), func(c *config.Config, o *app.Options) {
			c.WebhookAllowPrivate = true
			o.Stdout = log
		})
		ctx := context.Background()
		var patterns []string
		var writes []gin.RouteInfo
		for _, ri := range dashboardRoutes(t, e) {
			patterns = append(patterns, ri.Path)
			if ri.Method != http.MethodGet && ri.Method != http.MethodHead {
				writes = append(writes, ri)
			}
		}
		if len(writes) < 40 {
			t.Fatalf("only %d routes that change something: %v", len(writes), writes)
		}
		// /logout last: it ends the session the walk's other requests use.
		slices.SortStableFunc(writes, func(a, b gin.RouteInfo) int {
			return strings.Compare(strconv.FormatBool(a.Path == "/logout"), strconv.FormatBool(b.Path == "/logout"))
		})

		// First start: no user exists and the setup link is live. No body carries a valid
		// password, so it stays live for every body; from the moment a user exists it is dead
		// (404), which is what the users' walks below find.
		setup, err := e.ui.Bootstrap(ctx, "", "")
		if err != nil || setup == "" {
			t.Fatalf("Bootstrap = %q, %v", setup, err)
		}
		visitor := e.client()
		forms := dashboardForms(t, visitor, []string{setup, "/login"}, patterns)
		first := &hostileWalk{e: e, reached: map[string]int{}, forms: forms, fields: walkFields(forms)}
		for _, ri := range writes {
			if ri.Path == "/setup" {
				first.walk(t, "first visitor", visitor, ri, nil, url.Values{"token": {strings.TrimPrefix(setup, "/setup?token=")}}, 0)
			}
		}
		if first.reached["first visitor /setup"] == 0 {
			t.Error("the first visitor's setup form: every answer was 403 or 404")
		}

		e.operator()
		acme, other := e.walkTenant(t, "acme"), e.walkTenant(t, "other")
		roles := []struct {
			name, password string
			c              *client
			tn             tenants.Tenant
		}{
			// Both log in before the walk's failed logins spend the login limits.
			{"tenant admin", "admin-password-1", e.login("admin@acme.example", "admin-password-1"), acme.Tenant},
			{"operator", opPassword, e.login(opEmail, opPassword), other.Tenant},
		}
		// The operator's view of every page, with an object for each parameter, names the fields
		// of every form.
		seen := e.walkObjects(t, other.Tenant, "/:name/:hid/:lid/:kid/:uid/:iid/:id/:did/:hash", 0)
		e.walkObjects(t, other.Tenant, "/users/:iid", -1) // an operator invite, on the users page
		live := e.liveTokens(t, other.Tenant, 0)
		pages := []string{"/invite?token=" + url.QueryEscape(live.Get("/invite")), "/reset?token=" + url.QueryEscape(live.Get("/reset"))}
		for _, ri := range dashboardRoutes(t, e) {
			if ri.Method == http.MethodGet {
				pages = append(pages, walkPath(ri.Path, seen))
			}
		}
		maps.Copy(forms, dashboardForms(t, roles[1].c, pages, patterns))
		for _, ri := range writes {
			if _, ok := forms[ri.Path]; !ok {
				t.Errorf("no page has a form that posts to %s: the walk sends it walkForm's fields only", ri.Path)
			}
		}
		w := &hostileWalk{e: e, reached: map[string]int{}, forms: forms, fields: walkFields(forms)}
		n := 0
		for _, role := range roles {
			t.Run(role.name, func(t *testing.T) {
				for _, ri := range writes {
					n++
					ids := e.walkObjects(t, role.tn, ri.Path, n)
					extra := url.Values{}
					switch ri.Path {
					case "/invite", "/reset":
						extra.Set("token", e.liveTokens(t, role.tn, n).Get(ri.Path))
					case "/account/password":
						extra.Set("current", role.password)
					}
					want := 0
					if role.name == "tenant admin" && operatorOnly(ri.Path) {
						want = http.StatusNotFound
					}
					c := role.c
					switch ri.Path {
					case "/login", "/setup", "/invite", "/reset":
						c = c.fork() // what they do to the session stays with the fork
					}
					w.walk(t, role.name, c, ri, ids, extra, want)
				}
				// A route whose every answer was 403 or 404 never ran its own code (a broken
				// fixture, a stale form): the walk reached every handler the role may use.
				for _, ri := range writes {
					mayUse := role.name == "operator" || !operatorOnly(ri.Path)
					if mayUse && ri.Path != "/setup" && w.reached[role.name+" "+ri.Path] == 0 {
						t.Errorf("%s %s %s: every answer was 403 or 404", role.name, ri.Method, ri.Path)
					}
				}
			})
		}
		for _, line := range strings.Split(log.String(), "\n") {
			if strings.Contains(line, "msg=panic") || strings.Contains(line, "level=ERROR") {
				t.Errorf("logged: %s", cut(line))
			}
		}
		t.Logf("%d routes that change something (%d roles), %d fields, %d requests", len(writes), len(roles), len(w.fields), first.requests+w.requests)
	})
}

// walkFields are the fields the walk's every-field bodies fill: every field of forms and of
// walkForm, and the password fields.
func walkFields(forms map[string]url.Values) []string {
	fields := []string{"password", "current", "confirm", "token", "next"}
	fields = append(fields, slices.Collect(maps.Keys(walkForm))...)
	for _, form := range forms {
		fields = append(fields, slices.Collect(maps.Keys(form))...)
	}
	slices.Sort(fields)
	return slices.Compact(fields)
}

// cut shortens what a failure shows of an overlong value.
func cut(s string) string {
	if len(s) > 120 {
		return fmt.Sprintf("%s…(%d bytes)", s[:120], len(s))
	}
	return s
}

// Query parameters that PostgreSQL cannot compare (a NUL byte, invalid UTF-8) in the dashboard's
// filters and page links are no match and the first page, never a 500.
func TestFiltersPostgreSQLCannotCompareAreNoMatch(t *testing.T) {
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		e := newEnv(t, onDatabase(url))
		e.operator()
		acme := e.tenant("acme")
		if _, _, err := e.engine.PutDefinition(context.Background(), acme.ID, "api", limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 1000}, nil); err != nil {
			t.Fatal(err)
		}
		c := e.login(opEmail, opPassword)
		for _, path := range []string{
			"/audit?actor=%00", "/audit?action=%FF",
			tpath(acme, "/audit?actor=a%00b"), tpath(acme, "/audit?action=%C3%28"),
			tpath(acme, "/limits/api?overrides_after=%00"), tpath(acme, "/limits/api?overrides_after=%FF"),
		} {
			wantStatus(t, c.get(path), http.StatusOK)
		}
	})
}
