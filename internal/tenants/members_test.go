package tenants

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/apperr"
)

// TestInviteIsOneTimeHashedAndExpires: an invite's token is stored only as a hash, accepting it
// creates the member with the invited role once, a second use and an expired link are
// ErrNotFound, and bad input names every field at once.
func TestInviteIsOneTimeHashedAndExpires(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		_, _, err := e.svc.CreateInvite(e.ctx, &acme.ID, "not an email", "owner", 0, "tester")
		if f := apperr.Fields(err); f["email"] == "" || f["role"] == "" {
			t.Fatalf("bad invite: field errors %v (%v)", f, err)
		}
		inv, token, err := e.svc.CreateInvite(e.ctx, &acme.ID, "Viewer@Example.com", RoleViewer, 0, "tester")
		must(t, err)
		if inv.Email != "viewer@example.com" || !inv.ExpiresAt.Equal(inv.CreatedAt.Add(DefaultLinkTTL)) {
			t.Fatalf("invite %+v", inv)
		}
		for _, v := range e.rowsAsText(t, "user_tokens") {
			if strings.Contains(v, token) {
				t.Fatal("the raw invite token is stored")
			}
		}
		if _, err := e.svc.AcceptInvite(e.ctx, token, "short"); apperr.Fields(err)["password"] == "" {
			t.Fatalf("a short password: %v", err)
		}
		u, err := e.svc.AcceptInvite(e.ctx, token, "viewer-password-1")
		must(t, err)
		if u.Role != RoleViewer || u.TenantID == nil || *u.TenantID != acme.ID || u.CanChange(acme.ID) {
			t.Fatalf("accepted user %+v", u)
		}
		_, err = e.svc.AcceptInvite(e.ctx, token, "viewer-password-1")
		wantErr(t, err, ErrNotFound)
		_, _, err = e.svc.CreateInvite(e.ctx, &acme.ID, "viewer@example.com", RoleAdmin, 0, "tester")
		wantErr(t, err, ErrConflict)

		_, late, err := e.svc.CreateInvite(e.ctx, &acme.ID, "late@example.com", RoleAdmin, time.Hour, "tester")
		must(t, err)
		e.clock.Advance(time.Hour)
		_, err = e.svc.InviteByToken(e.ctx, late)
		wantErr(t, err, ErrNotFound)
		_, err = e.svc.AcceptInvite(e.ctx, late, "late-password-1")
		wantErr(t, err, ErrNotFound)
	})
}

// TestInvitesCannotPileUp: a new invite to an address replaces the unused one (whose link then
// fails; the audit entry says so), and invites that expired more than a link's lifetime ago are
// deleted when the tenant next invites; one expired for less is still listed. Other tenants' and
// the operators' invites are left alone.
func TestInvitesCannotPileUp(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme, other := e.tenant(t, "acme"), e.tenant(t, "other")
		invite := func(tenant *int64, email string) string {
			t.Helper()
			role := RoleViewer
			if tenant == nil {
				role = RoleOperator
			}
			_, token, err := e.svc.CreateInvite(e.ctx, tenant, email, role, time.Hour, "tester")
			must(t, err)
			return token
		}
		emails := func(tenant *int64) []string {
			t.Helper()
			invites, err := e.svc.ListInvites(e.ctx, tenant)
			must(t, err)
			var out []string
			for _, inv := range invites {
				out = append(out, inv.Email)
			}
			return out
		}
		first := invite(&acme.ID, "twice@example.com")
		second := invite(&acme.ID, "twice@example.com")
		_, err := e.svc.InviteByToken(e.ctx, first)
		wantErr(t, err, ErrNotFound)
		if _, err := e.svc.InviteByToken(e.ctx, second); err != nil {
			t.Fatalf("the newer invite: %v", err)
		}
		if log, _ := e.svc.AuditLog(e.ctx, acme.ID, 1); len(log) != 1 || !strings.HasSuffix(log[0].Detail, "; replaces 1 unused invite(s) to the address") {
			t.Fatalf("the second invite audited as %+v", log)
		}

		invite(&acme.ID, "old@example.com")
		invite(&other.ID, "old@example.com")
		invite(nil, "old-operator@example.com")
		e.clock.Advance(time.Hour + DefaultLinkTTL) // all four expired, none for longer than DefaultLinkTTL
		invite(&acme.ID, "recent@example.com")
		if got := emails(&acme.ID); !slices.Equal(got, []string{"recent@example.com", "old@example.com", "twice@example.com"}) {
			t.Fatalf("acme's invites after a week: %q", got)
		}
		e.clock.Advance(time.Minute)
		invite(&acme.ID, "new@example.com")
		if got := emails(&acme.ID); !slices.Equal(got, []string{"new@example.com", "recent@example.com"}) {
			t.Fatalf("acme's invites once the old ones expired more than %v ago: %q", DefaultLinkTTL, got)
		}
		if got := emails(&other.ID); !slices.Equal(got, []string{"old@example.com"}) {
			t.Fatalf("another tenant's invites: %q", got)
		}
		if got := emails(nil); !slices.Equal(got, []string{"old-operator@example.com"}) {
			t.Fatalf("the operators' invites: %q", got)
		}
	})
}

