package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestCLICreationsAreAudited: `tenant create` is audited in the tenant's log and the security
// log, and `user create` in the security log and, for a member, the tenant's log, as the
// dashboard audits them. Through run, on SQLite and (with TEST_DATABASE_URL) PostgreSQL.
func TestCLICreationsAreAudited(t *testing.T) {
	urls := map[string]string{"sqlite": "sqlite:" + filepath.Join(t.TempDir(), "cli.db")}
	if os.Getenv(testkit.EnvURL) != "" {
		urls["postgres"] = testkit.NewDatabase(t)
	}
	for name, dbURL := range urls {
		t.Run(name, func(t *testing.T) {
			env := appEnv(dbURL, "MIGRATE=auto")
			cliInProcess(t, env, "migrate")
			cliInProcess(t, env, "tenant", "create", "acme")
			for _, u := range [][]string{{"--email", "op@example.com", "--operator"}, {"--email", "m@acme.example", "--tenant", "acme"}} {
				if _, err := cliWithStdin(env, "first-password-1\n", append([]string{"user", "create", "--password-stdin"}, u...)...); err != nil {
					t.Fatal(err)
				}
			}
			svc, closeDB := cliService(t, env)
			defer closeDB()
			ctx := context.Background()
			acme, err := svc.TenantByName(ctx, "acme")
			if err != nil {
				t.Fatal(err)
			}
			member, err := svc.UserByEmail(ctx, "m@acme.example")
			if err != nil {
				t.Fatal(err)
			}
			op, err := svc.UserByEmail(ctx, "op@example.com")
			if err != nil {
				t.Fatal(err)
			}
			server, err := svc.ServerAuditLog(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			tenant, err := svc.AuditLog(ctx, acme.ID, 100)
			if err != nil {
				t.Fatal(err)
			}
			entries := func(log []tenants.AuditEntry) []string {
				var out []string
				for _, e := range log {
					out = append(out, e.Actor+" "+e.Action+" "+e.Target+" "+e.Detail)
				}
				return out
			}
			for _, want := range []struct {
				log   []tenants.AuditEntry
				which string
				entry string
			}{
				{server, "security", "cli tenant.create tenant:" + strconv.FormatInt(acme.ID, 10) + " acme"},
				{tenant, "acme's", "cli tenant.create tenant:" + strconv.FormatInt(acme.ID, 10) + " acme"},
				{server, "security", "cli user.create user:" + strconv.FormatInt(op.ID, 10) + " op@example.com (operator)"},
				{server, "security", "cli user.create user:" + strconv.FormatInt(member.ID, 10) + " m@acme.example (admin)"},
				{tenant, "acme's", "cli user.create user:" + strconv.FormatInt(member.ID, 10) + " m@acme.example (admin)"},
			} {
				if !slices.Contains(entries(want.log), want.entry) {
					t.Errorf("the %s log lacks %q: %q", want.which, want.entry, entries(want.log))
				}
			}
			if operator := "cli user.create user:" + strconv.FormatInt(op.ID, 10) + " op@example.com (operator)"; slices.Contains(entries(tenant), operator) {
				t.Errorf("an operator's creation is in acme's log: %q", entries(tenant))
			}
		})
	}
}
