package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// behindProxy makes the test application believe X-Forwarded-For from the loopback address the
// test client connects from, so that requests can come from any client address.
func behindProxy(c *config.Config, _ *app.Options) { c.TrustedProxies = []string{"127.0.0.1"} }

// loginFrom posts the login form as the client at addr.
func (c *client) loginFrom(addr, email, password string) response {
	c.e.t.Helper()
	return c.post("/login", url.Values{"email": {email}, "password": {password}}, "X-Forwarded-For", addr)
}

// A stranger who fails a thousand logins for the operator's email, from addresses of its own,
// does not lock the operator out: limits that refuse are per account and address, and per
// address; the account-wide ceiling is far above what this costs.
func TestStrangerCannotLockTheOperatorOut(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL), behindProxy)
		e.operator()
		const attempts, addresses = 1000, 20
		refusedByLimit := 0
		for i := range attempts {
			addr := "198.51.100." + strconv.Itoa(1+i%addresses)
			res := e.client().loginFrom(addr, opEmail, "wrong-password-"+strconv.Itoa(i))
			switch res.StatusCode {
			case http.StatusUnauthorized:
			case http.StatusTooManyRequests:
				refusedByLimit++
			default:
				t.Fatalf("stranger's attempt %d from %s: status %d, want 401 or 429", i, addr, res.StatusCode)
			}
		}
		if refusedByLimit == 0 {
			t.Fatalf("none of %d failed logins from %d addresses was refused by a limit", attempts, addresses)
		}
		c := e.client()
		res := c.loginFrom("203.0.113.7", opEmail, opPassword)
		if res.StatusCode != http.StatusSeeOther || c.cookie() == "" {
			t.Fatalf("the operator's own login after the stranger's %d failures: status %d, want 303 with a cookie\n%s",
				attempts, res.StatusCode, res.body)
		}
	})
}

// After too many failures for one account from one address, that address is refused even
// with the right password (with Retry-After and without argon2 work); the same account from
// another address and other accounts from the same address still log in.
func TestLoginIsLimitedPerAccountAndAddress(t *testing.T) {
	perAccountIP := limiter.Definition{Kind: limiter.TokenBucket, Rate: 3, Period: 3_600_000}
	e := newEnv(t, behindProxy, func(_ *config.Config, o *app.Options) { o.LoginPerAccountIP = &perAccountIP })
	e.operator()
	const guesser = "198.51.100.9"
	for i := range 3 {
		res := e.client().loginFrom(guesser, opEmail, "wrong-password-"+strconv.Itoa(i))
		wantStatus(t, res, http.StatusUnauthorized)
		if got := text(res.doc(t), "#login-error"); got != "Email or password is wrong." {
			t.Fatalf("error = %q", got)
		}
	}
	res := e.client().loginFrom(guesser, "OP@example.com ", opPassword)
	wantStatus(t, res, http.StatusTooManyRequests)
	if got := text(res.doc(t), "#login-error"); !strings.HasPrefix(got, "Too many login attempts. Try again in") {
		t.Fatalf("error = %q", got)
	}
	if ra, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Fatalf("Retry-After = %q", res.Header.Get("Retry-After"))
	}
	if findCookie(res, cookieName) != nil {
		t.Fatal("a refused login set a cookie")
	}
	if _, err := e.svc.CreateUser(context.Background(), "other@example.com", "other-password-1", true, nil, "test", ""); err != nil {
		t.Fatal(err)
	}
	if res := e.client().loginFrom(guesser, "other@example.com", "other-password-1"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("another account from the guesser's address: status %d, want 303", res.StatusCode)
	}
	if res := e.client().loginFrom("203.0.113.7", opEmail, opPassword); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("the operator from its own address: status %d, want 303", res.StatusCode)
	}
}