// TestRolesRemovalAndDisablingEndSessions: a role change is audited with before and after; a
// removed or disabled member's sessions stop at once and a disabled one cannot log in; a
// tenant's admin reaches only its own members.
func TestRolesRemovalAndDisablingEndSessions(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme, other := e.tenant(t, "acme"), e.tenant(t, "other")
		a, err := e.svc.CreateUser(e.ctx, "a@example.com", "a-password-12", false, &acme.ID, "test", "")
		must(t, err)
		b, err := e.svc.CreateUser(e.ctx, "b@example.com", "b-password-12", false, &acme.ID, "test", "")
		must(t, err)
		if !a.CanChange(acme.ID) || a.CanChange(other.ID) {
			t.Fatalf("an admin's reach: %+v", a)
		}
		wantErr(t, e.svc.SetRole(e.ctx, &other.ID, a.ID, RoleViewer, &other.ID, "x"), ErrNotFound)
		must(t, e.svc.SetRole(e.ctx, &acme.ID, a.ID, RoleViewer, &acme.ID, "user:b@example.com"))
		if u, _ := e.svc.User(e.ctx, a.ID); u.Role != RoleViewer {
			t.Fatalf("role after change: %s", u.Role)
		}
		log, err := e.svc.AuditLog(e.ctx, acme.ID, 10)
		must(t, err)
		if log[0].Action != "user.role" || log[0].Detail != "a@example.com: admin of acme → viewer of acme" {
			t.Fatalf("role change audited as %+v", log[0])
		}

		// An operator's move to another tenant is in both tenants' logs, each naming only itself.
		must(t, e.svc.SetRole(e.ctx, nil, a.ID, RoleViewer, &other.ID, "x"))
		wantDetail := func(tenantID int64, want string) {
			t.Helper()
			log, err := e.svc.AuditLog(e.ctx, tenantID, 1)
			must(t, err)
			if len(log) != 1 || log[0].Action != "user.role" || log[0].Detail != want {
				t.Fatalf("the move audited as %+v, want %q", log, want)
			}
		}
		wantDetail(acme.ID, "a@example.com: viewer of acme → member of another tenant")
		wantDetail(other.ID, "a@example.com: member of another tenant → viewer of other")
		security, err := e.svc.ServerAuditLog(e.ctx, 1)
		must(t, err)
		if len(security) != 1 || security[0].Detail != "a@example.com: viewer of acme → viewer of other" {
			t.Fatalf("the move in the server's log: %+v", security)
		}
		must(t, e.svc.SetRole(e.ctx, nil, a.ID, RoleViewer, &acme.ID, "x"))

		sa, _, err := e.svc.CreateAdminSession(e.ctx, a, time.Hour)
		must(t, err)
		sb, _, err := e.svc.CreateAdminSession(e.ctx, b, time.Hour)
		must(t, err)
		wantErr(t, e.svc.RemoveUser(e.ctx, &other.ID, a.ID, "x"), ErrNotFound)
		must(t, e.svc.RemoveUser(e.ctx, &acme.ID, a.ID, "x"))
		_, err = e.svc.AdminSession(e.ctx, sa)
		wantErr(t, err, ErrUnauthorized)

		must(t, e.svc.SetDisabled(e.ctx, &acme.ID, b.ID, true, "x"))
		_, err = e.svc.AdminSession(e.ctx, sb)
		wantErr(t, err, ErrUnauthorized)
		_, err = e.svc.Login(e.ctx, "b@example.com", "b-password-12", "192.0.2.1")
		wantErr(t, err, ErrUnauthorized)
		must(t, e.svc.SetDisabled(e.ctx, &acme.ID, b.ID, false, "x"))
		_, err = e.svc.Login(e.ctx, "b@example.com", "b-password-12", "192.0.2.1")
		must(t, err)
	})
}

