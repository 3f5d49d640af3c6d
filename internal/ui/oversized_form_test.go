package ui_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// postOversized sends a form body of contentType to /login, chunked (no declared length) or
// not, and returns the status answered. A server that answers before reading a body this large
// closes the connection with the rest unread, and the kernel's reset can reach the client
// before the answer does ("write: connection reset by peer"): that attempt is sent again, up to
// five times, and only an answer is judged.
func postOversized(t *testing.T, e *env, contentType, body string, chunked bool) int {
	t.Helper()
	var last error
	for range 5 {
		req, _ := http.NewRequest(http.MethodPost, e.url+"/login", strings.NewReader(body))
		if chunked {
			req.Body = io.NopCloser(strings.NewReader(body)) // an unknown length: sent chunked
			req.ContentLength = -1
		}
		req.Header.Set("Content-Type", contentType)
		res, err := e.client().c.Do(req)
		if err != nil {
			last = err
			continue
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	t.Fatalf("five attempts to post a %d MiB form (chunked %v) had no answer; the last: %v", len(body)>>20, chunked, last)
	return 0
}

// TestAnOversizedFormIsTooLargeDeclaredOrNot: a login form over the server's body limit is 413
// whether it declares its length or is sent chunked, never handled as an empty form (a 401
// "wrong" login that spends the login limits).
func TestAnOversizedFormIsTooLargeDeclaredOrNot(t *testing.T) {
	e := newEnv(t)
	big := "email=a%40example.com&password=" + strings.Repeat("x", 2<<20)
	for _, chunked := range []bool{false, true} {
		if got := postOversized(t, e, "application/x-www-form-urlencoded", big, chunked); got != http.StatusRequestEntityTooLarge {
			t.Errorf("a %d MiB login form (chunked %v): %d, want 413", len(big)>>20, chunked, got)
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
		if got := postOversized(t, e, b.contentType, b.body, true); got != http.StatusRequestEntityTooLarge {
			t.Errorf("a chunked %d MiB login form (%s): %d, want 413", len(b.body)>>20, b.name, got)
		}
	}
}