// Successful logins, failed logins and lockouts reach the operators' audit page with the
// client address, and never with the password.
func TestLoginsFailuresAndLockoutsAreInTheOperatorsAuditLog(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		perAccountIP := limiter.Definition{Kind: limiter.TokenBucket, Rate: 2, Period: 3_600_000}
		e := newEnv(t, onDatabase(dbURL), behindProxy, func(_ *config.Config, o *app.Options) { o.LoginPerAccountIP = &perAccountIP })
		e.operator()
		const secret = "hunter2-never-logged"
		wantStatus(t, e.client().loginFrom("198.51.100.1", opEmail, secret), http.StatusUnauthorized)
		wantStatus(t, e.client().loginFrom("198.51.100.2", "nobody@example.com", secret+"-2"), http.StatusUnauthorized)
		for range 2 {
			wantStatus(t, e.client().loginFrom("198.51.100.3", opEmail, secret+"-3"), http.StatusUnauthorized)
		}
		wantStatus(t, e.client().loginFrom("198.51.100.3", opEmail, opPassword), http.StatusTooManyRequests)
		c := e.client()
		wantStatus(t, c.loginFrom("203.0.113.7", opEmail, opPassword), http.StatusSeeOther)

		res := c.get("/audit")
		wantStatus(t, res, http.StatusOK)
		if strings.Contains(res.body, secret) {
			t.Fatal("the audit page shows a password")
		}
		type entry struct{ actor, action, detail string }
		var got []entry
		res.doc(t).Find("#audit tbody tr").Each(func(_ int, s *goquery.Selection) {
			got = append(got, entry{strings.TrimSpace(s.Find(".actor").Text()), strings.TrimSpace(s.Find(".action").Text()), strings.TrimSpace(s.Find(".detail").Text())})
		})
		want := []entry{ // newest first
			{opEmail, "login", "client 203.0.113.7"},
			{opEmail, "login.locked", "client 198.51.100.3"},
			{opEmail, "login.failed", "client 198.51.100.3"},
			{opEmail, "login.failed", "client 198.51.100.3"},
			{"nobody@example.com", "login.failed", "client 198.51.100.2"},
			{opEmail, "login.failed", "client 198.51.100.1"},
			{"test", "user.create", opEmail + " (operator)"}, // e.operator()
		}
		if len(got) != len(want) {
			t.Fatalf("audit rows %+v, want %d", got, len(want))
		}
		for i, w := range want {
			if got[i].actor != w.actor || got[i].action != w.action || !strings.Contains(got[i].detail, w.detail) {
				t.Fatalf("row %d = %+v, want %+v (all: %+v)", i, got[i], w, got)
			}
		}

		// Tenant members do not see the server's audit log.
		tn := e.tenant("acme")
		if _, err := e.svc.CreateUser(context.Background(), "dev@acme.io", "member-password-1", false, &tn.ID, "test", ""); err != nil {
			t.Fatal(err)
		}
		member := e.login("dev@acme.io", "member-password-1")
		wantStatus(t, member.get("/audit"), http.StatusNotFound)
	})
}

// An IPv6 client is limited by its /64: hopping between the addresses of one subscriber's
// network does not buy a guesser more attempts, while another network is not affected.
func TestLoginLimitsCountAnIPv6ClientByItsSlash64(t *testing.T) {
	perAccountIP := limiter.Definition{Kind: limiter.TokenBucket, Rate: 2, Period: 3_600_000}
	e := newEnv(t, behindProxy, func(_ *config.Config, o *app.Options) { o.LoginPerAccountIP = &perAccountIP })
	e.operator()
	wantStatus(t, e.client().loginFrom("2001:db8:1:2::a", opEmail, "wrong-password-1"), http.StatusUnauthorized)
	wantStatus(t, e.client().loginFrom("2001:db8:1:2::b", opEmail, "wrong-password-2"), http.StatusUnauthorized)
	wantStatus(t, e.client().loginFrom("2001:db8:1:2:ffff::c", opEmail, opPassword), http.StatusTooManyRequests)
	if res := e.client().loginFrom("2001:db8:1:3::a", opEmail, opPassword); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("the operator from another /64: status %d, want 303", res.StatusCode)
	}
	// The audit log keeps the full address.
	c := e.login(opEmail, opPassword)
	if body := c.get("/audit").body; !strings.Contains(body, "client 2001:db8:1:2::b") {
		t.Fatal("the security log does not show the full IPv6 address of a failed login")
	}
}

// Concurrent wrong logins check no more passwords than the limit holds: each attempt pays its
// token before its password is checked, so the attempts beyond the limit are refused (429)
// without argon2 work, however many arrive at once.
func TestConcurrentWrongLoginsCheckNoMoreThanTheLimit(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		perAccountIP := limiter.Definition{Kind: limiter.TokenBucket, Rate: 3, Period: 3_600_000}
		e := newEnv(t, onDatabase(dbURL), behindProxy, func(_ *config.Config, o *app.Options) { o.LoginPerAccountIP = &perAccountIP })
		e.operator()
		const guesser, attempts = "198.51.100.9", 40
		statuses := make(chan int, attempts)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range attempts {
			wg.Go(func() {
				form := url.Values{"email": {opEmail}, "password": {"wrong-password-" + strconv.Itoa(i)}}
				req, _ := http.NewRequest(http.MethodPost, e.url+"/login", strings.NewReader(form.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("X-Forwarded-For", guesser)
				<-start
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					statuses <- 0
					return
				}
				_ = res.Body.Close()
				statuses <- res.StatusCode
			})
		}
		close(start)
		wg.Wait()
		close(statuses)
		count := map[int]int{}
		for s := range statuses {
			count[s]++
		}
		if count[http.StatusUnauthorized] != 3 || count[http.StatusTooManyRequests] != attempts-3 {
			t.Fatalf("statuses of %d concurrent wrong logins: %v, want 3 × 401 (the limit's worth of password checks) and the rest 429", attempts, count)
		}
		wantStatus(t, e.client().loginFrom(guesser, opEmail, opPassword), http.StatusTooManyRequests)
		if res := e.client().loginFrom("203.0.113.7", opEmail, opPassword); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("the operator from its own address: status %d, want 303", res.StatusCode)
		}
	})
}