// TestATenantsLastAdminStaysOnItsOwnPage: on the tenant's own members page (scoped), a member
// cannot make its only active admin a viewer, disable or remove them (ErrLastTenantAdmin), so that
// no admin can lock the tenant out of its own dashboard, and two admins demoting each other at
// once leave one; with another admin each works, and an operator may, on that page or elsewhere.
func TestATenantsLastAdminStaysOnItsOwnPage(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		a, err := e.svc.CreateUser(e.ctx, "a@example.com", "a-password-12", false, &acme.ID, "test", "")
		must(t, err)
		v, err := e.svc.CreateUser(e.ctx, "v@example.com", "v-password-12", false, &acme.ID, "test", "")
		must(t, err)
		must(t, e.svc.SetRole(e.ctx, &acme.ID, v.ID, RoleViewer, &acme.ID, "user:a@example.com"))
		wantErr(t, e.svc.SetRole(e.ctx, &acme.ID, a.ID, RoleViewer, &acme.ID, "user:a@example.com"), ErrLastTenantAdmin)
		wantErr(t, e.svc.SetDisabled(e.ctx, &acme.ID, a.ID, true, "user:a@example.com"), ErrLastTenantAdmin)
		wantErr(t, e.svc.RemoveUser(e.ctx, &acme.ID, a.ID, "user:a@example.com"), ErrLastTenantAdmin)
		// A disabled admin is no admin to keep the tenant: disabling the other leaves none.
		b, err := e.svc.CreateUser(e.ctx, "b@example.com", "b-password-12", false, &acme.ID, "test", "")
		must(t, err)
		must(t, e.svc.SetDisabled(e.ctx, &acme.ID, b.ID, true, "user:a@example.com"))
		wantErr(t, e.svc.SetDisabled(e.ctx, &acme.ID, a.ID, true, "user:a@example.com"), ErrLastTenantAdmin)
		must(t, e.svc.SetDisabled(e.ctx, &acme.ID, b.ID, false, "user:a@example.com"))

		// a and b demote each other at once: one of them stays admin.
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, pair := range [][2]User{{a, b}, {b, a}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = e.svc.SetRole(e.ctx, &acme.ID, pair[1].ID, RoleViewer, &acme.ID, "user:"+pair[0].Email)
			}()
		}
		wg.Wait()
		admins := 0
		for _, u := range []User{a, b} {
			if got, _ := e.svc.User(e.ctx, u.ID); got.Role == RoleAdmin {
				admins++
			}
		}
		if admins != 1 || (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("two admins demoting each other at once: %d admins left (errors %v, %v); want one, and one refusal", admins, errs[0], errs[1])
		}
		last := a
		if got, _ := e.svc.User(e.ctx, b.ID); got.Role == RoleAdmin {
			last = b
		}
		_, err = e.svc.CreateUser(e.ctx, "op@example.com", "op-password-123", true, nil, "test", "")
		must(t, err)
		must(t, e.svc.SetRole(e.ctx, &acme.ID, last.ID, RoleViewer, &acme.ID, "user:op@example.com")) // an operator may
	})
}

