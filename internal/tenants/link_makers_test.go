package tenants

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
	"github.com/sluice-dev/sluice/migrations"
)

// A one-time link dies with its maker's right to make it: removing, disabling or demoting the
// user who made an invite (or a reset link) deletes the unused links they may no longer make, in
// the same transaction, so nobody keeps a way back in after losing their role. Links that the
// new role could still make, and links made by the command line, stay.
func TestLinksDieWithTheirMakersRights(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		user := func(email string, operator bool, tenant *int64) User {
			t.Helper()
			u, err := e.svc.CreateUser(e.ctx, email, "some-password-1", operator, tenant, "test", "")
			must(t, err)
			return u
		}
		invite := func(maker string, tenant *int64, email string, role Role) string {
			t.Helper()
			_, token, err := e.svc.CreateInvite(e.ctx, tenant, email, role, 0, maker)
			must(t, err)
			return token
		}
		live := func(token string) bool {
			t.Helper()
			_, err := e.svc.InviteByToken(e.ctx, token)
			return err == nil
		}
		user("op@example.com", true, nil)
		removed := user("removed@example.com", false, &acme.ID)
		disabled := user("disabled@example.com", false, &acme.ID)
		demoted := user("demoted@example.com", false, &acme.ID)
		op2 := user("op2@example.com", true, nil)
		member := user("member@example.com", false, &acme.ID)

		byRemoved := invite("user:removed@example.com", &acme.ID, "a@example.com", RoleAdmin)
		byDisabled := invite("user:disabled@example.com", &acme.ID, "b@example.com", RoleAdmin)
		byDemoted := invite("user:demoted@example.com", &acme.ID, "c@example.com", RoleAdmin)
		byCLI := invite("cli", &acme.ID, "d@example.com", RoleViewer)
		opInvite := invite("user:op2@example.com", nil, "e@example.com", RoleOperator)
		opAcmeInvite := invite("user:op2@example.com", &acme.ID, "f@example.com", RoleAdmin)
		reset, err := e.svc.CreateResetLink(e.ctx, member.ID, 0, "user:op2@example.com")
		must(t, err)

		must(t, e.svc.RemoveUser(e.ctx, &acme.ID, removed.ID, "user:op@example.com"))
		must(t, e.svc.SetDisabled(e.ctx, &acme.ID, disabled.ID, true, "user:op@example.com"))
		must(t, e.svc.SetDisabled(e.ctx, &acme.ID, disabled.ID, false, "user:op@example.com"))
		must(t, e.svc.SetRole(e.ctx, &acme.ID, demoted.ID, RoleViewer, &acme.ID, "user:op@example.com"))
		must(t, e.svc.SetRole(e.ctx, nil, op2.ID, RoleAdmin, &acme.ID, "user:op@example.com"))

		for name, token := range map[string]string{"removed": byRemoved, "disabled (and enabled again)": byDisabled,
			"demoted to viewer": byDemoted, "demoted from operator (an operator invite)": opInvite} {
			if live(token) {
				t.Errorf("the invite of a maker %s still works", name)
			}
			if _, err := e.svc.AcceptInvite(e.ctx, token, "joined-password-1"); err == nil {
				t.Errorf("the invite of a maker %s was accepted", name)
			}
		}
		if _, err := e.svc.ResetUser(e.ctx, reset); err == nil {
			t.Error("the reset link of an operator demoted to admin still works")
		}
		if !live(opAcmeInvite) {
			t.Error("an operator demoted to admin of acme lost an invite to acme, which an admin of acme may make")
		}
		if !live(byCLI) {
			t.Error("the command line's invite died with changes to other users")
		}

		log, err := e.svc.AuditLog(e.ctx, acme.ID, 20)
		must(t, err)
		found := false
		for _, a := range log {
			if a.Action == "user.remove" && strings.Contains(a.Detail, "removed@example.com") {
				found = strings.Contains(a.Detail, "1 unused link(s) they made deleted")
			}
		}
		if !found {
			t.Errorf("the removal's audit entry does not say a link was deleted: %+v", log)
		}

		// A user no longer allowed (or no longer there) cannot make a link: the request that
		// began before the change is refused inside the transaction that would store the link.
		for _, maker := range []string{"user:removed@example.com", "user:demoted@example.com", "user:op2@example.com"} {
			_, _, err := e.svc.CreateInvite(e.ctx, nil, "g@example.com", RoleOperator, 0, maker)
			wantErr(t, err, ErrUnauthorized)
		}
		_, _, err = e.svc.CreateInvite(e.ctx, &acme.ID, "g@example.com", RoleViewer, 0, "user:demoted@example.com")
		wantErr(t, err, ErrUnauthorized)
		_, err = e.svc.CreateResetLink(e.ctx, member.ID, 0, "user:op2@example.com")
		wantErr(t, err, ErrUnauthorized)
	})
}

// Migration 00017 gives the unused links made before it the user their created_by names, when
// that user still exists, so that the rule above holds for them too; the others (the command
// line's, or a maker since removed) keep no maker and work until they expire.
func TestMigration00017FindsTheMakersOfOlderLinks(t *testing.T) {
	for _, dialect := range testkit.Dialects {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d, err := db.Open(ctx, testkit.URL(t, dialect), db.Options{})
			must(t, err)
			t.Cleanup(func() { _ = d.Close() })
			sub, err := fs.Sub(migrations.FS, string(dialect))
			must(t, err)
			gd := goose.DialectPostgres
			if dialect == db.SQLite {
				gd = goose.DialectSQLite3
			}
			p, err := goose.NewProvider(gd, d.SQL, sub)
			must(t, err)
			_, err = p.UpTo(ctx, 16)
			must(t, err)
			now := time.Now().UTC()
			must(t, d.Gorm.Exec(`INSERT INTO users (id, email, password_hash, is_operator, created_at) VALUES (7, 'op@example.com', 'x', TRUE, ?)`, now).Error)
			for _, link := range []struct {
				hash, by string
				used     *time.Time
			}{{"h1", "user:op@example.com", nil}, {"h2", "cli", nil}, {"h3", "user:gone@example.com", nil}, {"h4", "user:op@example.com", &now}} {
				must(t, d.Gorm.Exec(`INSERT INTO user_tokens (kind, token_hash, email, role, created_by, created_at, expires_at, used_at)
					VALUES ('invite', ?, 'new@example.com', 'operator', ?, ?, ?, ?)`, link.hash, link.by, now, now.Add(time.Hour), link.used).Error)
			}
			must(t, d.Migrate(ctx))
			var rows []userTokenRow
			must(t, d.Gorm.Order("token_hash").Find(&rows).Error)
			got := map[string]int64{}
			for _, r := range rows {
				if r.CreatedByUserID != nil {
					got[r.TokenHash] = *r.CreatedByUserID
				}
			}
			if len(got) != 1 || got["h1"] != 7 {
				t.Fatalf("makers after the migration: %v, want only the unused link of the existing user (h1: 7)", got)
			}
		})
	}
}
