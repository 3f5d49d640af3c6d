package app_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestFirstOperatorIsAuditedOnce: the first operator, whether made from SLUICE_ADMIN_EMAIL or
// through the printed setup link, has one user.create entry in the security log, written with
// the user by CreateUser.
func TestFirstOperatorIsAuditedOnce(t *testing.T) {
	t.Run("SLUICE_ADMIN_EMAIL", func(t *testing.T) { testkit.EachURL(t, adminFromEnvironment) })
	t.Run("setup link", func(t *testing.T) { testkit.EachURL(t, setupLink) })
}

// adminFromEnvironment: SLUICE_ADMIN_EMAIL and SLUICE_ADMIN_PASSWORD make the first operator.
func adminFromEnvironment(t *testing.T, dbURL string) {
	ctx := context.Background()
	cfg := apptest.Config(dbURL)
	cfg.AdminEmail, cfg.AdminPassword = "Admin@Example.com", "admin-password-1"
	a := apptest.Start(t, cfg, app.Options{})
	admin, err := a.Tenants.UserByEmail(ctx, "admin@example.com")
	if err != nil {
		t.Fatal(err)
	}
	wantCreatedOnce(t, a, "system user.create user:"+strconv.FormatInt(admin.ID, 10)+" admin@example.com (operator); from SLUICE_ADMIN_EMAIL")
}

// setupLink: the first operator comes through the printed setup link.
func setupLink(t *testing.T, dbURL string) {
	ctx := context.Background()
	out := new(testkit.SyncBuffer)
	a := apptest.Start(t, apptest.Config(dbURL), app.Options{Stdout: out})
	link := regexp.MustCompile(`/setup\?token=(\S+)`).FindStringSubmatch(out.String())
	if link == nil {
		t.Fatalf("no setup link printed:\n%s", out.String())
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noRedirect.PostForm(a.BaseURL()+"/setup", url.Values{"token": {link[1]}, "email": {" First@Example.com"},
		"password": {"first-password-1"}, "confirm": {"first-password-1"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("setup: %d", res.StatusCode)
	}
	first, err := a.Tenants.UserByEmail(ctx, "first@example.com")
	if err != nil {
		t.Fatal(err)
	}
	wantCreatedOnce(t, a, "user:first@example.com user.create user:"+strconv.FormatInt(first.ID, 10)+
		" first@example.com (operator); first operator, through the setup link")
}

// wantCreatedOnce checks that the security log holds entry and no other user.create.
func wantCreatedOnce(t *testing.T, a *app.App, entry string) {
	t.Helper()
	log, err := a.Tenants.ServerAuditLog(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	var creations []string
	for _, e := range log {
		if e.Action == "user.create" {
			creations = append(creations, e.Actor+" "+e.Action+" "+e.Target+" "+e.Detail)
		}
	}
	if !slices.Equal(creations, []string{entry}) {
		t.Fatalf("user.create entries %q, want only %q", creations, entry)
	}
}

// TestFastCommitOnSQLiteIsNotSilent: SLUICE_COMMIT=fast changes nothing on SQLite (one mode), and
// the start says so at warning level rather than letting an operator believe it took effect.
func TestFastCommitOnSQLiteIsNotSilent(t *testing.T) {
	for _, fast := range []bool{true, false} {
		out := new(testkit.SyncBuffer)
		cfg := apptest.Config("sqlite:" + filepath.Join(t.TempDir(), "fast.db"))
		cfg.FastCommit = fast
		apptest.Start(t, cfg, app.Options{Stdout: out})
		if warned := strings.Contains(out.String(), "SLUICE_COMMIT=fast has no effect on SQLite"); warned != fast {
			t.Errorf("SLUICE_COMMIT fast=%v on SQLite: warned %v, want %v; the start's log:\n%s", fast, warned, fast, out.String())
		}
	}
}

// TestAKeyFileOthersCanReadIsWarnedOf: SQLite's key file holds the root secret, so a start
// on one that other users can read (written by hand under umask 022, as restoring a backup may
// be) warns, as the database file's own mode does; one readable by its owner alone does not.
func TestAKeyFileOthersCanReadIsWarnedOf(t *testing.T) {
	for _, mode := range []os.FileMode{0o600, 0o644} {
		out := new(testkit.SyncBuffer)
		cfg := apptest.Config("sqlite:" + filepath.Join(t.TempDir(), "key.db"))
		if err := os.WriteFile(app.SecretFile(cfg.DatabaseURL), []byte(cfg.SecretKey+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		apptest.Start(t, cfg, app.Options{Stdout: out})
		warned := strings.Contains(out.String(), "key file is open to other users") && strings.Contains(out.String(), "chmod 600")
		if want := mode == 0o644; warned != want {
			t.Errorf("a key file of mode %04o: warned %v, want %v; the start's log:\n%s", mode, warned, want, out.String())
		}
	}
}
