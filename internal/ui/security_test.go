package ui_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
	"github.com/sluice-dev/sluice/internal/ui"
)

func TestCrossOriginPostIsRefused(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	c := e.login(opEmail, opPassword)
	keysBefore := func() int {
		ks, err := e.svc.ListKeys(context.Background(), tn.ID)
		if err != nil {
			t.Fatal(err)
		}
		return len(ks)
	}
	form := url.Values{"label": {"x"}, "kind": {"secret"}}
	for _, h := range [][]string{
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"}, // a sibling subdomain is another origin too
		{"Origin", "https://evil.example"},
		// Our host over the other scheme, from a browser without Fetch Metadata: a page there is
		// another origin (CrossOriginProtection alone compares only the host).
		{"Origin", strings.Replace(e.url, "http://", "https://", 1)},
	} {
		res := c.post(tpath(tn, "/keys"), form, h...)
		wantStatus(t, res, http.StatusForbidden)
	}
	if n := keysBefore(); n != 0 {
		t.Fatalf("a cross-origin request created %d keys", n)
	}
	// Logging in and out are state changes too (login CSRF, forced logout).
	wantStatus(t, e.client().post("/login", url.Values{"email": {opEmail}, "password": {opPassword}}, "Sec-Fetch-Site", "cross-site"), http.StatusForbidden)
	wantStatus(t, c.post("/logout", nil, "Origin", "https://evil.example"), http.StatusForbidden)
	// The same request from our own origin works: the check is what refused the others.
	wantStatus(t, c.post(tpath(tn, "/keys"), form, "Sec-Fetch-Site", "same-origin", "Origin", e.url), http.StatusSeeOther)
	wantStatus(t, c.post(tpath(tn, "/keys"), form, "Origin", e.url), http.StatusSeeOther) // no Fetch Metadata: Origin alone
	// Reading across origins (a link from elsewhere) is fine.
	wantStatus(t, c.get(tpath(tn, "/limits")), http.StatusOK)
}