// A right password after some typos logs in, and resets the account's limit at that address:
// the user's own successes and typos never add up to a lockout where they log in.
func TestARightPasswordResetsItsAddressLimit(t *testing.T) {
	perAccountIP := limiter.Definition{Kind: limiter.TokenBucket, Rate: 3, Period: 3_600_000}
	e := newEnv(t, behindProxy, func(_ *config.Config, o *app.Options) { o.LoginPerAccountIP = &perAccountIP })
	e.operator()
	const home = "198.51.100.20"
	for range 2 {
		wantStatus(t, e.client().loginFrom(home, opEmail, "a-typo-in-it"), http.StatusUnauthorized)
	}
	wantStatus(t, e.client().loginFrom(home, opEmail, opPassword), http.StatusSeeOther)
	for range 3 {
		wantStatus(t, e.client().loginFrom(home, opEmail, "a-typo-in-it"), http.StatusUnauthorized)
	}
	wantStatus(t, e.client().loginFrom(home, opEmail, opPassword), http.StatusTooManyRequests)
}

// Guessing the current password on the account page spends the login limits as a login does,
// and each wrong guess is in the security log: a stolen session cannot try passwords at argon2
// speed, and once the limit is spent, neither the account page nor the login form checks the
// password from that address.
func TestAWrongCurrentPasswordSpendsTheLoginLimits(t *testing.T) {
	perAccountIP := limiter.Definition{Kind: limiter.TokenBucket, Rate: 3, Period: 3_600_000}
	e := newEnv(t, behindProxy, func(_ *config.Config, o *app.Options) { o.LoginPerAccountIP = &perAccountIP })
	e.operator()
	const thief = "198.51.100.30"
	c := e.client()
	wantStatus(t, c.loginFrom(thief, opEmail, opPassword), http.StatusSeeOther)
	change := func(current string) response {
		return c.post("/account/password", url.Values{"current": {current}, "password": {"stolen-password-1"}, "confirm": {"stolen-password-1"}},
			"X-Forwarded-For", thief)
	}
	for i := range 3 {
		res := change("guess-" + strconv.Itoa(i))
		wantStatus(t, res, http.StatusUnprocessableEntity)
		if text(res.doc(t), "#current-error") == "" {
			t.Fatal("a wrong current password gave no inline error")
		}
	}
	res := change(opPassword)
	wantStatus(t, res, http.StatusTooManyRequests)
	if got := text(res.doc(t), "#current-error"); !strings.HasPrefix(got, "Too many login attempts. Try again in") {
		t.Fatalf("error = %q", got)
	}
	wantStatus(t, e.client().loginFrom(thief, opEmail, opPassword), http.StatusTooManyRequests)

	audit := e.login(opEmail, opPassword).get("/audit").body
	if n := strings.Count(audit, "user.password_failed"); n != 3 {
		t.Fatalf("the security log has %d user.password_failed entries, want 3", n)
	}
	if !strings.Contains(audit, "client "+thief+"; wrong current password") {
		t.Fatal("the security log does not say where the wrong current password came from")
	}
	if !strings.Contains(audit, "login.locked") {
		t.Fatal("the security log does not show the lockout of the third wrong current password")
	}
}

// A login that checked the old password just before a password change or reset committed does
// not keep a session after it: the change is committed in exactly the gap between the login's
// password check and its session (the UI's hook), and the login fails instead; the next login
// with the new password works.
func TestLoginRacingAPasswordChangeStartsNoSession(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL))
		op := e.operator()
		ctx := context.Background()
		var change func() error // committed by the next login between its check and its session
		e.ui.SetAfterPasswordCheck(func() {
			if change != nil {
				if err := change(); err != nil {
					t.Error(err)
				}
				change = nil
			}
		})
		liveSessions := func() int64 {
			t.Helper()
			var n int64
			if err := e.db.Gorm.Table("admin_sessions").Where("user_id = ? AND revoked_at IS NULL", op.ID).Count(&n).Error; err != nil {
				t.Fatal(err)
			}
			return n
		}
		refused := func(password string) {
			t.Helper()
			c := e.client()
			res := c.post("/login", url.Values{"email": {opEmail}, "password": {password}})
			wantStatus(t, res, http.StatusUnauthorized)
			if got := text(res.doc(t), "#login-error"); got != "Email or password is wrong." {
				t.Fatalf("error = %q", got)
			}
			if c.cookie() != "" || findCookie(res, cookieName) != nil {
				t.Fatal("the login set a session cookie")
			}
			if n := liveSessions(); n != 0 {
				t.Fatalf("%d live sessions after the change, want 0", n)
			}
		}

		change = func() error {
			return e.svc.ChangePassword(ctx, op.ID, opPassword, "operator-password-2", "", "192.0.2.1")
		}
		refused(opPassword)

		change = func() error {
			link, err := e.svc.CreateResetLink(ctx, op.ID, 0, "test")
			if err == nil {
				_, err = e.svc.ResetPassword(ctx, link, "operator-password-3")
			}
			return err
		}
		refused("operator-password-2")

		c := e.login(opEmail, "operator-password-3")
		wantStatus(t, c.get("/tenants"), http.StatusOK)
	})
}
