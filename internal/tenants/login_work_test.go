package tenants

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// A login does the same argon2id work whether its email has an account or not, whatever the
// password's length: one verification. Otherwise the time of an answer tells which emails
// exist. The test counts the computations (argonRuns), a package-wide counter, so it runs on one
// database and not in parallel with other tests.
func TestLoginDoesOneVerificationForKnownAndUnknownEmails(t *testing.T) {
	e := envOn(t, testkit.Open(t, db.SQLite))
	_, err := e.svc.CreateUser(e.ctx, "known@example.com", "known-password-1", true, nil, "test", "")
	must(t, err)
	e.svc.dummyPasswordHash() // made once on first need: not part of any one login's work

	overlong := strings.Repeat("x", maxPasswordLen+1)
	for _, c := range []struct{ email, password string }{
		{"known@example.com", "wrong-password-1"},
		{"known@example.com", overlong},
		{"unknown@example.com", "wrong-password-1"},
		{"unknown@example.com", overlong},
	} {
		before := argonRuns.Load()
		_, err := e.svc.Login(e.ctx, c.email, c.password, "198.51.100.1")
		wantErr(t, err, ErrUnauthorized)
		if n := argonRuns.Load() - before; n != 1 {
			t.Errorf("login of %s with a %d-byte password: %d argon2id computations, want 1", c.email, len(c.password), n)
		}
	}
}
