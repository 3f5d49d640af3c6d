package tenants

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/apperr"
)

func TestPasswordsAreStoredAsArgon2idHashes(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		const password = "correct horse battery"
		u1, err := e.svc.CreateUser(e.ctx, "Ops@Example.com", password, true, nil, "test", "")
		must(t, err)
		if u1.Email != "ops@example.com" || !u1.IsOperator || u1.TenantID != nil || !u1.CreatedAt.Equal(e.clock.Now()) {
			t.Fatalf("CreateUser = %+v", u1)
		}
		_, err = e.svc.CreateUser(e.ctx, "ops2@example.com", password, true, nil, "test", "")
		must(t, err)
		var hashes []string
		must(t, e.db.Gorm.WithContext(e.ctx).Table("users").Order("id").Pluck("password_hash", &hashes).Error)
		if len(hashes) != 2 {
			t.Fatalf("%d users stored", len(hashes))
		}
		for _, h := range hashes {
			if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") || strings.Contains(h, password) {
				t.Fatalf("password_hash %q is not an argon2id PHC string", h)
			}
		}
		if hashes[0] == hashes[1] {
			t.Fatal("same password gave the same hash: salt missing")
		}
		for _, v := range e.rowsAsText(t, "users") {
			if strings.Contains(v, password) {
				t.Fatalf("users row contains the password: %q", v)
			}
		}
	})
}

func TestCreateUserValidatesInput(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		id := tn.ID
		member, err := e.svc.CreateUser(e.ctx, "dev@acme.io", "0123456789", false, &id, "test", "")
		must(t, err)
		if member.TenantID == nil || *member.TenantID != tn.ID || member.IsOperator {
			t.Fatalf("member = %+v", member)
		}
		missing := tn.ID + 100
		for name, c := range map[string]struct {
			email, password string
			operator        bool
			tenant          *int64
			want            error
		}{
			"short password":        {"a@b.io", "012345678", true, nil, ErrInvalid},
			"bad email":             {"not-an-email", "0123456789", true, nil, ErrInvalid},
			"display name":          {"Ann <ann@b.io>", "0123456789", true, nil, ErrInvalid},
			"operator and member":   {"a@b.io", "0123456789", true, &id, ErrInvalid},
			"neither":               {"a@b.io", "0123456789", false, nil, ErrInvalid},
			"duplicate, other case": {"DEV@acme.io", "0123456789", true, nil, ErrConflict},
			"unknown tenant":        {"x@acme.io", "0123456789", false, &missing, ErrNotFound},
			"password far too long": {"a@b.io", strings.Repeat("p", 2000), true, nil, ErrInvalid},
			"nine multibyte runes":  {"c@b.io", "ééééééééé", true, nil, ErrInvalid},
		} {
			_, err := e.svc.CreateUser(e.ctx, c.email, c.password, c.operator, c.tenant, "test", "")
			if !errorsIs(err, c.want) {
				t.Errorf("%s: CreateUser = %v, want %v", name, err, c.want)
			}
		}
		n, err := e.svc.CountUsers(e.ctx)
		must(t, err)
		if n != 1 {
			t.Fatalf("CountUsers = %d, want 1", n)
		}
	})
}

func TestLoginRefusesWrongPasswordAndUnknownEmail(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		created, err := e.svc.CreateUser(e.ctx, "ops@example.com", "correct horse battery", true, nil, "test", "")
		must(t, err)
		u, err := e.svc.Login(e.ctx, " OPS@example.com", "correct horse battery", "192.0.2.1")
		must(t, err)
		if u.ID != created.ID {
			t.Fatalf("Login = %+v, want user %d", u, created.ID)
		}
		for _, c := range [][2]string{
			{"ops@example.com", "correct horse batterY"},
			{"ops@example.com", ""},
			{"nobody@example.com", "correct horse battery"},
			{"", ""},
			{"bad\x00email", "x"},
		} {
			_, err := e.svc.Login(e.ctx, c[0], c[1], "192.0.2.1")
			wantErr(t, err, ErrUnauthorized)
		}
	})
}

