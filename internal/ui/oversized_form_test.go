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

// TestAnOversizedChunkedFormIsTooLargeInEveryEncoding: the same for the encodings the handlers'
// PostForm also reads: a URL-encoded type spelt in another case, and multipart/form-data.
func TestAnOversizedChunkedFormIsTooLargeInEveryEncoding(t *testing.T) {
	e := newEnv(t)
	pad := strings.Repeat("x", 2<<20)
	for _, b := range []struct{ name, contentType, body string }{
		{"URL-encoded, the type in mixed case", "Application/X-WWW-Form-Urlencoded", "email=a%40example.com&password=" + pad},
		{"multipart/form-data", "multipart/form-data; boundary=b",
			"--b\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\na@example.com\r\n" +
				"--b\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\n" + pad + "\r\n--b--\r\n"},
	} {
		req, _ := http.NewRequest(http.MethodPost, e.url+"/login", nil)
		req.Body = io.NopCloser(strings.NewReader(b.body)) // an unknown length: sent chunked
		req.ContentLength = -1
		req.Header.Set("Content-Type", b.contentType)
		res := e.client().do(req)
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("a chunked %d MiB login form (%s): %d, want 413", len(b.body)>>20, b.name, res.StatusCode)
		}
	}
}
