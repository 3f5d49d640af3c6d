package api_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/captcha"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// testClock is the captcha's clock (issuer, store and signer): real time plus an offset that a
// test moves forward to expire challenges, instead of sleeping.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// testIssuer is the issuer of session tokens: the test application's BASE_URL.
var testIssuer = apptest.Config("").BaseURL

// sessionHarness is the real application with a clock the captcha reads (issuer, store and
// signer), over one real database.
type sessionHarness struct {
	*harness
	store  *captcha.Store
	clock  *testClock
	origin string // an origin every tenant made by newCaptchaTenant allows
}

// newSessionHarness starts the application on url; tune may tighten its challenge limits.
func newSessionHarness(tb testing.TB, url string, tune func(*app.Options)) *sessionHarness {
	tb.Helper()
	clock := &testClock{}
	o := app.Options{Now: clock.now}
	if tune != nil {
		tune(&o)
	}
	h := startApp(tb, url, o)
	return &sessionHarness{harness: h, store: h.app.Captcha, clock: clock, origin: "https://shop.example"}
}

// eachSessionDB runs fn on SQLite and on PostgreSQL, as parallel subtests.
func eachSessionDB(t *testing.T, tune func(*app.Options), fn func(t *testing.T, h *sessionHarness)) {
	t.Helper()
	testkit.EachURL(t, func(t *testing.T, url string) { fn(t, newSessionHarness(t, url, tune)) })
}

// captchaTenant is a tenant with a secret and a publishable key.
type captchaTenant struct {
	tenantKey
	pk string
}

// newCaptchaTenant creates a tenant allowing h.origin at the lowest difficulty, so that the Go
// solver is quick.
func (h *sessionHarness) newCaptchaTenant(t testing.TB, name string) captchaTenant {
	t.Helper()
	tk := h.newTenant(t, name)
	ctx := context.Background()
	_, pk, err := h.tenants.CreateKey(ctx, tk.id, tenants.KindPublishable, "site", "test")
	if err != nil {
		t.Fatalf("create publishable key: %v", err)
	}
	if err := h.tenants.UpdateCaptchaSettings(ctx, tk.id, []string{h.origin}, tenants.MinCaptchaDifficulty, "test"); err != nil {
		t.Fatalf("captcha settings: %v", err)
	}
	return captchaTenant{tenantKey: tk, pk: pk}
}

// request sends a request with extra headers (no body) and checks the response against the
// OpenAPI document.
func (h *sessionHarness) request(t testing.TB, method, path string, header map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, h.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := response{status: res.StatusCode, header: res.Header, body: raw}
	checkContract(t, request{method: method, target: path}, r)
	return r
}

func challengePath(pk, sid string) string {
	return "/v1/captcha/challenge?pk=" + pk + "&sid=" + sid
}

// newSessionID is a fresh 128-bit session ID, as the tenant's page makes one.
var sessionCounter atomic.Int64

func newSessionID(t testing.TB) string {
	t.Helper()
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "sid-%012d", sessionCounter.Add(1)))
}

// challenge fetches a challenge for sid from the allowed origin.
func (h *sessionHarness) challenge(t testing.TB, pk, sid string) captcha.Challenge {
	t.Helper()
	r := h.request(t, http.MethodGet, challengePath(pk, sid), map[string]string{"Origin": h.origin})
	requireJSON(t, r, http.StatusOK)
	var ch captcha.Challenge
	if err := json.Unmarshal(r.body, &ch); err != nil {
		t.Fatalf("challenge: %v: %s", err, r)
	}
	return ch
}

// solved is a payload the Go solver made for a fresh challenge of sid.
func (h *sessionHarness) solved(t testing.TB, pk, sid string) string {
	t.Helper()
	payload, err := captcha.Solve(h.challenge(t, pk, sid))
	if err != nil {
		t.Fatalf("solve: %v", err)
	}
	return payload
}

func (h *sessionHarness) authorize(t testing.TB, key, sid, payload string) response {
	t.Helper()
	return h.send(t, http.MethodPost, "/v1/sessions/authorize", key, map[string]any{"sessionId": sid, "payload": payload})
}

