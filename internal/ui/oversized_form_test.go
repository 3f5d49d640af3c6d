package ui_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAnOversizedFormIsTooLargeDeclaredOrNot: a login form over the server's body limit is 413
// whether it declares its length or is sent chunked, never handled as an empty form (a 401
// "wrong" login that spends the login limits).
func TestAnOversizedFormIsTooLargeDeclaredOrNot(t *testing.T) {
	e := newEnv(t)
	big := "email=a%40example.com&password=" + strings.Repeat("x", 2<<20)
	for _, chunked := range []bool{false, true} {
		req, _ := http.NewRequest(http.MethodPost, e.url+"/login", strings.NewReader(big))
		if chunked {
			req.Body = io.NopCloser(strings.NewReader(big)) // an unknown length: sent chunked
			req.ContentLength = -1
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		res := e.client().do(req)
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("a %d MiB login form (chunked %v): %d, want 413", len(big)>>20, chunked, res.StatusCode)
		}
	}
}
