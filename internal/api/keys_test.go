package api_test

import (
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/testkit"
)

func TestAPIKeysTableHoldsOnlyHashes(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		b := h.newTenant(t, "bravo")
		stored := testkit.Rows(t, h.db, "api_keys")
		hexHash := regexp.MustCompile(`^[0-9a-f]{64}$`)
		n, hashes := len(stored), 0
		var cols []string
		for _, row := range stored {
			cols = cols[:0]
			for _, c := range row {
				cols = append(cols, c.Column)
				for _, secret := range []string{a.key, b.key} {
					// the 22 random characters in the middle are what must never be stored
					if strings.Contains(c.Text, secret) || strings.Contains(c.Text, secret[8:30]) || strings.Contains(c.Text, secret[12:26]) {
						t.Errorf("api_keys.%s holds (part of) a secret: %q", c.Column, c.Text)
					}
				}
				if hexHash.MatchString(c.Text) {
					hashes++
				}
			}
		}
		if n != 2 || hashes != 2 {
			t.Fatalf("%d rows with %d hash values, want 2 and 2 (columns %v)", n, hashes, cols)
		}
		// and the keys still work, so the stored hashes are what authentication uses
		requireJSON(t, h.send(t, http.MethodGet, "/v1/limits", a.key, nil), http.StatusOK)
	})
}

func TestBadChecksumIsRejectedWithoutTouchingTheDatabase(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		var queries atomic.Int64
		count := func(*gorm.DB) { queries.Add(1) }
		cb := h.db.Gorm.Callback()
		for _, err := range []error{
			cb.Query().Before("gorm:query").Register("test:count_query", count),
			cb.Row().Before("gorm:row").Register("test:count_row", count),
			cb.Raw().Before("gorm:raw").Register("test:count_raw", count),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
		bad := a.key[:len(a.key)-1] + flipBase62(a.key[len(a.key)-1])

		requireProblem(t, h.send(t, http.MethodGet, "/v1/limits", bad, nil), http.StatusUnauthorized, api.CodeUnauthorized)
		if n := queries.Load(); n != 0 {
			t.Fatalf("a key with a bad checksum cost %d queries", n)
		}
		// the counter does count: the good key is looked up
		requireJSON(t, h.send(t, http.MethodGet, "/v1/limits", a.key, nil), http.StatusOK)
		if queries.Load() == 0 {
			t.Fatal("the query counter saw nothing for a valid key; the check above proves nothing")
		}

		// with the database gone, the bad key is still a 401, not a 503
		if err := h.db.Close(); err != nil {
			t.Fatal(err)
		}
		requireProblem(t, h.send(t, http.MethodGet, "/v1/limits", bad, nil), http.StatusUnauthorized, api.CodeUnauthorized)
		requireProblem(t, h.send(t, http.MethodGet, "/v1/limits", a.key, nil), http.StatusServiceUnavailable, api.CodeUnavailable)
	})
}
