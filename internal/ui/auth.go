package ui

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"

	"github.com/sluice-dev/sluice/internal/httpserver"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// Session cookies. In production the cookie is "__Host-sluice_session": Secure, Path=/, no
// Domain, so no subdomain and no plain-HTTP page can set or overwrite it. Browsers refuse a
// __Host- cookie without Secure, and refuse Secure cookies over plain HTTP, so when BASE_URL is
// plain HTTP on a loopback host (local development and tests) the cookie is "sluice_session"
// without Secure. Both are HttpOnly and SameSite=Strict.
const (
	cookieSecure   = "__Host-sluice_session"
	cookieInsecure = "sluice_session"

	jwtIssuer   = "sluice"
	jwtAudience = "sluice-dashboard"
)

func (u *UI) cookieName() string {
	if u.insecure {
		return cookieInsecure
	}
	return cookieSecure
}

// sessionClaims is the JWT in the cookie. Its ID (jti) is an admin_sessions row, checked on
// every request: the signature proves we issued the token, the row proves it is still live.
type sessionClaims struct {
	jwt.RegisteredClaims
}

func (u *UI) signSession(userID int64, sessionID string, expires time.Time) (string, error) {
	now := u.now()
	claims := sessionClaims{jwt.RegisteredClaims{
		Issuer:    jwtIssuer,
		Audience:  jwt.ClaimStrings{jwtAudience},
		Subject:   strconv.FormatInt(userID, 10),
		ID:        sessionID,
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(expires),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(u.sessionKey)
}

// sessionLeeway is the clock skew tolerated between instances: a cookie issued by an instance
// whose clock runs up to a minute ahead (iat and nbf "in the future") is accepted, and exp is
// read with the same minute. Revocation does not depend on it: the admin_sessions row is checked
// on every request, and its own expiry uses the database row's time.
const sessionLeeway = time.Minute

// parseSession verifies a cookie's JWT: HS256 only (the algorithm is pinned, so "none", HS512 or
// an RS256 header are refused whatever key they claim), our issuer and audience, and iat, nbf and
// exp by our clock give or take sessionLeeway.
func (u *UI) parseSession(token string) (sessionClaims, error) {
	var claims sessionClaims
	_, err := jwt.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return u.sessionKey, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(jwtIssuer),
		jwt.WithAudience(jwtAudience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(sessionLeeway),
		jwt.WithTimeFunc(u.now),
	)
	if err != nil {
		return sessionClaims{}, fmt.Errorf("%w: %w", errRefused, err)
	}
	if claims.ID == "" || claims.Subject == "" {
		return sessionClaims{}, fmt.Errorf("%w: token without subject or ID", errRefused)
	}
	return claims, nil
}

// startSession creates the admin_sessions row and sets the cookie. user is the user as the
// password check (or the creation, or the reset) returned it: a password changed since, a user
// disabled or removed since, starts no session (tenants.ErrUnauthorized or ErrNotFound). A live
// session the request carries (a login as someone else in the same browser, an invitation or
// reset link opened while logged in) is revoked server-side in the new one's transaction, and
// audited as its logout (tenants.ReplaceAdminSession): the new cookie replaces it, and a saved
// copy of the old cookie must not outlive it.
func (u *UI) startSession(c *gin.Context, user tenants.User) error {
	old, err := u.currentUser(c)
	if err != nil && !errors.Is(err, errRefused) {
		return err // the database cannot say whether the request's session is live
	}
	var id string
	var expires time.Time
	if err == nil {
		id, expires, err = u.tenants.ReplaceAdminSession(c.Request.Context(), old.sessionID, old.user, user, u.ttl)
	} else {
		id, expires, err = u.tenants.CreateAdminSession(c.Request.Context(), user, u.ttl)
	}
	if err != nil {
		return err
	}
	tok, err := u.signSession(user.ID, id, expires)
	if err != nil {
		return fmt.Errorf("sign session: %w", err)
	}
	u.setCookie(c, tok, int(time.Until(expires).Seconds()))
	return nil
}

func (u *UI) setCookie(c *gin.Context, value string, maxAge int) {
	http.SetCookie(c.Writer, &http.Cookie{
		Name:     u.cookieName(),
		Value:    value,
		Path:     "/",
		MaxAge:   maxAge,
		Secure:   !u.insecure,
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
	})
}

// errRefused marks every reason a request is not logged in (no cookie, bad token, dead
// session), as opposed to a failure to find out (the database is down).
var errRefused = errors.New("not logged in")

// principal is the logged-in user of a request.
type principal struct {
	user      tenants.User
	sessionID string
}

const principalKey = "ui.principal"

// currentUser resolves the cookie to a live session, or reports why not.
func (u *UI) currentUser(c *gin.Context) (principal, error) {
	ck, err := c.Request.Cookie(u.cookieName())
	if err != nil || ck.Value == "" {
		return principal{}, fmt.Errorf("%w: no session cookie", errRefused)
	}
	claims, err := u.parseSession(ck.Value)
	if err != nil {
		return principal{}, err
	}
	user, err := u.tenants.AdminSession(c.Request.Context(), claims.ID)
	if errors.Is(err, tenants.ErrUnauthorized) {
		return principal{}, fmt.Errorf("%w: %w", errRefused, err)
	}
	if err != nil {
		return principal{}, err
	}
	if strconv.FormatInt(user.ID, 10) != claims.Subject {
		return principal{}, fmt.Errorf("%w: token subject does not match its session", errRefused)
	}
	return principal{user: user, sessionID: claims.ID}, nil
}

// requireUser lets logged-in users through and sends everyone else to the login page (or, for
// htmx fragment requests, answers 401 with HX-Redirect so the whole page goes there).
func (u *UI) requireUser(c *gin.Context) {
	p, err := u.currentUser(c)
	if err == nil {
		c.Set(principalKey, p)
		c.Next()
		return
	}
	if !errors.Is(err, errRefused) {
		// A database failure must not look like a logout.
		u.internalError(c, err)
		return
	}
	login := "/login"
	if c.GetHeader("HX-Request") == "true" {
		// An htmx poll's own URL is a fragment: after logging in again the user returns to the
		// page that was polling (htmx names it in HX-Current-URL), never to a bare fragment.
		if page, ok := pagePath(c.GetHeader("HX-Current-URL")); ok {
			login += "?next=" + url.QueryEscape(page)
		}
		c.Header("HX-Redirect", login)
		c.AbortWithStatus(http.StatusUnauthorized)
		return
	}
	if c.Request.Method == http.MethodGet {
		login += "?next=" + url.QueryEscape(c.Request.URL.RequestURI())
	}
	redirect(c, login)
}

// pagePath is the path and query of an absolute or relative URL, when it is a local path (the
// login form only ever redirects within the dashboard).
func pagePath(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return "", false
	}
	u.Scheme, u.Host, u.User, u.Fragment = "", "", nil, ""
	return u.RequestURI(), true
}

func principalOf(c *gin.Context) principal {
	p, _ := c.Get(principalKey)
	pr, _ := p.(principal)
	return pr
}

// actor is how the audit log names the logged-in user.
func actor(c *gin.Context) string { return "user:" + principalOf(c).user.Email }

// requireOperator answers 404 (not 403: the page does not exist for them) to non-operators.
func (u *UI) requireOperator(c *gin.Context) {
	if !principalOf(c).user.IsOperator {
		u.NotFound(c)
		return
	}
	c.Next()
}

const tenantKey = "ui.tenant"

// requireTenant loads the tenant named by the URL (:tid) and checks the user may see it:
// operators see every tenant, members only their own. Anything else is a 404, so tenant IDs
// cannot be probed.
func (u *UI) requireTenant(c *gin.Context) {
	id, err := strconv.ParseInt(c.Param("tid"), 10, 64)
	user := principalOf(c).user
	if err != nil || id <= 0 || (!user.IsOperator && (user.TenantID == nil || *user.TenantID != id)) {
		u.NotFound(c)
		return
	}
	t, err := u.tenants.Tenant(c.Request.Context(), id)
	if err != nil {
		u.fail(c, err)
		return
	}
	// Every state change below /tenants/:tid is a POST, so this one check covers every route of
	// the group; the pages that only lead to one (forChangers) are refused alike.
	if writes := c.Request.Method != http.MethodGet && c.Request.Method != http.MethodHead; writes {
		if why := readOnlyReason(user, t); why != "" {
			u.forbidden(c, why)
			return
		}
	}
	c.Set(tenantKey, t)
	c.Next()
}

// readOnlyReason says why user may not change tenant t, or "" when they may: a tenant being
// deleted is read-only for everyone (what a change made would be deleted with it, its audit entry
// too); a suspended tenant's dashboard is read-only for its members, and a viewer's always is;
// operators still act on a suspended one. The pages leave out the forms and links of a user it
// refuses (layoutVM.ReadOnly).
func readOnlyReason(user tenants.User, t tenants.Tenant) string {
	switch {
	case t.Deleting:
		return "This tenant is being deleted: nothing can be changed in it. An operator finishes the deletion by deleting it again from its Manage page."
	case user.IsOperator:
		return ""
	case t.SuspendedAt != nil:
		return "This tenant is suspended: its dashboard is read-only until an operator resumes it."
	case !user.CanChange(t.ID):
		return "You are a viewer of this tenant: you can read everything but change nothing. Ask an admin for the admin role."
	}
	return ""
}

// mayChange reports whether the logged-in user may change the tenant of the request: the pages
// show the forms and links of changes only to one who may (the URLs of the others are left
// empty).
func mayChange(c *gin.Context) bool {
	return readOnlyReason(principalOf(c).user, tenantOf(c)) == ""
}

// forChangers guards a page whose only use is a change (a form to fill in, a confirmation): a
// user who may not change the tenant gets requireTenant's 403 for it, not a form that would.
func (u *UI) forChangers(c *gin.Context) {
	if why := readOnlyReason(principalOf(c).user, tenantOf(c)); why != "" {
		u.forbidden(c, why)
		return
	}
	c.Next()
}

func tenantOf(c *gin.Context) tenants.Tenant {
	t, _ := c.Get(tenantKey)
	tt, _ := t.(tenants.Tenant)
	return tt
}

// csrfCheck refuses cross-origin state-changing requests (http.CrossOriginProtection: the
// Sec-Fetch-Site header, or Origin against Host). Safe methods pass. Where a browser sends no
// Sec-Fetch-Site, CrossOriginProtection compares only Origin's host with Host, so a page served
// over the other scheme of the same host would pass: Origin's scheme must be BASE_URL's too.
func (u *UI) csrfCheck(c *gin.Context) {
	if err := u.csrf.Check(c.Request); err != nil || !u.originSchemeOK(c.Request) {
		u.forbidden(c, "Cross-origin request refused. If you submitted a form, reload the page and try again.")
		return
	}
	c.Next()
}

// originSchemeOK reports whether r's Origin, if a browser without Fetch Metadata sent one with a
// state-changing request, has BASE_URL's scheme.
func (u *UI) originSchemeOK(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	if origin == "" || r.Header.Get("Sec-Fetch-Site") != "" {
		return true
	}
	o, err := url.Parse(origin)
	return err == nil && strings.EqualFold(o.Scheme, u.baseURL.Scheme)
}

// refuseOversizedForms reads a posted form before the handler does, so that a form over the server's body
// limit sent without a declared length (chunked) is answered 413, as one that declares it is:
// the handlers' PostForm drops the parse error and would handle an empty form (a login "wrong").
// It parses every encoding PostForm reads (URL-encoded, the type's case ignored, and
// multipart); ParseMultipartForm alone would answer a URL-encoded body's error with
// ErrNotMultipart, so the URL-encoded parse's error is taken first.
func refuseOversizedForms(c *gin.Context) {
	if c.Request.Method == http.MethodGet || c.Request.Method == http.MethodHead {
		c.Next()
		return
	}
	var tooLarge *http.MaxBytesError
	err := c.Request.ParseForm()
	if err == nil {
		err = c.Request.ParseMultipartForm(formMemory)
	}
	if errors.As(err, &tooLarge) {
		httpserver.TooLarge(c)
		return
	}
	c.Next()
}

// formMemory is how much of a multipart form is held in memory (gin's default): more than the
// body limit, so a form's files never go to disk.
const formMemory = 32 << 20

// Login rate limits: token buckets in tenant 0, which is reserved for the system (tenant IDs
// start at 1). Every password check (a login, or the current password of a password change)
// first spends one token of each limit, all or nothing: concurrent attempts cannot check more
// passwords than the limits hold, and a refused attempt costs no argon2 work. A right password
// resets its account's limit at its address (full again), so a user who types the password
// right is never slowed there by their own successes or earlier typos; it keeps the tokens of
// the other two, which the engine cannot give back to an inline limit, and which a reset would
// let anyone with an account of their own empty of their guesses.
//
//   - per account and client address: 10 failures per 15 minutes. This is the limit a guesser
//     meets, and it cannot touch the real user, who logs in from another address.
//   - per client address (an IPv6 address counts as its /64): 50 attempts per 15 minutes, over
//     all accounts, so one address cannot spray guesses across many accounts.
//   - per account: 5,000 attempts per hour, only a ceiling on a guessing attack spread over many
//     addresses. One address gets at most 50 failures an hour at one account (10 at once, 10
//     more every 15 minutes), so a stranger needs 100 addresses (/64s) busy for an hour to reach
//     it; below that, nobody can lock an account out. Reaching it locks the account for everyone
//     but a trickle (a token every 0.72 s): the price of capping distributed guessing.
var (
	loginCapAccountIP        = 10.0
	loginCapIP               = 50.0
	loginCapAccount          = 5000.0
	defaultLoginPerAccountIP = limiter.Definition{Kind: limiter.TokenBucket, Rate: 10, Period: 15 * 60_000, Capacity: &loginCapAccountIP}
	defaultLoginPerIP        = limiter.Definition{Kind: limiter.TokenBucket, Rate: 50, Period: 15 * 60_000, Capacity: &loginCapIP}
	defaultLoginPerAccount   = limiter.Definition{Kind: limiter.TokenBucket, Rate: 5000, Period: 60 * 60_000, Capacity: &loginCapAccount}
)

const systemTenant = 0

// loginLimits are the login limits, in the order of loginRequests: name for the engine and the
// audit log's lockout entries, reason to say in the log what each counts, and ofAccount for the
// limits that count one account's attempts: their lockouts are that account's (its tenant's log
// has them too), where the address's alone is the address's.
var loginLimits = [...]struct {
	name, reason string
	ofAccount    bool
}{
	{"dashboard.login.account_ip", "too many failed logins for this account from this address", true},
	{"dashboard.login.ip", "too many login attempts from this address", false},
	{"dashboard.login.account", "too many login attempts for this account from all addresses", true},
}

// clientAddress is the address the audit log and the login limits know a client by: gin's
// ClientIP (X-Forwarded-For only from TRUSTED_PROXIES).
func clientAddress(c *gin.Context) string {
	if ip := c.ClientIP(); ip != "" {
		return ip
	}
	return "unknown"
}

// limitAddress is the key of a client address in the login limits: an IPv4 address itself, an
// IPv6 address its /64, which one subscriber usually holds whole (a limit per IPv6 address
// would give every attacker 2^64 fresh addresses).
func limitAddress(addr string) string {
	a, err := netip.ParseAddr(addr)
	switch {
	case err != nil:
		return addr
	case a.Is4() || a.Is4In6():
		return a.Unmap().String()
	default:
		return netip.PrefixFrom(a, 64).Masked().String()
	}
}

// loginRequests are the engine requests of one login attempt. Emails are hashed into the keys,
// so no address (or a password typed into the email field) is stored in limit_state.
func (u *UI) loginRequests(email, addr string) []limiter.Request {
	addr = limitAddress(addr)
	norm := strings.ToLower(strings.TrimSpace(email))
	account := sha256.Sum256([]byte(norm))
	accountIP := sha256.Sum256([]byte(norm + "\x00" + addr))
	perAccountIP, perIP, perAccount := u.loginAccountIP, u.loginIP, u.loginAccount
	return []limiter.Request{
		{Name: loginLimits[0].name, Key: hex.EncodeToString(accountIP[:16]), Count: 1, Config: &perAccountIP},
		{Name: loginLimits[1].name, Key: addr, Count: 1, Config: &perIP},
		{Name: loginLimits[2].name, Key: hex.EncodeToString(account[:16]), Count: 1, Config: &perAccount},
	}
}

// passwordAttempt is one password check that the login limits have paid for.
type passwordAttempt struct {
	email, addr string
	accountAddr string             // the key of the per-account-and-address limit
	limits      []limiter.Decision // what each limit has left after it, in loginRequests' order
}

// payPasswordAttempt spends one token of each login limit for checking email's password from
// addr, all or nothing, before the password is checked. When a limit refuses, nothing is spent
// and wait says how many seconds to wait (0 when the attempt is paid for).
func (u *UI) payPasswordAttempt(c *gin.Context, email, addr string) (a passwordAttempt, wait int64, err error) {
	reqs := u.loginRequests(email, addr)
	b, err := u.engine.Batch(c.Request.Context(), systemTenant, reqs, true)
	if err != nil {
		return passwordAttempt{}, 0, err
	}
	if !b.OK {
		return passwordAttempt{}, limiter.WaitSeconds(b.RetryAfter), nil
	}
	return passwordAttempt{email: email, addr: addr, accountAddr: reqs[0].Key, limits: b.Results}, 0, nil
}

// passwordWrong audits a lockout for each limit that this failed attempt emptied: the next
// attempt it covers will be refused.
func (u *UI) passwordWrong(c *gin.Context, a passwordAttempt) error {
	for i, r := range a.limits {
		if r.Remaining >= 1 {
			continue
		}
		if err := u.tenants.AuditLockout(c.Request.Context(), a.email, a.addr, r.Name, loginLimits[i].reason, loginLimits[i].ofAccount); err != nil {
			return err
		}
	}
	return nil
}

// passwordRight resets the per-account-and-address limit of an attempt whose password was right:
// the user's own successes and earlier typos never lock them out where they log in.
func (u *UI) passwordRight(c *gin.Context, a passwordAttempt) error {
	return u.engine.Reset(c.Request.Context(), systemTenant, loginLimits[0].name, &a.accountAddr, nil)
}

// tooManyAttempts is what a refused password check says.
func tooManyAttempts(c *gin.Context, wait int64) string {
	c.Header("Retry-After", strconv.FormatInt(wait, 10))
	return "Too many login attempts. Try again in " + strconv.FormatInt(wait, 10) + " seconds."
}