func TestTenantMemberCannotReachOtherTenantsByURL(t *testing.T) {
	e := newEnv(t)
	a, b := e.tenant("a-corp"), e.tenant("b-corp")
	ctx := context.Background()
	if _, err := e.svc.CreateUser(ctx, "member@a.example", "member-password-1", false, &a.ID, "test", ""); err != nil {
		t.Fatal(err)
	}
	for _, tn := range []int64{a.ID, b.ID} {
		if _, _, err := e.engine.PutDefinition(ctx, tn, "api", dailyBucket, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := e.engine.PutDefinition(ctx, b.ID, "b-only", dailyBucket, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.engine.Limit(ctx, b.ID, limiter.Request{Name: "api", Key: "bkey", Count: 4}); err != nil {
		t.Fatal(err)
	}
	bKey, _, err := e.svc.CreateKey(ctx, b.ID, "secret", "b's", "test")
	if err != nil {
		t.Fatal(err)
	}
	c := e.login("member@a.example", "member-password-1")

	// Home sends the member to their tenant; their own pages work.
	if loc := c.get("/").Header.Get("Location"); loc != tpath(a, "/limits") {
		t.Fatalf("home redirects to %q", loc)
	}
	for _, p := range []string{"/limits", "/limits/api", "/keys", "/audit"} {
		wantStatus(t, c.get(tpath(a, p)), http.StatusOK)
	}
	for _, p := range []string{"", "/limits", "/limit-values", "/new-limit", "/limits/api", "/limits/b-only", "/limits/api/keys",
		"/limits/api?key=bkey", "/limits/api/edit", "/limits/api/reset-all", "/keys", "/audit"} {
		res := c.get(tpath(b, p))
		wantStatus(t, res, http.StatusNotFound)
		if strings.Contains(res.body, "b-corp") || strings.Contains(res.body, "bkey") {
			t.Fatalf("%s leaks tenant B's data", p)
		}
	}
	posts := map[string]url.Values{
		"/limits":                      {"name": {"x"}, "kind": {"token bucket"}, "rate": {"1"}, "period": {"1000"}},
		"/limits/api":                  {"kind": {"token bucket"}, "rate": {"1"}, "period": {"1000"}},
		"/limits/api/reset":            {"key": {"bkey"}},
		"/limits/api/reset-all":        {"confirm": {"yes"}},
		"/limits/api/delete":           {"confirm": {"yes"}},
		"/keys":                        {"label": {"x"}, "kind": {"secret"}},
		"/keys/" + bKey.ID + "/revoke": nil,
	}
	for p, form := range posts {
		wantStatus(t, c.post(tpath(b, p), form), http.StatusNotFound)
	}
	// Nothing of B changed.
	if v, _ := e.engine.GetValue(ctx, b.ID, "api", "bkey"); v.Value > 6.01 {
		t.Fatalf("B's key was reset: %v", v.Value)
	}
	if d, _ := e.engine.GetDefinition(ctx, b.ID, "api"); d.Definition.Rate != 10 {
		t.Fatal("B's definition was changed")
	}
	ks, _ := e.svc.ListKeys(ctx, b.ID)
	if len(ks) != 1 || ks[0].RevokedAt != nil {
		t.Fatalf("B's keys changed: %+v", ks)
	}
	// Operator pages do not exist for members, and B's key ID in A's URL is not found either.
	wantStatus(t, c.get("/tenants"), http.StatusNotFound)
	wantStatus(t, c.post("/tenants", url.Values{"name": {"sneaky"}}), http.StatusNotFound)
	wantStatus(t, c.post(tpath(a, "/keys/"+bKey.ID+"/revoke"), nil), http.StatusNotFound)
	// Unknown and malformed tenant IDs look the same.
	for _, p := range []string{"/tenants/999999/limits", "/tenants/abc/limits", "/tenants/-1/limits", "/tenants/99999999999999999999999/limits"} {
		wantStatus(t, c.get(p), http.StatusNotFound)
	}
}

// sessionClaims reads the claims of a cookie minted by the server.
func sessionClaims(t *testing.T, tok string) jwt.RegisteredClaims {
	t.Helper()
	var claims jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(tok, &claims); err != nil {
		t.Fatal(err)
	}
	return claims
}

func refused(t *testing.T, r response) {
	t.Helper()
	if r.StatusCode != http.StatusSeeOther || !strings.HasPrefix(r.Header.Get("Location"), "/login") {
		t.Fatalf("status %d, Location %q: want a redirect to /login", r.StatusCode, r.Header.Get("Location"))
	}
}

func TestSessionCookieIsVerified(t *testing.T) {
	e := newEnv(t)
	e.operator()
	c := e.login(opEmail, opPassword)
	tok := c.cookie()
	claims := sessionClaims(t, tok)
	if claims.ID == "" || claims.Issuer != "sluice" || len(claims.Audience) != 1 || claims.ExpiresAt == nil {
		t.Fatalf("claims %+v", claims)
	}
	// The genuine cookie works: every refusal below is about what was changed.
	wantStatus(t, e.getWithCookie("/tenants", tok), http.StatusOK)

	sign := func(m jwt.SigningMethod, key any, mutate func(*jwt.RegisteredClaims)) string {
		cl := claims
		if mutate != nil {
			mutate(&cl)
		}
		s, err := jwt.NewWithClaims(m, cl).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok, ".")
	tampered := sessionClaims(t, tok)
	tampered.Subject = "999"
	tamperedTok := strings.Join([]string{parts[0], strings.Split(sign(jwt.SigningMethodHS256, []byte("other key, same length: 32+ bytes"), func(c *jwt.RegisteredClaims) { *c = tampered }), ".")[1], parts[2]}, ".")

	cases := map[string]string{
		"tampered payload":     tamperedTok,
		"flipped signature":    parts[0] + "." + parts[1] + "." + flip(parts[2]),
		"alg none":             sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, nil),
		"HS512 with our key":   sign(jwt.SigningMethodHS512, []byte(sessionKey), nil),
		"RS256":                sign(jwt.SigningMethodRS256, rsaKey, nil),
		"HS256 with other key": sign(jwt.SigningMethodHS256, []byte("another key of thirty-two bytes!!"), nil),
		"wrong audience":       sign(jwt.SigningMethodHS256, []byte(sessionKey), func(c *jwt.RegisteredClaims) { c.Audience = jwt.ClaimStrings{"sluice-api"} }),
		"wrong issuer":         sign(jwt.SigningMethodHS256, []byte(sessionKey), func(c *jwt.RegisteredClaims) { c.Issuer = "evil" }),
		"no expiry":            sign(jwt.SigningMethodHS256, []byte(sessionKey), func(c *jwt.RegisteredClaims) { c.ExpiresAt = nil }),
		"other user's subject": sign(jwt.SigningMethodHS256, []byte(sessionKey), func(c *jwt.RegisteredClaims) { c.Subject = "12345" }),
		"unknown session":      sign(jwt.SigningMethodHS256, []byte(sessionKey), func(c *jwt.RegisteredClaims) { c.ID = strings.Repeat("ab", 16) }),
		"garbage":              "not-a-jwt",
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) { refused(t, e.getWithCookie("/tenants", bad)) })
	}
	// A re-signed copy with our key and algorithm is accepted: the cases above fail for the
	// reason they name, not because re-signing breaks something.
	wantStatus(t, e.getWithCookie("/tenants", sign(jwt.SigningMethodHS256, []byte(sessionKey), nil)), http.StatusOK)

	t.Run("expired", func(t *testing.T) {
		e.clock.Advance(ui.DefaultSessionTTL + time.Minute)
		defer e.clock.Advance(-(ui.DefaultSessionTTL + time.Minute))
		refused(t, e.getWithCookie("/tenants", tok))
	})
	wantStatus(t, e.getWithCookie("/tenants", tok), http.StatusOK)

	t.Run("revoked by logout", func(t *testing.T) {
		res := c.post("/logout", nil)
		wantStatus(t, res, http.StatusSeeOther)
		if c.cookie() != "" {
			t.Fatal("logout did not clear the cookie")
		}
		refused(t, e.getWithCookie("/tenants", tok)) // a copy of the old cookie is dead too
	})

	t.Run("htmx fragment", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, e.url+"/tenants", nil)
		req.Header.Set("HX-Request", "true")
		res := e.client().do(req)
		if res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("HX-Redirect"), "/login") {
			t.Fatalf("status %d, HX-Redirect %q", res.StatusCode, res.Header.Get("HX-Redirect"))
		}
		// A poll of a fragment sends the user back, after the login, to the page that polled.
		poll, _ := http.NewRequest(http.MethodGet, e.url+"/tenants/1/limit-values", nil)
		poll.Header.Set("HX-Request", "true")
		poll.Header.Set("HX-Current-URL", e.url+"/tenants/1/limits?x=1")
		if got := e.client().do(poll).Header.Get("HX-Redirect"); got != "/login?next="+url.QueryEscape("/tenants/1/limits?x=1") {
			t.Fatalf("HX-Redirect %q: the login must return to the polling page, not the fragment", got)
		}
		for _, bad := range []string{"//evil.example/x", "https://evil.example", "javascript:alert(1)"} {
			poll.Header.Set("HX-Current-URL", bad)
			if got := e.client().do(poll).Header.Get("HX-Redirect"); got != "/login" && !strings.HasPrefix(got, "/login?next=%2F") {
				t.Fatalf("HX-Current-URL %q gave HX-Redirect %q", bad, got)
			}
		}
	})
}

