package tenants

import (
	"errors"
	"strings"
	"testing"
)

// TestLabelsAndEmailsRefuseInvisibleCharacters: a key's label or a user's email holding a
// bidirectional override or a zero-width character is shown on the dashboard as something else
// ("evil\u202Egnp.exe" reads "evilexe.png"); both are refused, and plain text outside ASCII is
// not.
func TestLabelsAndEmailsRefuseInvisibleCharacters(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		for _, bad := range []string{"evil\u202Egnp.exe", "zero\u200Bwidth", "word\u2060joiner", "bom\uFEFF", "isolate\u2066x\u2069", "mark\u200F"} {
			if _, _, err := e.svc.CreateKey(e.ctx, tn.ID, KindSecret, bad, "test"); !errors.Is(err, ErrInvalid) {
				t.Errorf("a key labelled %q: %v; want ErrInvalid", bad, err)
			}
		}
		for _, bad := range []string{"a\u202Eb@c.co", "ad\u200Bmin@example.com"} {
			if _, err := e.svc.CreateUser(e.ctx, bad, "a-long-password-1", true, nil, "test", ""); !errors.Is(err, ErrInvalid) {
				t.Errorf("a user %q: %v; want ErrInvalid", bad, err)
			}
		}
		for _, good := range []string{"Zürich – café 東京", "می\u200Cخواهم", "👩\u200D💻", "soft\u00ADhyphen"} {
			if _, _, err := e.svc.CreateKey(e.ctx, tn.ID, KindSecret, good, "test"); err != nil {
				t.Errorf("the label %q: %v", good, err)
			}
		}
		if _, _, err := e.svc.CreateInvite(e.ctx, &tn.ID, "in\u202Evite@example.com", RoleViewer, 0, "test"); !errors.Is(err, ErrInvalid) {
			t.Errorf("an invitation of a spoofing address: %v; want ErrInvalid", err)
		}
		// A user made before the rule is still found, logs in and can be removed.
		old, err := e.svc.CreateUser(e.ctx, "plain@example.com", "a-long-password-1", true, nil, "test", "")
		if err != nil {
			t.Fatal(err)
		}
		const earlier = "ad\u200Bmin@example.com"
		if err := e.db.Gorm.Exec(`UPDATE users SET email = ? WHERE id = ?`, earlier, old.ID).Error; err != nil {
			t.Fatal(err)
		}
		if u, err := e.svc.UserByEmail(e.ctx, earlier); err != nil || u.ID != old.ID {
			t.Errorf("UserByEmail of an address made before the rule: %+v, %v", u, err)
		}
		if _, err := e.svc.Login(e.ctx, earlier, "a-long-password-1", "test"); err != nil {
			t.Errorf("login of an address made before the rule: %v", err)
		}
		// A failed login as an unknown address with a right-to-left override is audited without it.
		const spoofed = "admin\u202Emoc.live@example.com"
		if _, err := e.svc.Login(e.ctx, spoofed, "whatever-password", "test"); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("login as %q: %v; want ErrUnauthorized", spoofed, err)
		}
		if err := e.svc.AuditLockout(e.ctx, spoofed, "192.0.2.1", "login", "too many attempts", true); err != nil {
			t.Fatal(err)
		}
		var actors []string
		if err := e.db.Gorm.Raw(`SELECT actor FROM audit_log`).Scan(&actors).Error; err != nil {
			t.Fatal(err)
		}
		for _, a := range actors {
			if strings.ContainsRune(a, '\u202E') {
				t.Errorf("the audit log names an actor %q with a right-to-left override", a)
			}
		}
	})
}