// TestTwoAdminsRemovingEachOtherLeaveOne: two admins of a tenant each removing the other on its
// page at the same moment leave one of them (the later transaction's actor is gone), as many
// times as it is tried.
func TestTwoAdminsRemovingEachOtherLeaveOne(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		for round := range 5 {
			tn := e.tenant(t, "acme-"+strconv.Itoa(round))
			var admins [2]User
			for i := range admins {
				u, err := e.svc.CreateUser(e.ctx, "admin"+strconv.Itoa(i)+"-"+strconv.Itoa(round)+"@example.com", "admin-password-1", false, &tn.ID, "test", "")
				must(t, err)
				admins[i] = u
			}
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i := range admins {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = e.svc.RemoveUser(e.ctx, &tn.ID, admins[1-i].ID, "user:"+admins[i].Email)
				}()
			}
			wg.Wait()
			left, err := e.svc.ListUsers(e.ctx, &tn.ID)
			must(t, err)
			if len(left) != 1 {
				t.Fatalf("round %d: two admins removing each other left %d members (errors %v, %v); want one", round, len(left), errs[0], errs[1])
			}
		}
	})
}

// TestLastOperatorCannotBeRemovedDisabledOrDemoted: with one active operator each of the three
// is ErrLastOperator; with a second one they work (and the survivor is protected again).
func TestLastOperatorCannotBeRemovedDisabledOrDemoted(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		op1, err := e.svc.CreateUser(e.ctx, "op1@example.com", "op1-password-1", true, nil, "test", "")
		must(t, err)
		wantErr(t, e.svc.RemoveUser(e.ctx, nil, op1.ID, "x"), ErrLastOperator)
		wantErr(t, e.svc.SetDisabled(e.ctx, nil, op1.ID, true, "x"), ErrLastOperator)
		wantErr(t, e.svc.SetRole(e.ctx, nil, op1.ID, RoleAdmin, &acme.ID, "x"), ErrLastOperator)

		op2, err := e.svc.CreateUser(e.ctx, "op2@example.com", "op2-password-1", true, nil, "test", "")
		must(t, err)
		must(t, e.svc.SetDisabled(e.ctx, nil, op2.ID, true, "x"))
		// A disabled operator does not count: op1 is still the last active one.
		wantErr(t, e.svc.RemoveUser(e.ctx, nil, op1.ID, "x"), ErrLastOperator)
		must(t, e.svc.SetDisabled(e.ctx, nil, op2.ID, false, "x"))
		must(t, e.svc.SetRole(e.ctx, nil, op1.ID, RoleAdmin, &acme.ID, "x"))
		if u, _ := e.svc.User(e.ctx, op1.ID); u.IsOperator || u.Role != RoleAdmin || u.TenantID == nil {
			t.Fatalf("demoted operator: %+v", u)
		}
		wantErr(t, e.svc.RemoveUser(e.ctx, nil, op2.ID, "x"), ErrLastOperator)
	})
}