func flip(s string) string {
	b := []byte(s)
	if b[0] == 'A' {
		b[0] = 'B'
	} else {
		b[0] = 'A'
	}
	return string(b)
}

func TestSessionCookieAttributes(t *testing.T) {
	t.Run("loopback http", func(t *testing.T) {
		e := newEnv(t)
		e.operator()
		res := e.client().post("/login", url.Values{"email": {opEmail}, "password": {opPassword}})
		ck := findCookie(res, "sluice_session")
		if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.Secure {
			t.Fatalf("cookie %+v", ck)
		}
	})
	t.Run("https", func(t *testing.T) {
		e := newEnv(t, func(c *config.Config, _ *app.Options) { c.BaseURL = "https://sluice.example" })
		e.operator()
		res := e.client().post("/login", url.Values{"email": {opEmail}, "password": {opPassword}})
		ck := findCookie(res, "__Host-sluice_session")
		if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || !ck.Secure || ck.Domain != "" {
			t.Fatalf("cookie %+v (all: %v)", ck, res.Header.Values("Set-Cookie"))
		}
	})
}

func findCookie(r response, name string) *http.Cookie {
	for _, ck := range r.Cookies() {
		if ck.Name == name {
			return ck
		}
	}
	return nil
}

func TestSetupLinkCreatesFirstOperatorOnceWithHashedPassword(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	path, err := e.ui.Bootstrap(ctx, "", "")
	if err != nil || !strings.HasPrefix(path, "/setup?token=") {
		t.Fatalf("Bootstrap = %q, %v", path, err)
	}
	tok := strings.TrimPrefix(path, "/setup?token=")
	c := e.client()
	wantStatus(t, c.get("/setup?token=wrong"), http.StatusNotFound)
	page := c.get(path)
	wantStatus(t, page, http.StatusOK)
	if v, _ := page.doc(t).Find(`input[name="token"]`).Attr("value"); v != tok {
		t.Fatal("setup form does not carry the token")
	}
	const password = "first-operator-password"
	mismatch := c.post("/setup", url.Values{"token": {tok}, "email": {"first@example.com"}, "password": {password}, "confirm": {"different-password"}})
	wantStatus(t, mismatch, http.StatusUnprocessableEntity)
	short := c.post("/setup", url.Values{"token": {tok}, "email": {"first@example.com"}, "password": {"short"}, "confirm": {"short"}})
	wantStatus(t, short, http.StatusUnprocessableEntity)
	if got := text(short.doc(t), "#setup-error"); !strings.Contains(got, "10") {
		t.Fatalf("short password error = %q", got)
	}

	res := c.post("/setup", url.Values{"token": {tok}, "email": {"first@example.com"}, "password": {password}, "confirm": {password}})
	wantStatus(t, res, http.StatusSeeOther)
	wantStatus(t, c.get("/tenants"), http.StatusOK) // logged in straight away

	// Stored hashed with argon2id, never in the clear.
	var hashes []string
	if err := e.db.Gorm.Raw(`SELECT password_hash FROM users`).Scan(&hashes).Error; err != nil {
		t.Fatal(err)
	}
	if len(hashes) != 1 || !strings.HasPrefix(hashes[0], "$argon2id$") || strings.Contains(hashes[0], password) {
		t.Fatalf("stored password: %q", hashes)
	}
	// The link is dead now, for everyone.
	wantStatus(t, e.client().get(path), http.StatusNotFound)
	again := e.client().post("/setup", url.Values{"token": {tok}, "email": {"second@example.com"}, "password": {password}, "confirm": {password}})
	wantStatus(t, again, http.StatusNotFound)
	if n, _ := e.svc.CountUsers(ctx); n != 1 {
		t.Fatalf("%d users, want 1", n)
	}
	// And a restart with users offers no setup.
	if p, err := e.ui.Bootstrap(ctx, "", ""); p != "" || err != nil {
		t.Fatalf("Bootstrap with users = %q, %v", p, err)
	}
}