func TestUsersAreListedPerTenant(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		a, b := e.tenant(t, "a"), e.tenant(t, "b")
		_, err := e.svc.CreateUser(e.ctx, "op@x.io", "0123456789", true, nil, "test", "")
		must(t, err)
		_, err = e.svc.CreateUser(e.ctx, "a1@x.io", "0123456789", false, &a.ID, "test", "")
		must(t, err)
		ub, err := e.svc.CreateUser(e.ctx, "b1@x.io", "0123456789", false, &b.ID, "test", "")
		must(t, err)
		onlyB, err := e.svc.ListUsers(e.ctx, &b.ID)
		must(t, err)
		if len(onlyB) != 1 || onlyB[0].ID != ub.ID {
			t.Fatalf("ListUsers(b) = %+v", onlyB)
		}
		all, err := e.svc.ListUsers(e.ctx, nil)
		must(t, err)
		if len(all) != 3 || all[0].Email != "a1@x.io" {
			t.Fatalf("ListUsers(nil) = %+v", all)
		}
		got, err := e.svc.User(e.ctx, ub.ID)
		must(t, err)
		if got.Email != "b1@x.io" || *got.TenantID != b.ID {
			t.Fatalf("User = %+v", got)
		}
		_, err = e.svc.User(e.ctx, ub.ID+100)
		wantErr(t, err, ErrNotFound)
	})
}

func TestAdminSessionExpiresAndCanBeRevoked(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		u, err := e.svc.CreateUser(e.ctx, "ops@example.com", "correct horse battery", true, nil, "test", "")
		must(t, err)
		id, expires, err := e.svc.CreateAdminSession(e.ctx, u, time.Hour)
		must(t, err)
		if len(id) != 32 || !expires.Equal(e.clock.Now().Add(time.Hour)) {
			t.Fatalf("session %q expires %v", id, expires)
		}
		got, err := e.svc.AdminSession(e.ctx, id)
		must(t, err)
		if got.ID != u.ID {
			t.Fatalf("AdminSession user = %+v", got)
		}
		e.clock.Advance(time.Hour - time.Microsecond)
		_, err = e.svc.AdminSession(e.ctx, id)
		must(t, err)
		e.clock.Advance(time.Microsecond)
		_, err = e.svc.AdminSession(e.ctx, id)
		wantErr(t, err, ErrUnauthorized)

		id2, _, err := e.svc.CreateAdminSession(e.ctx, u, time.Hour)
		must(t, err)
		if id2 == id {
			t.Fatal("two sessions share an ID")
		}
		must(t, e.svc.RevokeAdminSession(e.ctx, id2))
		_, err = e.svc.AdminSession(e.ctx, id2)
		wantErr(t, err, ErrUnauthorized)
		must(t, e.svc.RevokeAdminSession(e.ctx, id2)) // logout twice is fine

		_, err = e.svc.AdminSession(e.ctx, strings.Repeat("0", 32))
		wantErr(t, err, ErrUnauthorized)
		_, err = e.svc.AdminSession(e.ctx, "'; DROP TABLE users; --")
		wantErr(t, err, ErrUnauthorized)
		wantErr(t, e.svc.RevokeAdminSession(e.ctx, strings.Repeat("0", 32)), ErrNotFound)
		_, _, err = e.svc.CreateAdminSession(e.ctx, User{ID: u.ID + 100, credential: u.credential}, time.Hour)
		wantErr(t, err, ErrNotFound)
		_, _, err = e.svc.CreateAdminSession(e.ctx, u, 0)
		wantErr(t, err, ErrInvalid)
	})
}