// TestPasswordChangeAndResetEndOtherSessions: changing one's password needs the current one
// (both problems reported at once) and ends the other sessions only; an operator's reset link
// works once, ends every session, and is stored as a hash.
func TestPasswordChangeAndResetEndOtherSessions(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		u, err := e.svc.CreateUser(e.ctx, "m@example.com", "m-password-12", false, &acme.ID, "test", "")
		must(t, err)
		s1, _, err := e.svc.CreateAdminSession(e.ctx, u, time.Hour)
		must(t, err)
		s2, _, err := e.svc.CreateAdminSession(e.ctx, u, time.Hour)
		must(t, err)
		f := apperr.Fields(e.svc.ChangePassword(e.ctx, u.ID, "wrong", "short", s1, "198.51.100.1"))
		if f["current"] == "" || f["password"] == "" {
			t.Fatalf("field errors %v", f)
		}
		must(t, e.svc.ChangePassword(e.ctx, u.ID, "m-password-12", "m-password-34", s1, "198.51.100.1"))
		if _, err := e.svc.AdminSession(e.ctx, s1); err != nil {
			t.Fatalf("the session that changed the password: %v", err)
		}
		_, err = e.svc.AdminSession(e.ctx, s2)
		wantErr(t, err, ErrUnauthorized)
		_, err = e.svc.Login(e.ctx, "m@example.com", "m-password-34", "192.0.2.1")
		must(t, err)

		_, err = e.svc.CreateUser(e.ctx, "op@example.com", "op-password-12", true, nil, "test", "") // the link's maker
		must(t, err)
		token, err := e.svc.CreateResetLink(e.ctx, u.ID, 0, "user:op@example.com")
		must(t, err)
		for _, v := range e.rowsAsText(t, "user_tokens") {
			if strings.Contains(v, token) {
				t.Fatal("the raw reset token is stored")
			}
		}
		if got, err := e.svc.ResetUser(e.ctx, token); err != nil || got.ID != u.ID {
			t.Fatalf("ResetUser: %+v, %v", got, err)
		}
		_, err = e.svc.ResetPassword(e.ctx, token, "m-password-56")
		must(t, err)
		_, err = e.svc.AdminSession(e.ctx, s1)
		wantErr(t, err, ErrUnauthorized)
		_, err = e.svc.ResetPassword(e.ctx, token, "m-password-78")
		wantErr(t, err, ErrNotFound)
		_, err = e.svc.Login(e.ctx, "m@example.com", "m-password-56", "192.0.2.1")
		must(t, err)

		// A password changed another way, or a disabled account, leaves no unused link working.
		stale, err := e.svc.CreateResetLink(e.ctx, u.ID, 0, "user:op@example.com")
		must(t, err)
		must(t, e.svc.SetPassword(e.ctx, u.ID, "m-password-90", "user:op@example.com"))
		_, err = e.svc.ResetPassword(e.ctx, stale, "m-password-91")
		wantErr(t, err, ErrNotFound)
		stale, err = e.svc.CreateResetLink(e.ctx, u.ID, 0, "user:op@example.com")
		must(t, err)
		must(t, e.svc.SetDisabled(e.ctx, nil, u.ID, true, "user:op@example.com"))
		_, err = e.svc.ResetUser(e.ctx, stale)
		wantErr(t, err, ErrNotFound)
	})
}

// TestTwoOperatorsDisablingEachOtherAtOnceLeaveOneActive: two operators disable each other at
// the same moment through two services (two instances) on one database, twenty times; each
// check-then-write is one serializable transaction, so the write skew that would disable both
// never happens: one succeeds and the other is ErrLastOperator. On SQLite and PostgreSQL.
func TestTwoOperatorsDisablingEachOtherAtOnceLeaveOneActive(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		other := NewService(e.db, testPepper, e.clock.Now)
		op1, err := e.svc.CreateUser(e.ctx, "op1@example.com", "op1-password-1", true, nil, "test", "")
		must(t, err)
		op2, err := e.svc.CreateUser(e.ctx, "op2@example.com", "op2-password-1", true, nil, "test", "")
		must(t, err)
		for round := range 20 {
			start := make(chan struct{})
			errs := make(chan error, 2)
			go func() { <-start; errs <- e.svc.SetDisabled(e.ctx, nil, op2.ID, true, "op1") }()
			go func() { <-start; errs <- other.SetDisabled(e.ctx, nil, op1.ID, true, "op2") }()
			close(start)
			ok, last := 0, 0
			for range 2 {
				switch err := <-errs; {
				case err == nil:
					ok++
				case errors.Is(err, ErrLastOperator):
					last++
				default:
					t.Fatalf("round %d: %v", round, err)
				}
			}
			u1, _ := e.svc.User(e.ctx, op1.ID)
			u2, _ := e.svc.User(e.ctx, op2.ID)
			if ok != 1 || last != 1 || (u1.DisabledAt == nil) == (u2.DisabledAt == nil) {
				t.Fatalf("round %d: %d succeeded, %d refused; op1 disabled %v, op2 disabled %v", round, ok, last, u1.DisabledAt != nil, u2.DisabledAt != nil)
			}
			must(t, e.svc.SetDisabled(e.ctx, nil, op1.ID, false, "test"))
			must(t, e.svc.SetDisabled(e.ctx, nil, op2.ID, false, "test"))
		}
	})
}