// TestSetupLinkIsDeadOnceAnyUserExists: a setup link is for a server without users. When a user
// appears while it is open (made by `user create`, or by another instance on the same database),
// the link is dead: its page and its form are 404, with the email of the existing operator
// (which was a 500) or with a new one (which made a second operator). On SQLite and PostgreSQL.
func TestSetupLinkIsDeadOnceAnyUserExists(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL))
		ctx := context.Background()
		path, err := e.ui.Bootstrap(ctx, "", "")
		if err != nil || path == "" {
			t.Fatalf("Bootstrap = %q, %v", path, err)
		}
		tok := strings.TrimPrefix(path, "/setup?token=")
		e.operator() // as `user create` or another instance's setup would
		const password = "second-operator-password"
		for _, email := range []string{opEmail, "second@example.com"} {
			res := e.client().post("/setup", url.Values{"token": {tok}, "email": {email}, "password": {password}, "confirm": {password}})
			wantStatus(t, res, http.StatusNotFound)
		}
		wantStatus(t, e.client().get(path), http.StatusNotFound)
		if n, _ := e.svc.CountUsers(ctx); n != 1 {
			t.Fatalf("%d users, want 1", n)
		}
	})
}

func TestBootstrapFromEnvironmentCreatesOperator(t *testing.T) {
	e := newEnv(t)
	p, err := e.ui.Bootstrap(context.Background(), "env-op@example.com", "env-operator-password")
	if err != nil || p != "" {
		t.Fatalf("Bootstrap = %q, %v", p, err)
	}
	e.login("env-op@example.com", "env-operator-password")
}

// Two instances starting at once on an empty database with the same SLUICE_ADMIN_EMAIL both
// start: both count no user, one creates the operator, and the other, whose creation finds it,
// takes it rather than failing. On SQLite and PostgreSQL.
func TestConcurrentBootstrapsFromTheEnvironmentBothSucceed(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL))
		ctx := context.Background()
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() { _, errs[i] = e.ui.Bootstrap(ctx, "admin@example.com", "admin-password-1") })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("Bootstrap %d: %v", i, err)
			}
		}
		users, err := e.svc.ListUsers(ctx, nil)
		if err != nil || len(users) != 1 || users[0].Email != "admin@example.com" || !users[0].IsOperator {
			t.Fatalf("users = %+v, %v; want the one operator", users, err)
		}
		e.login("admin@example.com", "admin-password-1")
	})
}

