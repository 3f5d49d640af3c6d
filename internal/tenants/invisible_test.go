package tenants

import (
	"errors"
	"testing"
)

// TestLabelsAndEmailsRefuseInvisibleCharacters: a key's label or a user's email holding a
// bidirectional override or a zero-width character is shown on the dashboard as something else
// ("evil\u202Egnp.exe" reads "evilexe.png"); both are refused, and plain text outside ASCII is
// not.
func TestLabelsAndEmailsRefuseInvisibleCharacters(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		for _, bad := range []string{"evil\u202Egnp.exe", "zero\u200Bwidth", "joiner\u200D", "bom\uFEFF", "isolate\u2066x\u2069", "mark\u200F"} {
			if _, _, err := e.svc.CreateKey(e.ctx, tn.ID, KindSecret, bad, "test"); !errors.Is(err, ErrInvalid) {
				t.Errorf("a key labelled %q: %v; want ErrInvalid", bad, err)
			}
		}
		for _, bad := range []string{"a\u202Eb@c.co", "ad\u200Bmin@example.com"} {
			if _, err := e.svc.CreateUser(e.ctx, bad, "a-long-password-1", true, nil, "test", ""); !errors.Is(err, ErrInvalid) {
				t.Errorf("a user %q: %v; want ErrInvalid", bad, err)
			}
		}
		if _, _, err := e.svc.CreateKey(e.ctx, tn.ID, KindSecret, "Zürich – café 東京", "test"); err != nil {
			t.Errorf("a label outside ASCII: %v", err)
		}
	})
}