// An invalid argument is an ErrInvalid that carries, as data, the field and a message fit to
// show: the dashboard renders it without cutting up the error text.
func TestInvalidInputCarriesItsFieldAndAClientSafeMessage(t *testing.T) {
	for _, tc := range []struct {
		err          func() error
		field, human string
	}{
		{func() error {
			_, err := (&Service{}).CreateUser(context.Background(), "a@b.io", "short", true, nil, "test", "")
			return err
		}, "password", "password must be at least 10 characters and at most 1024 bytes (a character outside ASCII takes 2 to 4)"},
		{func() error {
			_, err := (&Service{}).CreateUser(context.Background(), "Ann <ann@b.io>", "0123456789", true, nil, "test", "")
			return err
		}, "email", `email "ann <ann@b.io>" is not a plain address like name@example.com`},
		{func() error {
			_, err := (&Service{}).CreateUser(context.Background(), "\xff@b.io", "0123456789", true, nil, "test", "")
			return err
		}, "email", "email is not valid UTF-8"},
		{func() error { _, err := NormalizeOrigins([]string{"ftp://x.io"}); return err }, "origins", ""},
	} {
		err := tc.err()
		wantErr(t, err, ErrInvalid)
		e := apperr.From(err)
		if e.Code != apperr.InvalidRequest || e.Field != tc.field || (tc.human != "" && e.Message != tc.human) {
			t.Errorf("%v: code %q field %q message %q; want invalid_request, %q, %q", err, e.Code, e.Field, e.Message, tc.field, tc.human)
		}
		if strings.Contains(e.Message, "tenants:") || e.Message == ErrInvalid.Message {
			t.Errorf("%v: the message %q is not the specific reason", err, e.Message)
		}
	}
}

// TestSessionStartsOnlyWithThePasswordStillChecked: a login checks the password in a transaction
// of its own and starts its session in another; a password change or reset, a disabling or a
// removal committed between the two ends the sessions that exist then, so the session that comes
// after must not start. Each change is committed in exactly that gap (after Login, before
// CreateAdminSession); the user a change, a creation or a reset returns still starts one.
func TestSessionStartsOnlyWithThePasswordStillChecked(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		const addr = "198.51.100.7"
		acme := e.tenant(t, "acme")
		created, err := e.svc.CreateUser(e.ctx, "m@example.com", "m-password-01", false, &acme.ID, "test", "")
		must(t, err)
		sessions := func() int64 {
			t.Helper()
			var n int64
			must(t, e.db.Gorm.Model(&adminSessionRow{}).Where("user_id = ? AND revoked_at IS NULL", created.ID).Count(&n).Error)
			return n
		}
		login := func(password string) User {
			t.Helper()
			u, err := e.svc.Login(e.ctx, "m@example.com", password, addr)
			must(t, err)
			return u
		}

		// The straightforward path: the session of a login, or of the user CreateUser returned.
		_, _, err = e.svc.CreateAdminSession(e.ctx, login("m-password-01"), time.Hour)
		must(t, err)
		_, _, err = e.svc.CreateAdminSession(e.ctx, created, time.Hour)
		must(t, err)

		// The user's own change: the other login's session must not start after it.
		checked := login("m-password-01")
		must(t, e.svc.ChangePassword(e.ctx, created.ID, "m-password-01", "m-password-02", "", addr))
		_, _, err = e.svc.CreateAdminSession(e.ctx, checked, time.Hour)
		wantErr(t, err, ErrUnauthorized)
		if n := sessions(); n != 0 {
			t.Fatalf("%d live sessions after the password change, want 0", n)
		}

		// An operator's reset link: the same, and the user ResetPassword returns logs in.
		checked = login("m-password-02")
		link, err := e.svc.CreateResetLink(e.ctx, created.ID, 0, "test")
		must(t, err)
		reset, err := e.svc.ResetPassword(e.ctx, link, "m-password-03")
		must(t, err)
		_, _, err = e.svc.CreateAdminSession(e.ctx, checked, time.Hour)
		wantErr(t, err, ErrUnauthorized)
		if n := sessions(); n != 0 {
			t.Fatalf("%d live sessions after the reset, want 0", n)
		}
		_, _, err = e.svc.CreateAdminSession(e.ctx, reset, time.Hour)
		must(t, err)

		// The CLI's `user passwd`.
		checked = login("m-password-03")
		must(t, e.svc.SetPassword(e.ctx, created.ID, "m-password-04", "cli"))
		_, _, err = e.svc.CreateAdminSession(e.ctx, checked, time.Hour)
		wantErr(t, err, ErrUnauthorized)

		// Disabled, then removed, in the gap.
		checked = login("m-password-04")
		must(t, e.svc.SetDisabled(e.ctx, &acme.ID, created.ID, true, "test"))
		_, _, err = e.svc.CreateAdminSession(e.ctx, checked, time.Hour)
		wantErr(t, err, ErrUnauthorized)
		must(t, e.svc.SetDisabled(e.ctx, &acme.ID, created.ID, false, "test"))
		checked = login("m-password-04")
		must(t, e.svc.RemoveUser(e.ctx, &acme.ID, created.ID, "test"))
		_, _, err = e.svc.CreateAdminSession(e.ctx, checked, time.Hour)
		wantErr(t, err, ErrNotFound)
		if n := sessions(); n != 0 {
			t.Fatalf("%d live sessions of a removed user", n)
		}

		// A User value that no password check produced starts nothing.
		_, _, err = e.svc.CreateAdminSession(e.ctx, User{ID: created.ID}, time.Hour)
		wantErr(t, err, ErrNotFound)
		op, err := e.svc.CreateUser(e.ctx, "op@example.com", "op-password-01", true, nil, "test", "")
		must(t, err)
		_, _, err = e.svc.CreateAdminSession(e.ctx, User{ID: op.ID}, time.Hour)
		wantErr(t, err, ErrUnauthorized)

		// An accepted invitation logs its new member in.
		_, token, err := e.svc.CreateInvite(e.ctx, &acme.ID, "n@example.com", RoleViewer, 0, "test")
		must(t, err)
		joined, err := e.svc.AcceptInvite(e.ctx, token, "n-password-01")
		must(t, err)
		_, _, err = e.svc.CreateAdminSession(e.ctx, joined, time.Hour)
		must(t, err)
	})
}