// authorized runs the whole flow for a fresh session and returns its ID.
func (h *sessionHarness) authorized(t testing.TB, tn captchaTenant) string {
	t.Helper()
	sid := newSessionID(t)
	requireJSON(t, h.authorize(t, tn.key, sid, h.solved(t, tn.pk, sid)), http.StatusOK)
	return sid
}

func TestCaptchaChallengeServesPublishableKeysFromAllowedOriginsOnly(t *testing.T) {
	eachSessionDB(t, nil, func(t *testing.T, h *sessionHarness) {
		a := h.newCaptchaTenant(t, "acme")
		sid := newSessionID(t)
		path := challengePath(a.pk, sid)

		r := h.request(t, http.MethodGet, path, map[string]string{"Origin": h.origin})
		body := requireJSON(t, r, http.StatusOK)
		if got := r.header.Get("Access-Control-Allow-Origin"); got != h.origin {
			t.Fatalf("Access-Control-Allow-Origin = %q, want the allowed origin %q", got, h.origin)
		}
		if !strings.Contains(r.header.Get("Vary"), "Origin") || r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("Vary = %q, Cache-Control = %q", r.header.Get("Vary"), r.header.Get("Cache-Control"))
		}
		if r.header.Get("Access-Control-Allow-Credentials") != "" {
			t.Fatal("challenges must never allow credentials")
		}
		var ch captcha.Challenge
		if err := json.Unmarshal(r.body, &ch); err != nil {
			t.Fatalf("%v: %v", err, body)
		}
		p := ch.Parameters
		if p.Data.Tenant != strconv.FormatInt(a.id, 10) || p.Data.Session != captcha.HashSessionID(sid) ||
			p.Data.MaxNumber != strconv.Itoa(tenants.MinCaptchaDifficulty) || len(ch.Signature) != 64 {
			t.Fatalf("challenge = %+v", ch)
		}
		if exp := time.Unix(p.ExpiresAt, 0); exp.Before(time.Now().Add(time.Minute)) || exp.After(time.Now().Add(10*time.Minute)) {
			t.Fatalf("challenge expires at %s: want a few minutes from now", exp)
		}

		// Without Origin (same-origin GET, a server): served, no CORS header needed.
		r = h.request(t, http.MethodGet, path, nil)
		requireJSON(t, r, http.StatusOK)
		if r.header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("ACAO without an Origin: %q", r.header.Get("Access-Control-Allow-Origin"))
		}

		// A foreign origin is refused, and learns nothing it could read.
		r = h.request(t, http.MethodGet, path, map[string]string{"Origin": "https://evil.example"})
		requireProblem(t, r, http.StatusForbidden, api.CodeForbidden)
		if r.header.Get("Access-Control-Allow-Origin") != "" || r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("refusal headers: %v", r.header)
		}

		// Preflight: allowed origin gets the CORS grant, a foreign one a 403.
		pre := map[string]string{"Origin": h.origin, "Access-Control-Request-Method": "GET"}
		r = h.request(t, http.MethodOptions, path, pre)
		if r.status != http.StatusNoContent || r.header.Get("Access-Control-Allow-Origin") != h.origin ||
			!strings.Contains(r.header.Get("Access-Control-Allow-Methods"), "GET") {
			t.Fatalf("preflight: %s %v", r, r.header)
		}
		// A preflight without a session ID, or with one that is not, is refused as the GET is
		// (the document requires sid of both).
		for _, target := range []string{"/v1/captcha/challenge?pk=" + a.pk, challengePath(a.pk, "too-short")} {
			if bad := requireProblem(t, h.request(t, http.MethodOptions, target, pre), http.StatusBadRequest, api.CodeInvalidRequest); bad["field"] != "sid" {
				t.Fatalf("OPTIONS %s: %v, want a problem naming sid", target, bad)
			}
		}
		pre["Origin"] = "https://evil.example"
		r = h.request(t, http.MethodOptions, path, pre)
		requireProblem(t, r, http.StatusForbidden, api.CodeForbidden)

		// Secret keys never belong in a page; garbage or missing keys are unauthorized.
		p403 := requireProblem(t, h.request(t, http.MethodGet, challengePath(a.key, sid), nil), http.StatusForbidden, api.CodeForbidden)
		if !strings.Contains(p403["detail"].(string), "publishable") {
			t.Fatalf("secret key refusal does not say what to use: %v", p403)
		}
		requireProblem(t, h.request(t, http.MethodGet, challengePath("pk_live_nope", sid), nil), http.StatusUnauthorized, api.CodeUnauthorized)
		requireProblem(t, h.request(t, http.MethodGet, "/v1/captcha/challenge?sid="+sid, nil), http.StatusUnauthorized, api.CodeUnauthorized)
		bad := requireProblem(t, h.request(t, http.MethodGet, challengePath(a.pk, "short"), nil), http.StatusBadRequest, api.CodeInvalidRequest)
		if bad["field"] != "sid" {
			t.Fatalf("bad sid problem = %v", bad)
		}
		// A revoked publishable key stops working at once.
		keys, err := h.tenants.ListKeys(context.Background(), a.id)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if k.Kind == tenants.KindPublishable {
				if err := h.tenants.RevokeKey(context.Background(), a.id, k.ID, "test"); err != nil {
					t.Fatal(err)
				}
			}
		}
		requireProblem(t, h.request(t, http.MethodGet, path, nil), http.StatusUnauthorized, api.CodeUnauthorized)
		// And a publishable key is no secret key: the rest of the API refuses it.
		requireProblem(t, h.authorize(t, h.newCaptchaTenant(t, "other").pk, sid, "x"), http.StatusForbidden, api.CodeForbidden)
	})
}

