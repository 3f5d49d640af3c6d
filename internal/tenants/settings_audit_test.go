package tenants

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func TestSetSettingIfAbsentHasOneWinnerUnderConcurrency(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		_, err := e.svc.Setting(e.ctx, "secret_key")
		wantErr(t, err, ErrNotFound)

		const n = 16
		results := make([]string, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = e.svc.SetSettingIfAbsent(e.ctx, "secret_key", fmt.Sprintf("value-%d", i))
			})
		}
		close(start)
		wg.Wait()
		for i := range n {
			must(t, errs[i])
			if results[i] != results[0] {
				t.Fatalf("caller %d got %q, caller 0 got %q: more than one winner", i, results[i], results[0])
			}
		}
		if !strings.HasPrefix(results[0], "value-") {
			t.Fatalf("winner %q was not offered by any caller", results[0])
		}
		stored, err := e.svc.Setting(e.ctx, "secret_key")
		must(t, err)
		if stored != results[0] {
			t.Fatalf("Setting = %q, winners got %q", stored, results[0])
		}
		later, err := e.svc.SetSettingIfAbsent(e.ctx, "secret_key", "late")
		must(t, err)
		if later != results[0] {
			t.Fatalf("a later SetSettingIfAbsent replaced the value with %q", later)
		}
	})
}

func TestKeyChangesAndLoginsAreAudited(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn, other := e.tenant(t, "acme"), e.tenant(t, "other")
		dev, err := e.svc.CreateUser(e.ctx, "dev@acme.io", "correct horse battery", false, &tn.ID, "test", "")
		must(t, err)
		k, secret, err := e.svc.CreateKey(e.ctx, tn.ID, KindSecret, "backend", "alice")
		must(t, err)
		must(t, e.svc.RevokeKey(e.ctx, tn.ID, k.ID, "bob"))
		must(t, e.svc.RevokeKey(e.ctx, tn.ID, k.ID, "bob")) // no-op: must not audit twice
		loggedIn, err := e.svc.Login(e.ctx, "dev@acme.io", "correct horse battery", "192.0.2.1")
		must(t, err)
		_, _, err = e.svc.CreateAdminSession(e.ctx, loggedIn, time.Hour) // audits the login
		must(t, err)
		_, err = e.svc.Login(e.ctx, "dev@acme.io", "wrong password!", "192.0.2.1")
		wantErr(t, err, ErrUnauthorized)
		must(t, e.svc.Audit(e.ctx, &other.ID, "carol", "limit.put", "sendMessage", "rate=10"))
		must(t, e.svc.Audit(e.ctx, nil, "cli", "tenant.create", "acme", ""))
		wantErr(t, e.svc.Audit(e.ctx, nil, "cli", " ", "", ""), ErrInvalid)

		log, err := e.svc.AuditLog(e.ctx, tn.ID, 0)
		must(t, err)
		var got []string
		for _, a := range log {
			if a.TenantID == nil || *a.TenantID != tn.ID || !a.CreatedAt.Equal(e.clock.Now()) {
				t.Fatalf("entry %+v", a)
			}
			if strings.Contains(a.Detail+a.Target+a.Actor, secret[8:30]) {
				t.Fatalf("audit entry leaks the secret: %+v", a)
			}
			got = append(got, a.Actor+" "+a.Action+" "+a.Target)
		}
		want := []string{
			fmt.Sprintf("dev@acme.io login.failed user:%d", dev.ID),
			fmt.Sprintf("dev@acme.io login user:%d", dev.ID),
			"bob key.revoke " + k.ID,
			"alice key.create " + k.ID,
			fmt.Sprintf("test user.create user:%d", dev.ID),
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("audit log, newest first:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		limited, err := e.svc.AuditLog(e.ctx, tn.ID, 1)
		must(t, err)
		if len(limited) != 1 || limited[0].Action != "login.failed" {
			t.Fatalf("AuditLog(limit 1) = %+v", limited)
		}
	})
}