// TestInvitingATakenEmailRevealsNoOtherAccount: a tenant's admin who invites an email with an
// account elsewhere (another tenant's member, an operator) learns only that the address cannot be
// invited, as ErrConflict on the email field; the precise "a user with this email exists" is for
// operators and for a member of the admin's own tenant (listed to them anyway). An unknown email
// is invited.
func TestInvitingATakenEmailRevealsNoOtherAccount(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme, other := e.tenant(t, "acme"), e.tenant(t, "other")
		create := func(email string, operator bool, tenant *int64) {
			t.Helper()
			_, err := e.svc.CreateUser(e.ctx, email, "a-password-12", operator, tenant, "test", "")
			must(t, err)
		}
		create("op@example.com", true, nil)
		create("admin@acme.example", false, &acme.ID)
		create("member@acme.example", false, &acme.ID)
		create("member@other.example", false, &other.ID)
		// To a tenant's admin, an address with an account elsewhere is invited as one without.
		for _, email := range []string{"member@other.example", "op@example.com"} {
			inv, token, err := e.svc.CreateInvite(e.ctx, &acme.ID, email, RoleViewer, 0, "user:admin@acme.example")
			must(t, err)
			if inv.Email != email || token == "" {
				t.Fatalf("invite of %s: %+v", email, inv)
			}
			// Its acceptance fails: the address has an account.
			_, err = e.svc.AcceptInvite(e.ctx, token, "another-password-1")
			wantErr(t, err, ErrConflict)
		}
		const precise = "a user with this email exists"
		for _, c := range []struct {
			actor, email string
			tenant       *int64
			want         string
		}{
			{"user:admin@acme.example", "member@acme.example", &acme.ID, precise},
			{"user:op@example.com", "member@other.example", &acme.ID, precise},
			{"user:op@example.com", "member@acme.example", nil, precise},
			{"cli", "member@other.example", &acme.ID, precise},
		} {
			role := RoleViewer
			if c.tenant == nil {
				role = RoleOperator
			}
			_, _, err := e.svc.CreateInvite(e.ctx, c.tenant, c.email, role, 0, c.actor)
			wantErr(t, err, ErrConflict)
			if ae := apperr.From(err); ae.Message != c.want || ae.Field != "email" {
				t.Fatalf("%s inviting %s: %q on %q, want %q on email", c.actor, c.email, ae.Message, ae.Field, c.want)
			}
		}
		_, _, err := e.svc.CreateInvite(e.ctx, &acme.ID, "nobody@example.com", RoleViewer, 0, "user:admin@acme.example")
		must(t, err)
	})
}

// TestTwoLoginsReplacingOneSessionAtOnceRevokeAndAuditItOnce: two logins sent at once from a
// browser that holds a live session (a form sent twice, two tabs) both start a session; the old
// one is revoked, and its replacement audited once, not once per login.
func TestTwoLoginsReplacingOneSessionAtOnceRevokeAndAuditItOnce(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		u, err := e.svc.CreateUser(e.ctx, "a@example.com", "member-password-1", false, &acme.ID, "test", "")
		must(t, err)
		old, _, err := e.svc.CreateAdminSession(e.ctx, u, time.Hour)
		must(t, err)
		errs := make(chan error, 2)
		start := make(chan struct{})
		for range 2 {
			go func() {
				<-start
				_, _, err := e.svc.ReplaceAdminSession(e.ctx, old, u, u, time.Hour)
				errs <- err
			}()
		}
		close(start)
		must(t, <-errs)
		must(t, <-errs)
		_, err = e.svc.AdminSession(e.ctx, old)
		wantErr(t, err, ErrUnauthorized)
		log, err := e.svc.AuditLog(e.ctx, acme.ID, 20)
		must(t, err)
		replaced := 0
		for _, a := range log {
			if a.Action == "logout" && strings.Contains(a.Detail, "replaced") {
				replaced++
			}
		}
		if replaced != 1 {
			t.Fatalf("the old session's replacement audited %d times, want once: %+v", replaced, log)
		}
	})
}
