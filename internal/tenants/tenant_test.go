package tenants

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestCreateTenantValidatesNamesAndRejectsDuplicates(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "Acme_1.prod:eu-west")
		if tn.ID == 0 || tn.CaptchaDifficulty != 50000 || len(tn.AllowedOrigins) != 0 || !tn.CreatedAt.Equal(e.clock.Now()) {
			t.Fatalf("created %+v", tn)
		}
		for _, bad := range []string{"", "has space", "slash/", strings.Repeat("a", 129), "ünïcode", "nul\x00"} {
			_, err := e.svc.CreateTenant(e.ctx, bad)
			wantErr(t, err, ErrInvalid)
		}
		for _, taken := range []string{"Acme_1.prod:eu-west", "acme_1.PROD:EU-west"} { // in any case
			_, err := e.svc.CreateTenant(e.ctx, taken)
			wantErr(t, err, ErrConflict)
		}

		got, err := e.svc.Tenant(e.ctx, tn.ID)
		must(t, err)
		if got.Name != tn.Name || !got.CreatedAt.Equal(tn.CreatedAt) {
			t.Fatalf("Tenant = %+v, want %+v", got, tn)
		}
		got, err = e.svc.TenantByName(e.ctx, tn.Name)
		must(t, err)
		if got.ID != tn.ID {
			t.Fatalf("TenantByName = %+v", got)
		}
		got, err = e.svc.TenantByName(e.ctx, "ACME_1.PROD:EU-WEST") // names are compared ignoring case
		must(t, err)
		if got.ID != tn.ID {
			t.Fatalf("TenantByName in another case = %+v", got)
		}
		_, err = e.svc.Tenant(e.ctx, tn.ID+1)
		wantErr(t, err, ErrNotFound)
		_, err = e.svc.TenantByName(e.ctx, "nope")
		wantErr(t, err, ErrNotFound)
		_, err = e.svc.TenantByName(e.ctx, "bad\x00name")
		wantErr(t, err, ErrNotFound)

		first := e.tenant(t, "0-first")
		// A rename to another tenant's name in another case is refused; to one's own in another
		// case is not.
		wantErr(t, e.svc.RenameTenant(e.ctx, first.ID, "ACME_1.prod:eu-west", "test"), ErrConflict)
		must(t, e.svc.RenameTenant(e.ctx, tn.ID, "ACME_1.prod:eu-west", "test"))
		must(t, e.svc.RenameTenant(e.ctx, tn.ID, tn.Name, "test"))
		all, err := e.svc.ListTenants(e.ctx)
		must(t, err)
		if len(all) != 2 || all[0].Name != "0-first" || all[1].Name != tn.Name {
			t.Fatalf("ListTenants = %+v", all)
		}
	})
}

func TestCaptchaSettingsRoundTrip(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		origins := []string{"https://Example.com/", "http://localhost:3000", "https://example.com", "https://[::1]:8443"}
		must(t, e.svc.UpdateCaptchaSettings(e.ctx, tn.ID, origins, 250_000, "test"))
		got, err := e.svc.Tenant(e.ctx, tn.ID)
		must(t, err)
		want := []string{"https://example.com", "http://localhost:3000", "https://[::1]:8443"}
		if !slices.Equal(got.AllowedOrigins, want) || got.CaptchaDifficulty != 250_000 {
			t.Fatalf("settings = %q / %d, want %q / 250000", got.AllowedOrigins, got.CaptchaDifficulty, want)
		}
		must(t, e.svc.UpdateCaptchaSettings(e.ctx, tn.ID, nil, MinCaptchaDifficulty, "test"))
		got, err = e.svc.Tenant(e.ctx, tn.ID)
		must(t, err)
		if len(got.AllowedOrigins) != 0 || got.CaptchaDifficulty != MinCaptchaDifficulty {
			t.Fatalf("after clearing: %+v", got)
		}
		wantErr(t, e.svc.UpdateCaptchaSettings(e.ctx, tn.ID, nil, MinCaptchaDifficulty-1, "test"), ErrInvalid)
		wantErr(t, e.svc.UpdateCaptchaSettings(e.ctx, tn.ID, nil, MaxCaptchaDifficulty+1, "test"), ErrInvalid)
		wantErr(t, e.svc.UpdateCaptchaSettings(e.ctx, tn.ID, []string{"ftp://x.io"}, 5000, "test"), ErrInvalid)
		wantErr(t, e.svc.UpdateCaptchaSettings(e.ctx, tn.ID+1, nil, 5000, "test"), ErrNotFound)
	})
}

func TestNormalizeOriginsRefusesAnythingButSchemeHostPort(t *testing.T) {
	for _, bad := range []string{
		"", "example.com", "//example.com", "ftp://example.com", "javascript:alert(1)",
		"https://example.com/path", "https://example.com//", "https://example.com?q=1", "https://example.com#x",
		"https://user:pw@example.com", "https://*.example.com", "https://exa mple.com", "https://example.com:0",
		"https://example.com:65536", "https://example.com:", "https://example.com:08", "https://[::1%25eth0]",
		"https://-bad.com", "https://", "null",
		// IPv4 addresses a browser would send as 127.0.0.1: saved as written, they never matched
		"http://127.1", "http://0x7f.0.0.1", "http://127.000.000.001", "http://2130706433", "http://[::ffff:127.0.0.1]",
		"http://a.0x1f", "http://1.2.3.4.5", "http://a1.example.0x",
	} {
		if _, err := NormalizeOrigins([]string{bad}); !errors.Is(err, ErrInvalid) {
			t.Errorf("NormalizeOrigins(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	got, err := NormalizeOrigins([]string{" HTTPS://Sub.Example.COM:8443 ", "http://127.0.0.1", "https://shop.example:443", "http://[::1]:80",
		"http://x.example:443", "http://[0:0:0:0:0:0:0:1]:8080", "http://[2001:DB8:0:0::1]", "http://v4.example.9a"})
	must(t, err)
	// Browsers send no default port (RFC 6454): a saved one would never match; and an IPv6
	// address compressed, in lower case, as they serialise it.
	if !slices.Equal(got, []string{"https://sub.example.com:8443", "http://127.0.0.1", "https://shop.example", "http://[::1]", "http://x.example:443",
		"http://[::1]:8080", "http://[2001:db8::1]", "http://v4.example.9a"}) {
		t.Fatalf("NormalizeOrigins = %q", got)
	}
	// An origin saved with its default port before it was dropped still matches.
	if !OriginAllowed([]string{"https://shop.example:443"}, "https://SHOP.example") || OriginAllowed([]string{"https://shop.example"}, "http://shop.example") {
		t.Fatal("OriginAllowed: a default port or a scheme mismatch")
	}
	many := make([]string, maxAllowedOrigins+1)
	for i := range many {
		many[i] = "https://example.com"
	}
	if _, err := NormalizeOrigins(many); !errors.Is(err, ErrInvalid) {
		t.Fatalf("%d origins accepted", len(many))
	}
}