// TestCreateFirstOperatorOnlyOnAnEmptyDatabase: the first operator (a setup link's) is created
// only while no user exists, checked in the creating transaction: after any user, and when two
// are created at once, one operator results.
func TestCreateFirstOperatorOnlyOnAnEmptyDatabase(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		emails := []string{"first@example.com", "second@example.com"}
		errs := make([]error, len(emails))
		var wg sync.WaitGroup
		for i, email := range emails {
			wg.Go(func() { _, errs[i] = e.svc.CreateFirstOperator(e.ctx, email, "first-password-1", "test", "setup") })
		}
		wg.Wait()
		won := 0
		for i, err := range errs {
			if err == nil {
				won++
			} else {
				wantErr(t, err, ErrConflict)
				if _, err := e.svc.UserByEmail(e.ctx, emails[i]); !errors.Is(err, ErrNotFound) {
					t.Fatalf("the refused %s exists: %v", emails[i], err)
				}
			}
		}
		if n, err := e.svc.CountUsers(e.ctx); err != nil || won != 1 || n != 1 {
			t.Fatalf("%d created, %d users (%v), want 1 and 1", won, n, err)
		}
		// Once a user exists, even a new address is refused.
		_, err := e.svc.CreateFirstOperator(e.ctx, "third@example.com", "first-password-1", "test", "setup")
		wantErr(t, err, ErrConflict)
		if n, _ := e.svc.CountUsers(e.ctx); n != 1 {
			t.Fatalf("%d users, want 1", n)
		}
	})
}

