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

// TestCommandProblemsSayWhatIsWrongPlainly: a name already taken or naming no tenant is said in
// a sentence, not as the error codes of the layers below ("conflict: conflict", "not_found: not
// found"), and the commands that change a tenant say what they did.
func TestCommandProblemsSayWhatIsWrongPlainly(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		run := func(args ...string) (string, error) {
			var stdout strings.Builder
			err := e.svc.Command(e.ctx, args[0], args[1:], strings.NewReader(""), &stdout)
			return stdout.String(), err
		}
		for _, name := range []string{"acme", "beta"} {
			if _, err := run("tenant", "create", name); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"tenant", "create", "acme"}, `a tenant named "acme" already exists (names are compared ignoring case)`},
			{[]string{"tenant", "create", "ACME"}, `a tenant named "ACME" already exists (names are compared ignoring case)`},
			{[]string{"tenant", "rename", "acme", "beta"}, `a tenant named "beta" already exists (names are compared ignoring case)`},
			{[]string{"key", "list", "nope"}, `no tenant named "nope"`},
			{[]string{"key", "create", "--tenant", "nope"}, `no tenant named "nope"`},
			{[]string{"tenant", "suspend", "nope"}, `no tenant named "nope"`},
			{[]string{"tenant", "delete", "nope", "--yes"}, `no tenant named "nope"`},
		} {
			if _, err := run(c.args...); err == nil || err.Error() != c.want {
				t.Errorf("%v: %v; want %q", c.args, err, c.want)
			}
		}
		for _, email := range []string{"ann@acme.example", "Ann@Acme.example"} {
			var stdout strings.Builder
			err := e.svc.Command(e.ctx, "user", []string{"create", "--email", email, "--password-stdin", "--tenant", "acme"}, strings.NewReader("a-long-password-1\n"), &stdout)
			if email == "ann@acme.example" && err != nil {
				t.Fatal(err)
			}
			if want := `a user with the email "Ann@Acme.example" already exists (emails are compared ignoring case)`; email != "ann@acme.example" && (err == nil || err.Error() != want) {
				t.Errorf("user create of a taken email: %v; want %q", err, want)
			}
		}
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"tenant", "rename", "beta", "gamma"}, "tenant \"beta\" renamed to \"gamma\"\n"},
			{[]string{"tenant", "suspend", "gamma"}, "tenant \"gamma\" suspended\n"},
			{[]string{"tenant", "resume", "gamma"}, "tenant \"gamma\" resumed\n"},
		} {
			if out, err := run(c.args...); err != nil || out != c.want {
				t.Errorf("%v: %q, %v; want %q", c.args, out, err, c.want)
			}
		}
	})
}

// TestKeyRevokeSaysWhetherItRevoked: `key revoke` of an active key says it revoked it; of a key
// revoked before, that it was already revoked and nothing changed.
func TestKeyRevokeSaysWhetherItRevoked(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		k, _ := e.key(t, tn.ID, KindSecret)
		for _, want := range []string{"key " + k.ID + " revoked\n", "key " + k.ID + " was already revoked ("} {
			var stdout strings.Builder
			if err := e.svc.Command(e.ctx, "key", []string{"revoke", k.ID}, nil, &stdout); err != nil || !strings.HasPrefix(stdout.String(), want) {
				t.Fatalf("key revoke %s: %q, %v; want it to begin %q", k.ID, stdout.String(), err, want)
			}
		}
	})
}