// Operator-level events (no tenant) are in the server audit log and nowhere else; failed logins
// and lockouts name the client address and never a password, even one typed as the email.
func TestServerAuditLogHoldsLoginsFailuresAndLockouts(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		op, err := e.svc.CreateUser(e.ctx, "ops@example.com", "correct horse battery", true, nil, "test", "")
		must(t, err)
		dev, err := e.svc.CreateUser(e.ctx, "dev@acme.io", "correct horse battery", false, &tn.ID, "test", "")
		must(t, err)
		for _, l := range [][2]string{{"ops@example.com", "203.0.113.7"}, {"dev@acme.io", "203.0.113.8"}} {
			u, err := e.svc.Login(e.ctx, l[0], "correct horse battery", l[1])
			must(t, err)
			_, _, err = e.svc.CreateAdminSession(e.ctx, u, time.Hour) // audits the login
			must(t, err)
		}
		_, err = e.svc.Login(e.ctx, "secret password typed as email", "x", "198.51.100.1")
		wantErr(t, err, ErrUnauthorized)
		must(t, e.svc.AuditLockout(e.ctx, " OPS@example.com", "198.51.100.2", "dashboard.login.account_ip", "too many", true))
		must(t, e.svc.AuditLockout(e.ctx, "secret password typed as email", "198.51.100.1", "dashboard.login.ip", "too many", false))

		log, err := e.svc.ServerAuditLog(e.ctx, 0)
		must(t, err)
		var got []string
		for _, a := range log {
			if a.TenantID != nil {
				t.Fatalf("server audit log holds a tenant's entry: %+v", a)
			}
			if strings.Contains(a.Actor+a.Target+a.Detail, "secret password") {
				t.Fatalf("an entry records what was typed as the email: %+v", a)
			}
			got = append(got, a.Actor+" "+a.Action+" "+a.Target+" | "+a.Detail)
		}
		want := []string{
			"(not an email address) login.locked dashboard.login.ip | client 198.51.100.1; too many",
			"ops@example.com login.locked dashboard.login.account_ip | client 198.51.100.2; too many",
			"(not an email address) login.failed  | client 198.51.100.1; unknown email",
			fmt.Sprintf("ops@example.com login user:%d | client 203.0.113.7", op.ID),
			fmt.Sprintf("test user.create user:%d | dev@acme.io (admin)", dev.ID),
			fmt.Sprintf("test user.create user:%d | ops@example.com (operator)", op.ID),
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("server audit log, newest first:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}

		// A member's lockout is in its tenant's log too, beside the failures that led to it; an
		// address's lockout is not the account's that was typed last.
		must(t, e.svc.AuditLockout(e.ctx, "Dev@acme.io", "198.51.100.4", "dashboard.login.ip", "too many", false))
		if tenantLog, err := e.svc.AuditLog(e.ctx, tn.ID, 1); err != nil || len(tenantLog) != 1 || tenantLog[0].Action == "login.locked" {
			t.Fatalf("the tenant's newest audit entry after an address's lockout: %+v, %v; want no lockout there", tenantLog, err)
		}
		must(t, e.svc.AuditLockout(e.ctx, "Dev@acme.io", "198.51.100.3", "dashboard.login.account_ip", "too many", true))
		tenantLog, err := e.svc.AuditLog(e.ctx, tn.ID, 1)
		must(t, err)
		if len(tenantLog) != 1 || tenantLog[0].Actor+" "+tenantLog[0].Action+" | "+tenantLog[0].Detail != "dev@acme.io login.locked | client 198.51.100.3; too many" {
			t.Fatalf("the tenant's newest audit entry after its member's lockout: %+v", tenantLog)
		}
		if server, err := e.svc.ServerAuditLog(e.ctx, 1); err != nil || len(server) != 1 || server[0].Action != "login.locked" {
			t.Fatalf("the server's newest audit entry after a member's lockout: %+v, %v; want it there too", server, err)
		}
	})
}

// TestFilteringTheAuditLogByAUserFindsBothItsSpellings: the log names a user "user:EMAIL" for its
// dashboard actions and "EMAIL" for its own logins and failures; a filter by either spelling
// finds both, and nobody else's.
func TestFilteringTheAuditLogByAUserFindsBothItsSpellings(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		must(t, e.svc.Audit(e.ctx, &tn.ID, "dev@acme.io", "login", "user:1", "client 203.0.113.8"))
		must(t, e.svc.Audit(e.ctx, &tn.ID, "user:dev@acme.io", "limit.put", "api", ""))
		must(t, e.svc.Audit(e.ctx, &tn.ID, "user:ops@acme.io", "limit.put", "api", ""))
		must(t, e.svc.Audit(e.ctx, &tn.ID, "key:abc", "limit.put", "api", ""))
		for actor, want := range map[string]string{
			"user:dev@acme.io": "user:dev@acme.io limit.put, dev@acme.io login",
			"dev@acme.io":      "user:dev@acme.io limit.put, dev@acme.io login",
			"user:ops@acme.io": "user:ops@acme.io limit.put",
			"key:abc":          "key:abc limit.put",
		} {
			entries, _, err := e.svc.AuditPage(e.ctx, &tn.ID, AuditQuery{Actor: actor})
			must(t, err)
			var got []string
			for _, a := range entries {
				got = append(got, a.Actor+" "+a.Action)
			}
			if strings.Join(got, ", ") != want {
				t.Errorf("filtered by %q: %q, want %q", actor, strings.Join(got, ", "), want)
			}
		}
	})
}
