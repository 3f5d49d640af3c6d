package httpserver

import (
	"context"
	"net/http"
)

// headAsGet answers a HEAD request as the GET of the same target, without its body (RFC 9110
// §9.3.2: a server answers HEAD wherever it answers GET; load balancers and link checkers ask
// it). gin routes each method on its own, so HEAD would otherwise be a 405 everywhere. The GET
// handler runs unchanged on a copy of the request: net/http writes the response to the original
// HEAD request, whose body it drops (it still counts it for Content-Length). A path without a
// GET answers HEAD as it answers GET: 405 with its Allow header, or 404. HEAD is a safe method:
// a GET handler that changes something (spends a limit, consumes a one-time value) asks
// AskedHead and leaves that out.
func headAsGet(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			r = r.WithContext(context.WithValue(r.Context(), askedHeadKey{}, true))
			r.Method = http.MethodGet
		}
		h.ServeHTTP(w, r)
	})
}

type askedHeadKey struct{}

// AskedHead reports whether the client sent r as HEAD (headAsGet routes it as GET).
func AskedHead(r *http.Request) bool {
	head, _ := r.Context().Value(askedHeadKey{}).(bool)
	return head
}

// method is the method the client sent.
func method(r *http.Request) string {
	if AskedHead(r) {
		return http.MethodHead
	}
	return r.Method
}
