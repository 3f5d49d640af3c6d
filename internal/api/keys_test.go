package api_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/api"
)

func TestAPIKeysTableHoldsOnlyHashes(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		b := h.newTenant(t, "bravo")
		rows, err := h.db.SQL.QueryContext(context.Background(), "SELECT * FROM api_keys")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		hexHash := regexp.MustCompile(`^[0-9a-f]{64}$`)
		n, hashes := 0, 0
		for rows.Next() {
			n++
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				s := fmt.Sprint(v)
				if b, ok := v.([]byte); ok {
					s = string(b)
				}
				for _, secret := range []string{a.key, b.key} {
					// the 22 random characters in the middle are what must never be stored
					if strings.Contains(s, secret) || strings.Contains(s, secret[8:30]) || strings.Contains(s, secret[12:26]) {
						t.Errorf("api_keys.%s holds (part of) a secret: %q", cols[i], s)
					}
				}
				if hexHash.MatchString(s) {
					hashes++
				}
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
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