// TestCaptchaRefusalsAreReadableByAnAllowedOrigin: a 400 to the widget on an allowed origin
// carries the CORS header, so the browser shows the problem rather than a network error; a
// foreign origin still reads nothing.
func TestCaptchaRefusalsAreReadableByAnAllowedOrigin(t *testing.T) {
	eachSessionDB(t, nil, func(t *testing.T, h *sessionHarness) {
		a := h.newCaptchaTenant(t, "acme")
		r := h.request(t, http.MethodGet, challengePath(a.pk, "too-short"), map[string]string{"Origin": h.origin})
		p := requireProblem(t, r, http.StatusBadRequest, api.CodeInvalidRequest)
		if p["field"] != "sid" || r.header.Get("Access-Control-Allow-Origin") != h.origin {
			t.Fatalf("bad sid from an allowed origin: %v, ACAO %q", p, r.header.Get("Access-Control-Allow-Origin"))
		}
		r = h.request(t, http.MethodGet, challengePath(a.pk, "too-short"), map[string]string{"Origin": "https://evil.example"})
		requireProblem(t, r, http.StatusForbidden, api.CodeForbidden)
		if got := r.header.Get("Access-Control-Allow-Origin"); got != "" {
			t.Fatalf("a foreign origin may read the refusal: ACAO %q", got)
		}
	})
}

