package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// cliWithStdin runs one command through run with stdin, returning its output and error.
func cliWithStdin(env []string, stdin string, args ...string) (string, error) {
	var out bytes.Buffer
	err := run(context.Background(), args, envFunc(env), strings.NewReader(stdin), &out, io.Discard)
	return out.String(), err
}

// TestUserAndTenantDeleteCommands: `user list` shows users with role, tenant and state; `user
// passwd` reads the new password from stdin (a short one refused); `user remove` removes a
// member but not the last operator; `tenant delete` needs --yes, deletes the tenant and its
// members, and refuses an unknown name. Through run, on SQLite.
func TestUserAndTenantDeleteCommands(t *testing.T) {
	env := appEnv("sqlite:"+filepath.Join(t.TempDir(), "cli.db"), "MIGRATE=auto")
	cliInProcess(t, env, "migrate")
	cliInProcess(t, env, "tenant", "create", "acme")
	cliInProcess(t, env, "tenant", "create", "other")
	for _, u := range [][]string{{"--email", "op@example.com", "--operator"}, {"--email", "m@acme.example", "--tenant", "acme"}, {"--email", "o@other.example", "--tenant", "other"}} {
		if _, err := cliWithStdin(env, "first-password-1\n", append([]string{"user", "create", "--password-stdin"}, u...)...); err != nil {
			t.Fatal(err)
		}
	}
	// --role makes a member a viewer in the creating transaction; it goes only with --tenant.
	if _, err := cliWithStdin(env, "first-password-1\n", "user", "create", "--password-stdin", "--email", "v@acme.example", "--tenant", "acme", "--role", "viewer"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{{"--operator", "--role", "viewer"}, {"--tenant", "acme", "--role", "operator"}, {"--tenant", "acme", "--role", "Viewer"}} {
		args := append([]string{"user", "create", "--password-stdin", "--email", "x@acme.example"}, bad...)
		if _, err := cliWithStdin(env, "first-password-1\n", args...); err == nil {
			t.Fatalf("user create %v: accepted", bad)
		}
	}
	list := cliInProcess(t, env, "user", "list")
	if strings.Contains(list, "x@acme.example") {
		t.Fatalf("a refused user create made the user:\n%s", list)
	}
	for _, want := range []string{"\tm@acme.example\tadmin\tacme\tactive", "\tv@acme.example\tviewer\tacme\tactive", "\top@example.com\toperator\t-\tactive"} {
		if !strings.Contains(list, want) {
			t.Fatalf("user list lacks %q:\n%s", want, list)
		}
	}

	if _, err := cliWithStdin(env, "short\n", "user", "passwd", "m@acme.example"); err == nil {
		t.Fatal("user passwd accepted a short password")
	}
	if _, err := cliWithStdin(env, "second-password-2\n", "user", "passwd", "m@acme.example"); err != nil {
		t.Fatal(err)
	}
	svc, closeDB := cliService(t, env)
	if _, err := svc.Login(context.Background(), "m@acme.example", "second-password-2", "cli-test"); err != nil {
		t.Fatalf("login with the password set by user passwd: %v", err)
	}
	closeDB()

	if _, err := cliWithStdin(env, "", "user", "remove", "op@example.com"); err == nil || !strings.Contains(err.Error(), "last operator") {
		t.Fatalf("user remove of the last operator: %v", err)
	}
	cliInProcess(t, env, "user", "remove", "m@acme.example")
	if list := cliInProcess(t, env, "user", "list"); strings.Contains(list, "m@acme.example") {
		t.Fatalf("the removed user is listed:\n%s", list)
	}

	if _, err := cliWithStdin(env, "", "tenant", "delete", "other"); err == nil {
		t.Fatal("tenant delete without --yes succeeded")
	}
	if out := cliInProcess(t, env, "tenant", "delete", "other", "--yes"); !strings.Contains(out, `tenant "other" deleted`) {
		t.Fatalf("tenant delete: %q", out)
	}
	svc, closeDB = cliService(t, env)
	log, err := svc.ServerAuditLog(context.Background(), 100)
	closeDB()
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, a := range log {
		actions = append(actions, a.Actor+" "+a.Action)
	}
	for _, want := range []string{"cli tenant.create", "cli user.password", "cli user.remove", "cli tenant.delete"} {
		if !slices.Contains(actions, want) {
			t.Errorf("the security log lacks %q: %v", want, actions)
		}
	}
	if out := cliInProcess(t, env, "tenant", "list"); strings.Contains(out, "other") || !strings.Contains(out, "acme") {
		t.Fatalf("tenant list after delete: %q", out)
	}
	if list := cliInProcess(t, env, "user", "list"); strings.Contains(list, "o@other.example") {
		t.Fatalf("the deleted tenant's member is listed:\n%s", list)
	}
	for _, bad := range [][]string{{"tenant", "delete", "nope", "--yes"}, {"user", "remove", "nobody@example.com"}, {"user", "passwd"}, {"user", "list", "x"}, {"user", "frobnicate"}} {
		if _, err := cliWithStdin(env, "whatever-password-1\n", bad...); err == nil {
			t.Errorf("app %s succeeded", strings.Join(bad, " "))
		}
	}
}

// cliService opens the CLI's database the way the CLI does, for checks the CLI cannot make.
func cliService(t *testing.T, env []string) (*tenants.Service, func()) {
	t.Helper()
	cfg := mustConfig(t, env)
	d, err := app.Open(context.Background(), cfg, app.NewLogger(cfg, io.Discard), false)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := app.LoadSecrets(context.Background(), cfg, d, app.NewLogger(cfg, io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	return tenants.NewService(d, keys.Pepper, nil), func() { _ = d.Close() }
}

// TestHelpAndStrayFlagsDoNothing: help where a command or subcommand begins prints the usage and
// runs nothing (`migrate --help` migrated, `tenant create --help` made a tenant called "--help"),
// serve and migrate take no arguments, and a word starting with "-" is no name to act on. Further
// on, -h is the subcommand's: a flag's value (`--label -h` made no key and printed the usage
// where a script reads the secret, with success) or a flag it refuses.
func TestHelpAndStrayFlagsDoNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "help.db")
	env := appEnv("sqlite:" + path)
	for _, args := range [][]string{{"migrate", "--help"}, {"serve", "-h"}, {"tenant", "create", "--help"}, {"key", "create", "-help"}} {
		out, err := cliWithStdin(env, "", args...)
		if err != nil || !strings.Contains(out, "healthcheck [--ready]") {
			t.Fatalf("%v: %v, output %q; want the usage", args, err, out)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a --help created or migrated the database (stat: %v)", err)
	}
	if _, err := cliWithStdin(env, "", "migrate", "down"); err == nil || !strings.Contains(err.Error(), "takes no arguments") {
		t.Fatalf("migrate down: %v, want refused", err)
	}
	cliInProcess(t, appEnv("sqlite:"+path, "MIGRATE=auto"), "migrate")
	cliInProcess(t, env, "tenant", "create", "acme")
	for _, args := range [][]string{{"tenant", "create", "--x"}, {"tenant", "rename", "acme", "--name"}, {"tenant", "suspend", "-acme"}} {
		if _, err := cliWithStdin(env, "", args...); err == nil || !strings.Contains(err.Error(), "unexpected flag") {
			t.Fatalf("%v: %v, want refused as a flag", args, err)
		}
	}
	if list := strings.TrimSpace(cliInProcess(t, env, "tenant", "list")); strings.Count(list, "\n") != 0 || !strings.HasSuffix(list, "\tacme\tactive") {
		t.Fatalf("tenant list after the refused commands:\n%s\nwant acme alone, active", list)
	}
	out := cliInProcess(t, env, "key", "create", "--tenant", "acme", "--label", "-h")
	if !strings.HasPrefix(out, "sk_") {
		t.Fatalf("key create --label -h printed %q; want the new key's secret first", out)
	}
	if keys := cliInProcess(t, env, "key", "list", "acme"); !strings.Contains(keys, "\t-h") {
		t.Fatalf("key list after key create --label -h:\n%s\nwant a key labelled -h", keys)
	}
	if out, err := cliWithStdin(env, "", "key", "create", "--tenant", "acme", "-h"); err == nil || strings.Contains(out, "sk_") {
		t.Fatalf("key create --tenant acme -h: %q, %v; want refused, no key", out, err)
	}
	if _, err := cliWithStdin(env, "", "backup", "--force"); err == nil || !strings.Contains(err.Error(), "not an option") {
		t.Fatalf("backup --force: %v; want refused, not a file named --force", err)
	}
	if _, err := os.Stat("--force"); !os.IsNotExist(err) {
		t.Fatalf("backup --force made a file named --force (stat: %v)", err)
	}
}

// TestVersionPrintsTheBuild: `version` says which build runs, as sluice_build_info does, without
// any configuration (an environment that would not start still answers it).
func TestVersionPrintsTheBuild(t *testing.T) {
	out, err := cliWithStdin([]string{"DATABASE_URL=nonsense://"}, "", "version")
	if err != nil || !regexp.MustCompile(`^sluice \S+ \(revision \S+, go\S+\)\n$`).MatchString(out) {
		t.Fatalf("version: %q, %v; want sluice VERSION (revision REV, goX.Y)", out, err)
	}
	if _, err := cliWithStdin(nil, "", "version", "--short"); err == nil {
		t.Fatal("version --short: accepted; version takes no arguments")
	}
}

// TestKeyCreateWhoseSecretCannotBeWrittenRevokesTheKey: a secret key's secret is shown once; a
// key create whose output cannot be written (a full disk, a closed pipe) fails, and the key no
// one has the secret of is revoked again rather than left active (it counted against the plan);
// another command whose output is lost fails too, its change made.
func TestKeyCreateWhoseSecretCannotBeWrittenRevokesTheKey(t *testing.T) {
	env := appEnv("sqlite:" + filepath.Join(t.TempDir(), "full.db"))
	cliInProcess(t, env, "tenant", "create", "acme")
	err := run(context.Background(), []string{"key", "create", "--tenant", "acme"}, envFunc(env), strings.NewReader(""), failingWriter{}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "revoked again") {
		t.Fatalf("key create with stdout failing: %v; want an error saying the key was revoked again", err)
	}
	keys := strings.TrimSpace(cliInProcess(t, env, "key", "list", "acme"))
	if strings.Count(keys, "\n") != 0 || !strings.Contains(keys, "\trevoked") {
		t.Fatalf("key list after the failed key create:\n%s\nwant its one key, revoked", keys)
	}
	err = run(context.Background(), []string{"tenant", "create", "other"}, envFunc(env), strings.NewReader(""), failingWriter{}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "could not be written") {
		t.Fatalf("tenant create with stdout failing: %v; want an error", err)
	}
}

// TestKeyCreateIntoAClosedPipeRevokesTheKey: the real binary, its stdout a pipe no one reads
// (`sluice key create … | true`): the write fails (SIGPIPE ended the process before it could
// revoke the key, leaving it active, exit 141), the command exits 1 and the key is revoked.
func TestKeyCreateIntoAClosedPipeRevokesTheKey(t *testing.T) {
	bin := buildBinary(t)
	env := appEnv("sqlite:" + filepath.Join(t.TempDir(), "pipe.db"))
	cli(t, bin, env, "tenant", "create", "acme")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Close() // the reader is gone before the command writes
	cmd := exec.Command(bin, "key", "create", "--tenant", "acme")
	cmd.Env, cmd.Stdout = env, w
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	_ = w.Close()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(stderr.String(), "revoked again") {
		t.Fatalf("key create into a closed pipe: %v (exit %v), stderr %q; want exit 1 saying the key was revoked again", err, exit, stderr.String())
	}
	if keys := strings.TrimSpace(cli(t, bin, env, "key", "list", "acme")); !strings.Contains(keys, "\trevoked") || strings.Contains(keys, "\tactive") {
		t.Fatalf("key list after key create into a closed pipe:\n%s\nwant its key revoked", keys)
	}
}

// failingWriter is a stdout that cannot be written, as /dev/full.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }
