package captcha

import (
	"errors"
	"testing"
)

// A challenge issued one below the tenant's difficulty is refused; one issued at it is accepted.
func TestVerifyRefusesAChallengeOneBelowTheDifficulty(t *testing.T) {
	c := newClock()
	is := newIssuer(t, c.Now)
	_, below := issueSolved(t, is, 999)
	if _, err := is.Verify(below, tenant, sid, 1000); !errors.Is(err, ErrDifficulty) {
		t.Fatalf("issued at 999, required 1000: %v, want ErrDifficulty", err)
	}
	_, at := issueSolved(t, is, 1000)
	if _, err := is.Verify(at, tenant, sid, 1000); err != nil {
		t.Fatalf("issued at 1000, required 1000: %v", err)
	}
}