func TestCaptchaChallengeIsRateLimitedPerKeyAndPerClientIP(t *testing.T) {
	// Ten-minute periods: nothing refills noticeably while the test runs.
	ipLimit := limiter.Definition{Kind: limiter.TokenBucket, Rate: 8, Period: 600_000}
	keyLimit := limiter.Definition{Kind: limiter.TokenBucket, Rate: 5, Period: 600_000}
	tune := func(d *app.Options) { d.ChallengeIPLimit, d.ChallengeKeyLimit = &ipLimit, &keyLimit }
	eachSessionDB(t, tune, func(t *testing.T, h *sessionHarness) {
		a := h.newCaptchaTenant(t, "acme")
		b := h.newCaptchaTenant(t, "bravo")
		get := func(pk string) response {
			return h.request(t, http.MethodGet, challengePath(pk, newSessionID(t)), map[string]string{"Origin": h.origin})
		}
		head := func(pk string) response {
			return h.request(t, http.MethodHead, challengePath(pk, newSessionID(t)), map[string]string{"Origin": h.origin})
		}
		// HEAD is safe: more HEADs than either limit takes spend neither (a link checker or a
		// monitor does not starve the widget), and each answers what GET would.
		for range 10 {
			r := head(a.pk)
			if r.status != http.StatusOK || r.header.Get("Access-Control-Allow-Origin") != h.origin ||
				!strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
				t.Fatalf("HEAD of a challenge: %d %v; want GET's 200, its JSON type, for the allowed origin", r.status, r.header)
			}
		}
		for range 5 {
			requireJSON(t, get(a.pk), http.StatusOK)
		}
		r := get(a.pk) // the key's sixth: refused by the per-key limit (the IP has spent 6 of 8)
		p := requireProblem(t, r, http.StatusTooManyRequests, api.CodeRateLimited)
		if hr := head(a.pk); hr.status != http.StatusTooManyRequests || hr.header.Get("Retry-After") == "" {
			t.Fatalf("HEAD with the key's limit spent: %d %v; want GET's 429 with Retry-After", hr.status, hr.header)
		}
		if p["name"] != api.ChallengeKeyLimitName || number(t, p, "retryAfter") <= 0 {
			t.Fatalf("per-key refusal = %v", p)
		}
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Fatalf("Retry-After = %q", r.header.Get("Retry-After"))
		}
		if r.header.Get("Access-Control-Allow-Origin") != h.origin {
			t.Fatal("a 429 to an allowed origin must be readable by the widget")
		}
		// Another tenant's key has its own budget, but the same client IP has two left.
		requireJSON(t, get(b.pk), http.StatusOK)
		requireJSON(t, get(b.pk), http.StatusOK)
		r = get(b.pk)
		p = requireProblem(t, r, http.StatusTooManyRequests, api.CodeRateLimited)
		if p["name"] != api.ChallengeIPLimitName {
			t.Fatalf("per-IP refusal = %v", p)
		}
		if r.header.Get("Access-Control-Allow-Origin") != h.origin {
			t.Fatal("the per-IP 429 to an allowed origin must be readable by the widget")
		}
		// The limits are Sluice's own (tenant 0): the tenants' limits are untouched.
		list := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits", a.key, nil), http.StatusOK)
		if ls, _ := list["limits"].([]any); len(ls) != 0 {
			t.Fatalf("tenant sees system limits: %v", list)
		}
	})
}

// jwksKey fetches the router's JWK set and returns its one Ed25519 key and kid.
func (h *sessionHarness) jwksKey(t testing.TB) (ed25519.PublicKey, string) {
	t.Helper()
	r := h.request(t, http.MethodGet, "/.well-known/jwks.json", nil)
	requireJSON(t, r, http.StatusOK)
	var set struct {
		Keys []struct{ Kty, Crv, X, Kid, Alg, Use string } `json:"keys"`
	}
	if err := json.Unmarshal(r.body, &set); err != nil || len(set.Keys) != 1 {
		t.Fatalf("JWKS = %s (%v)", r.body, err)
	}
	k := set.Keys[0]
	x, err := base64.RawURLEncoding.DecodeString(k.X)
	if k.Kty != "OKP" || k.Crv != "Ed25519" || k.Alg != "EdDSA" || err != nil || len(x) != ed25519.PublicKeySize || k.Kid == "" {
		t.Fatalf("JWK = %+v (%v)", k, err)
	}
	return ed25519.PublicKey(x), k.Kid
}

// verifyOffline checks a token the way a tenant's backend would, with only the JWK set.
func verifyOffline(token string, key ed25519.PublicKey, kid, audience string, now time.Time) (jwt.MapClaims, error) {
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(token, claims, func(tk *jwt.Token) (any, error) {
		if tk.Header["kid"] != kid {
			return nil, fmt.Errorf("unknown kid %v", tk.Header["kid"])
		}
		return key, nil
	}, jwt.WithValidMethods([]string{"EdDSA"}), jwt.WithIssuer(testIssuer), jwt.WithAudience(audience),
		jwt.WithExpirationRequired(), jwt.WithTimeFunc(func() time.Time { return now }))
	return claims, err
}

