package tenants

import (
	"strings"
	"testing"
)

// TestCommandFlagProblemsGoToTheErrorNotStdout: a mistyped flag, -h or a word left over makes
// `key create` and `user create` fail with the problem in the error (main writes it on standard
// error) and nothing on stdout, whose first line scripts take as the new secret.
func TestCommandFlagProblemsGoToTheErrorNotStdout(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		if err := e.svc.Command(e.ctx, "tenant", []string{"create", "acme"}, nil, &strings.Builder{}); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"key", "create", "--tenant", "acme", "--lable", "x"}, "flag provided but not defined: -lable"},
			{[]string{"key", "create", "-h"}, "-publishable"},
			{[]string{"key", "create", "--tenant", "acme", "--label", "my", "key"}, `unexpected argument "key"`},
			{[]string{"user", "create", "--emial", "a@example.com"}, "flag provided but not defined: -emial"},
		} {
			var stdout strings.Builder
			err := e.svc.Command(e.ctx, c.args[0], c.args[1:], strings.NewReader(""), &stdout)
			if err == nil || !strings.Contains(err.Error(), c.want) || stdout.Len() != 0 {
				t.Errorf("%v: error %v, stdout %q; want an error containing %q and nothing on stdout", c.args, err, stdout.String(), c.want)
			}
		}
		keys, err := e.svc.ListKeys(e.ctx, mustTenant(t, e, "acme"))
		if err != nil || len(keys) != 0 {
			t.Fatalf("keys after the failed commands: %v, %v; want none", keys, err)
		}
	})
}

func mustTenant(t *testing.T, e *env, name string) int64 {
	t.Helper()
	tn, err := e.svc.TenantByName(e.ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return tn.ID
}