// TestLoginIsAuditedByTheSessionItStarts: a password check alone audits no "login"; the session
// CreateAdminSession starts for the user Login returned audits it, once, with the client address,
// in the user's tenant log (an operator's in the server log). A login whose session is refused
// (the password changed in the gap) is not a login, and a session of a user no login returned
// (a creation, an invitation, a reset) audits none either.
func TestLoginIsAuditedByTheSessionItStarts(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		m, err := e.svc.CreateUser(e.ctx, "m@example.com", "m-password-01", false, &acme.ID, "test", "")
		must(t, err)
		op, err := e.svc.CreateUser(e.ctx, "op@example.com", "op-password-01", true, nil, "test", "")
		must(t, err)
		logins := func(tenantID *int64) []string {
			t.Helper()
			var log []AuditEntry
			if tenantID == nil {
				log, err = e.svc.ServerAuditLog(e.ctx, 0)
			} else {
				log, err = e.svc.AuditLog(e.ctx, *tenantID, 0)
			}
			must(t, err)
			var got []string
			for _, a := range log {
				if a.Action == "login" {
					got = append(got, fmt.Sprintf("%s %s | %s", a.Actor, a.Target, a.Detail))
				}
			}
			return got
		}
		want := func(tenantID *int64, entries ...string) {
			t.Helper()
			if got := logins(tenantID); strings.Join(got, "\n") != strings.Join(entries, "\n") {
				t.Fatalf("login entries, newest first:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(entries, "\n"))
			}
		}

		checked, err := e.svc.Login(e.ctx, "m@example.com", "m-password-01", "198.51.100.1")
		must(t, err)
		want(&acme.ID) // a password check is not yet a login
		_, _, err = e.svc.CreateAdminSession(e.ctx, checked, time.Hour)
		must(t, err)
		first := fmt.Sprintf("m@example.com user:%d | client 198.51.100.1", m.ID)
		want(&acme.ID, first)
		want(nil) // a member's login is in its tenant's log only

		// The password changes between the check and the session: no session, no "login".
		checked, err = e.svc.Login(e.ctx, "m@example.com", "m-password-01", "198.51.100.2")
		must(t, err)
		must(t, e.svc.ChangePassword(e.ctx, m.ID, "m-password-01", "m-password-02", "", "198.51.100.2"))
		_, _, err = e.svc.CreateAdminSession(e.ctx, checked, time.Hour)
		wantErr(t, err, ErrUnauthorized)
		want(&acme.ID, first)

		// Disabled in the gap: the same.
		checked, err = e.svc.Login(e.ctx, "m@example.com", "m-password-02", "198.51.100.3")
		must(t, err)
		must(t, e.svc.SetDisabled(e.ctx, &acme.ID, m.ID, true, "test"))
		_, _, err = e.svc.CreateAdminSession(e.ctx, checked, time.Hour)
		wantErr(t, err, ErrUnauthorized)
		want(&acme.ID, first)

		// Sessions that no login started: the user a creation or an accepted invitation returned.
		_, _, err = e.svc.CreateAdminSession(e.ctx, op, time.Hour)
		must(t, err)
		_, token, err := e.svc.CreateInvite(e.ctx, &acme.ID, "n@example.com", RoleViewer, 0, "test")
		must(t, err)
		joined, err := e.svc.AcceptInvite(e.ctx, token, "n-password-01")
		must(t, err)
		_, _, err = e.svc.CreateAdminSession(e.ctx, joined, time.Hour)
		must(t, err)
		want(&acme.ID, first)
		want(nil)

		// An operator's login, in the server log.
		checked, err = e.svc.Login(e.ctx, "OP@example.com", "op-password-01", "2001:db8::7")
		must(t, err)
		_, _, err = e.svc.CreateAdminSession(e.ctx, checked, time.Hour)
		must(t, err)
		want(nil, fmt.Sprintf("op@example.com user:%d | client 2001:db8::7", op.ID))
		want(&acme.ID, first)
	})
}