func TestSessionAuthorizeRoundTripIssuesATokenVerifiableWithJWKS(t *testing.T) {
	eachSessionDB(t, nil, func(t *testing.T, h *sessionHarness) {
		a := h.newCaptchaTenant(t, "acme")
		sid := newSessionID(t)
		payload := h.solved(t, a.pk, sid)

		before := time.Now()
		res := requireJSON(t, h.authorize(t, a.key, sid, payload), http.StatusOK)
		exp, err := time.Parse(time.RFC3339Nano, fmt.Sprint(res["expiresAt"]))
		if res["authorized"] != true || err != nil {
			t.Fatalf("authorize = %v (%v)", res, err)
		}
		if d := exp.Sub(before); d < api.DefaultSessionTTL-time.Minute || d > api.DefaultSessionTTL+time.Minute {
			t.Fatalf("expiresAt %s is %s from now, want the default TTL %s", exp, d, api.DefaultSessionTTL)
		}

		key, kid := h.jwksKey(t)
		token, _ := res["token"].(string)
		claims, err := verifyOffline(token, key, kid, captcha.Audience(a.id), time.Now())
		if err != nil {
			t.Fatalf("token does not verify with the served JWKS: %v", err)
		}
		if claims["sub"] != captcha.HashSessionID(sid) || claims["tenant"] != float64(a.id) {
			t.Fatalf("claims = %v", claims)
		}
		if e, _ := claims.GetExpirationTime(); e == nil || e.Unix() != exp.Unix() {
			t.Fatalf("exp claim %v, expiresAt %s", e, exp)
		}
		if _, err := verifyOffline(token, key, kid, captcha.Audience(a.id+1), time.Now()); err == nil {
			t.Fatal("token verified for another tenant's audience")
		}
		if _, err := verifyOffline(token, key, kid, captcha.Audience(a.id), exp.Add(time.Second)); err == nil {
			t.Fatal("token verified after it expired")
		}
		tampered := token[:len(token)-4] + "AAAA"
		if _, err := verifyOffline(tampered, key, kid, captcha.Audience(a.id), time.Now()); err == nil {
			t.Fatal("tampered token verified")
		}

		s := requireJSON(t, h.send(t, http.MethodGet, "/v1/sessions/"+sid, a.key, nil), http.StatusOK)
		if s["sessionId"] != sid || s["authorized"] != true || s["expiresAt"] == nil || s["authorizedAt"] == nil {
			t.Fatalf("GET session = %v", s)
		}

		// The same payload again: a replay.
		p := requireProblem(t, h.authorize(t, a.key, sid, payload), http.StatusConflict, api.CodeConflict)
		if !strings.Contains(p["detail"].(string), "already") {
			t.Fatalf("replay problem = %v", p)
		}
		// A new proof of work renews the session.
		requireJSON(t, h.authorize(t, a.key, sid, h.solved(t, a.pk, sid)), http.StatusOK)
	})
}

func TestSessionAuthorizeConcurrentReplaysAdmitExactlyOne(t *testing.T) {
	eachSessionDB(t, nil, func(t *testing.T, h *sessionHarness) {
		a := h.newCaptchaTenant(t, "acme")
		sid := newSessionID(t)
		payload := h.solved(t, a.pk, sid)
		body, _ := json.Marshal(map[string]any{"sessionId": sid, "payload": payload})
		const n = 24
		statuses := make([]int, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/sessions/authorize", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+a.key)
				req.Header.Set("Content-Type", "application/json")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Errorf("request %d: %v", i, err)
					return
				}
				raw, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil {
					t.Errorf("request %d: read body: %v", i, err)
					return
				}
				checkContract(t, request{method: http.MethodPost, target: "/v1/sessions/authorize", contentType: "application/json", body: body},
					response{status: res.StatusCode, header: res.Header, body: raw})
				statuses[i] = res.StatusCode
			})
		}
		close(start)
		wg.Wait()
		count := map[int]int{}
		for _, s := range statuses {
			count[s]++
		}
		if count[http.StatusOK] != 1 || count[http.StatusConflict] != n-1 {
			t.Fatalf("statuses of %d concurrent submissions of one payload: %v; want one 200 and %d 409", n, count, n-1)
		}
	})
}