// The setup links of two instances on one database, used at once (each instance's setup lock is
// its own), make one first operator: the creating transaction checks again that no user exists,
// and the other form answers 404 like a dead link. On SQLite and PostgreSQL.
func TestTwoInstancesSetupLinksUsedAtOnceMakeOneOperator(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		envs := []*env{newEnv(t, onDatabase(dbURL)), newEnv(t, onDatabase(dbURL))}
		ctx := context.Background()
		forms := make([]url.Values, len(envs))
		for i, e := range envs {
			path, err := e.ui.Bootstrap(ctx, "", "")
			if err != nil || path == "" {
				t.Fatalf("Bootstrap %d = %q, %v", i, path, err)
			}
			const password = "first-operator-password"
			forms[i] = url.Values{"token": {strings.TrimPrefix(path, "/setup?token=")},
				"email": {"first" + strconv.Itoa(i) + "@example.com"}, "password": {password}, "confirm": {password}}
		}
		codes := make([]int, len(envs))
		var wg sync.WaitGroup
		for i, e := range envs {
			c := e.client()
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, e.url+"/setup", strings.NewReader(forms[i].Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				res, err := c.c.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				res.Body.Close()
				codes[i] = res.StatusCode
			})
		}
		wg.Wait()
		slices.Sort(codes)
		if codes[0] != http.StatusSeeOther || codes[1] != http.StatusNotFound {
			t.Fatalf("statuses %v, want one 303 and one 404", codes)
		}
		if n, err := envs[0].svc.CountUsers(ctx); err != nil || n != 1 {
			t.Fatalf("%d users (%v), want 1", n, err)
		}
	})
}

func TestBadInputNeverCauses500(t *testing.T) {
	e := newEnv(t)
	e.operator()
	tn := e.tenant("acme")
	if _, _, err := e.engine.PutDefinition(context.Background(), tn.ID, "api", dailyBucket, nil); err != nil {
		t.Fatal(err)
	}
	c := e.login(opEmail, opPassword)
	long := strings.Repeat("9", 5000)
	gets := []string{
		"/tenants/x/limits", "/tenants/0/limits", tpath(tn, "/limits/bad%20name"), tpath(tn, "/limits/api?key="+strings.Repeat("k", 300)),
		tpath(tn, "/limits/api?key=%00%ff"), "/tenants/go?tenant=abc", "/login?next=//evil.example", "/setup", "/nope",
		tpath(tn, "/limits/"+strings.Repeat("n", 200)),
	}
	for _, p := range gets {
		if r := c.get(p); r.StatusCode >= 500 {
			t.Fatalf("GET %s: %d", p, r.StatusCode)
		}
	}
	posts := map[string]url.Values{
		tpath(tn, "/limits"):           {"name": {long}, "kind": {long}, "rate": {long}, "period": {"1e309"}, "shards": {"99999999999999999999"}, "jitter": {"-1"}, "start": {"x"}},
		tpath(tn, "/limits/api"):       {"rate": {"NaN"}, "period": {"Inf"}, "capacity": {"-1"}, "resolution": {"3"}},
		tpath(tn, "/limits/api/reset"): {"key": {"\xff\xfe"}},
		tpath(tn, "/keys"):             {"label": {strings.Repeat("é", 200) + "\x00"}, "kind": {"secret"}},
		"/tenants":                     {"name": {"\x00"}},
		"/login":                       {"email": {long}, "password": {long}},
		"/setup":                       {"token": {long}},
	}
	for p, form := range posts {
		if r := c.post(p, form); r.StatusCode >= 500 {
			t.Fatalf("POST %s: %d\n%s", p, r.StatusCode, r.body)
		}
	}
	// The open-redirect attempt logs in to a local page only.
	fresh := e.client()
	res := fresh.post("/login", url.Values{"email": {opEmail}, "password": {opPassword}, "next": {"//evil.example/x"}})
	if loc := res.Header.Get("Location"); loc != "/" {
		t.Fatalf("login with next=//evil.example redirected to %q", loc)
	}
}
