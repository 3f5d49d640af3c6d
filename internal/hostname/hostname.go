// Package hostname holds what browsers and HTTP clients make of a URL's host beyond its syntax,
// for the places that save a host to be compared or dialled later (a tenant's allowed origins,
// a webhook endpoint's URL).
package hostname

import "strings"

// EndsInANumber reports whether host's last label is a number (decimal, or hexadecimal after
// 0x, or 0x alone), which makes a browser (the WHATWG URL standard) read the whole host as an
// IPv4 address: 127.1, 0x7f.0.0.1, 2130706433 and 127.000.000.001 are all 127.0.0.1 to it, and
// an HTTP client may read them so too, or resolve them as names. Such a host is only safe to
// save in the one spelling everything reads alike, four decimal numbers (netip.ParseAddr's).
func EndsInANumber(host string) bool {
	last := strings.TrimSuffix(host, ".")
	last = last[strings.LastIndexByte(last, '.')+1:]
	if h, ok := strings.CutPrefix(strings.ToLower(last), "0x"); ok {
		return strings.Trim(h, "0123456789abcdef") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}