// repack decodes a payload, lets edit change it and encodes it again.
func repack(t testing.TB, payload string, edit func(m map[string]any)) string {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(out)
}

func TestSessionAuthorizeRefusesExpiredTamperedForeignAndMisboundPayloads(t *testing.T) {
	eachSessionDB(t, nil, func(t *testing.T, h *sessionHarness) {
		a := h.newCaptchaTenant(t, "acme")
		b := h.newCaptchaTenant(t, "bravo")
		sid := newSessionID(t)
		payload := h.solved(t, a.pk, sid)
		params := func(m map[string]any) map[string]any {
			return m["challenge"].(map[string]any)["parameters"].(map[string]any)
		}
		cases := []struct {
			name, key, sid, payload, field, detail string
		}{
			{"tampered counter", a.key, sid, repack(t, payload, func(m map[string]any) {
				s := m["solution"].(map[string]any)
				s["counter"] = s["counter"].(float64) + 1
			}), "payload", "does not solve"},
			{"tampered difficulty", a.key, sid, repack(t, payload, func(m map[string]any) {
				params(m)["data"].(map[string]any)["maxNumber"] = "999999"
			}), "payload", "altered"},
			{"tampered expiry", a.key, sid, repack(t, payload, func(m map[string]any) {
				params(m)["expiresAt"] = params(m)["expiresAt"].(float64) + 3600
			}), "payload", "altered"},
			{"foreign tenant", b.key, sid, payload, "payload", "another tenant"},
			{"other session", a.key, newSessionID(t), payload, "sessionId", "another session"},
			{"test mode", a.key, sid, base64.StdEncoding.EncodeToString([]byte(`{"challenge":null,"solution":null,"test":true}`)), "payload", "test mode"},
			{"garbage", a.key, sid, "not base64!", "payload", "not a solved challenge"},
			{"too large", a.key, sid, strings.Repeat("A", captcha.MaxPayloadSize+4), "payload", "longer"},
			{"invalid session ID", a.key, "no", payload, "sessionId", "16 to 128"},
		}
		for _, c := range cases {
			p := requireProblem(t, h.authorize(t, c.key, c.sid, c.payload), http.StatusBadRequest, api.CodeInvalidRequest)
			if p["field"] != c.field || !strings.Contains(p["detail"].(string), c.detail) {
				t.Errorf("%s: problem %v, want field %q and detail containing %q", c.name, p, c.field, c.detail)
			}
		}
		for _, body := range []map[string]any{{"payload": payload}, {"sessionId": sid}, {"sessionId": sid, "payload": ""}} {
			requireProblem(t, h.send(t, http.MethodPost, "/v1/sessions/authorize", a.key, body), http.StatusBadRequest, api.CodeInvalidRequest)
		}
		requireProblem(t, h.send(t, http.MethodPost, "/v1/sessions/authorize", a.key,
			map[string]any{"sessionId": sid, "payload": payload, "tenant": b.id}), http.StatusBadRequest, api.CodeInvalidRequest)
		requireProblem(t, h.authorize(t, "", sid, payload), http.StatusUnauthorized, api.CodeUnauthorized)

		// Raising the difficulty retires challenges issued at the old one.
		if err := h.tenants.UpdateCaptchaSettings(context.Background(), a.id, []string{h.origin}, 2*tenants.MinCaptchaDifficulty, "test"); err != nil {
			t.Fatal(err)
		}
		p := requireProblem(t, h.authorize(t, a.key, sid, payload), http.StatusBadRequest, api.CodeInvalidRequest)
		if !strings.Contains(p["detail"].(string), "difficulty") {
			t.Fatalf("stale difficulty: %v", p)
		}
		if err := h.tenants.UpdateCaptchaSettings(context.Background(), a.id, []string{h.origin}, tenants.MinCaptchaDifficulty, "test"); err != nil {
			t.Fatal(err)
		}

		// None of the refusals consumed the challenge, but time does.
		fresh := newSessionID(t)
		later := h.solved(t, a.pk, fresh)
		requireJSON(t, h.authorize(t, a.key, sid, payload), http.StatusOK)
		h.clock.advance(api.DefaultChallengeTTL + time.Second)
		p = requireProblem(t, h.authorize(t, a.key, fresh, later), http.StatusBadRequest, api.CodeInvalidRequest)
		if !strings.Contains(p["detail"].(string), "expired") {
			t.Fatalf("expired challenge: %v", p)
		}
		if r := h.send(t, http.MethodGet, "/v1/sessions/"+fresh, a.key, nil); r.status != http.StatusNotFound {
			t.Fatalf("session of a refused payload exists: %s", r)
		}
	})
}

func TestSessionKeysInDecisionsFollowAuthorization(t *testing.T) {
	eachSessionDB(t, nil, func(t *testing.T, h *sessionHarness) {
		a := h.newCaptchaTenant(t, "acme")
		h.define(t, a.key, "comment", map[string]any{"kind": "token bucket", "rate": 2, "period": 60000})
		h.define(t, a.key, "lossy", map[string]any{"kind": "token bucket", "rate": 2, "period": 60000, "ipFallback": true})
		sid := h.authorized(t, a)

		limit := func(name, session string) response {
			return h.send(t, http.MethodPost, "/v1/limits/"+name+"/limit", a.key, map[string]any{"session": session})
		}
		for i := range 2 {
			d := requireJSON(t, limit("comment", sid), http.StatusOK)
			if d["ok"] != true || d["key"] != api.SessionKey(sid) {
				t.Fatalf("decision %d by an authorized session = %v", i, d)
			}
		}
		d := requireJSON(t, limit("comment", sid), http.StatusOK)
		if d["ok"] != false || number(t, d, "retryAfter") <= 0 {
			t.Fatalf("third decision = %v, want a refusal with retryAfter", d)
		}
		// Another authorized session has its own allowance.
		other := h.authorized(t, a)
		if d := requireJSON(t, limit("comment", other), http.StatusOK); d["ok"] != true {
			t.Fatalf("second session = %v", d)
		}

		stranger := newSessionID(t)
		requireProblem(t, limit("comment", stranger), http.StatusForbidden, api.CodeSessionNotAuthorized)
		d = requireJSON(t, limit("lossy", stranger), http.StatusOK)
		if k, _ := d["key"].(string); d["ok"] != true || !strings.HasPrefix(k, "ip:") {
			t.Fatalf("ipFallback decision for an unauthorized session = %v", d)
		}
		// Inline definitions may opt in too.
		inline := map[string]any{"session": stranger, "config": map[string]any{"kind": "fixed window", "rate": 1, "period": 60000, "ipFallback": true}}
		if d := requireJSON(t, h.send(t, http.MethodPost, "/v1/limits/adhoc/limit", a.key, inline), http.StatusOK); d["ok"] != true {
			t.Fatalf("inline ipFallback = %v", d)
		}

		// Revocation takes effect at once.
		if r := h.send(t, http.MethodDelete, "/v1/sessions/"+other, a.key, nil); r.status != http.StatusNoContent {
			t.Fatalf("revoke: %s", r)
		}
		requireProblem(t, limit("comment", other), http.StatusForbidden, api.CodeSessionNotAuthorized)
		if d := requireJSON(t, limit("lossy", other), http.StatusOK); !strings.HasPrefix(d["key"].(string), "ip:") {
			t.Fatalf("revoked session did not fall back to the IP key: %v", d)
		}
	})
}

func TestSessionsReadAndRevokeAreTenantScoped(t *testing.T) {
	eachSessionDB(t, nil, func(t *testing.T, h *sessionHarness) {
		a := h.newCaptchaTenant(t, "acme")
		b := h.newCaptchaTenant(t, "bravo")
		sid := h.authorized(t, a)
		path := "/v1/sessions/" + sid

		// B cannot see or revoke A's session, and cannot tell it exists.
		pb := requireProblem(t, h.send(t, http.MethodGet, path, b.key, nil), http.StatusNotFound, api.CodeNotFound)
		pn := requireProblem(t, h.send(t, http.MethodGet, "/v1/sessions/"+newSessionID(t), b.key, nil), http.StatusNotFound, api.CodeNotFound)
		if pb["detail"] != pn["detail"] {
			t.Fatalf("A's session is distinguishable from none: %v vs %v", pb, pn)
		}
		requireProblem(t, h.send(t, http.MethodDelete, path, b.key, nil), http.StatusNotFound, api.CodeNotFound)
		requireProblem(t, h.send(t, http.MethodPost, "/v1/limits/x/limit", b.key,
			map[string]any{"session": sid, "config": map[string]any{"kind": "token bucket", "rate": 1, "period": 1000}}),
			http.StatusForbidden, api.CodeSessionNotAuthorized)
		requireJSON(t, h.send(t, http.MethodGet, path, a.key, nil), http.StatusOK)

		if r := h.send(t, http.MethodDelete, path, a.key, nil); r.status != http.StatusNoContent || len(r.body) != 0 {
			t.Fatalf("DELETE: %s", r)
		}
		requireProblem(t, h.send(t, http.MethodGet, path, a.key, nil), http.StatusNotFound, api.CodeNotFound)
		requireProblem(t, h.send(t, http.MethodDelete, path, a.key, nil), http.StatusNotFound, api.CodeNotFound)
		requireProblem(t, h.send(t, http.MethodGet, "/v1/sessions/not-a-session", a.key, nil), http.StatusNotFound, api.CodeNotFound)
		requireProblem(t, h.send(t, http.MethodGet, path, "", nil), http.StatusUnauthorized, api.CodeUnauthorized)
		requireProblem(t, h.send(t, http.MethodGet, path, a.pk, nil), http.StatusForbidden, api.CodeForbidden)
	})
}

// BenchmarkSessionAuthorizeOverHTTP is the server's cost of one authorization end to end
// (HTTP, key check, verification, the replay-safe transaction, token signing) on each database;
// the challenge fetch and the proof of work are outside the timer.
func BenchmarkSessionAuthorizeOverHTTP(b *testing.B) {
	roomy := limiter.Definition{Kind: limiter.TokenBucket, Rate: 1e9, Period: 1000}
	for _, dialect := range testkit.Dialects {
		b.Run(string(dialect), func(b *testing.B) {
			url := testkit.URL(b, dialect)
			h := newSessionHarness(b, url, func(d *app.Options) { d.ChallengeIPLimit, d.ChallengeKeyLimit = &roomy, &roomy })
			a := h.newCaptchaTenant(b, "acme")
			for b.Loop() {
				b.StopTimer()
				sid := newSessionID(b)
				payload := h.solved(b, a.pk, sid)
				b.StartTimer()
				if r := h.authorize(b, a.key, sid, payload); r.status != http.StatusOK {
					b.Fatalf("authorize: %s", r)
				}
			}
		})
	}
}

// TestAnOriginSavedWithItsDefaultPortMatchesWhatBrowsersSend: browsers send no default port in
// Origin (RFC 6454), so "https://shop.example:443" is saved as "https://shop.example" and a page
// there gets its challenge.
func TestAnOriginSavedWithItsDefaultPortMatchesWhatBrowsersSend(t *testing.T) {
	eachSessionDB(t, nil, func(t *testing.T, h *sessionHarness) {
		a := h.newCaptchaTenant(t, "acme")
		if err := h.tenants.UpdateCaptchaSettings(context.Background(), a.id, []string{"https://shop.example:443"}, tenants.MinCaptchaDifficulty, "test"); err != nil {
			t.Fatal(err)
		}
		r := h.request(t, http.MethodGet, challengePath(a.pk, newSessionID(t)), map[string]string{"Origin": "https://shop.example"})
		if r.status != http.StatusOK {
			t.Fatalf("a page on https://shop.example: %s, want its challenge", r)
		}
	})
}
