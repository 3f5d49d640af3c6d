package limiter

import (
	"math"
	"strconv"

	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// RateLimitHeaders are the values of the IETF draft headers (draft-ietf-httpapi-ratelimit-headers)
// for decisions, as every surface sends them (the JSON API, the Envoy adapter):
//
//	RateLimit-Policy: "name";q=<quota>;w=<window seconds>, …
//	RateLimit:        "name";r=<remaining>;t=<seconds>, …
//
// t is a refusal's retryAfter, otherwise the time until the quota is whole again (an admitted
// reservation's too: its retryAfter says when the reserved work may run, not when the key is
// whole); for a quota, w is the current calendar window's length and t the time until its end
// (the next boundary), when the quota is whole again. Limits in shadow mode are left out: they
// constrain nobody yet, and a client that paces itself by these headers must not start enforcing
// them on its own; both values are "" when every decision is a shadow one (send no headers then).
// Built with strconv (AppendQuote is %q): the API sends them on every decision.
func RateLimitHeaders(ds []Decision) (policy, limit string) {
	p := make([]byte, 0, 48*len(ds))
	l := make([]byte, 0, 48*len(ds))
	n := 0
	for _, d := range ds {
		if d.Shadow != nil {
			continue
		}
		if n > 0 {
			p, l = append(p, ", "...), append(l, ", "...)
		}
		n++
		def := d.Definition
		window := float64(def.Period)
		if def.Kind == Concurrency { // the "window" of a slot is a lease's life
			window = float64(def.LeaseTTL)
		}
		if d.Window != nil {
			window = float64(d.Window.End - d.Window.Start)
		}
		p = strconv.AppendQuote(p, d.Name)
		p = append(p, ";q="...)
		p = strconv.AppendInt(p, int64(math.Floor(def.Max())), 10)
		p = append(p, ";w="...)
		p = strconv.AppendInt(p, HeaderSeconds(window), 10)

		var t int64
		switch {
		case d.RetryAfter != nil && !d.OK:
			t = HeaderSeconds(float64(*d.RetryAfter))
		case d.Window != nil && d.Remaining >= def.Max():
			t = 0 // a quota whole already, as an untouched key or an allowed one is
		case d.Window != nil:
			t = HeaderSeconds(float64(d.Window.End - d.Window.Now))
		case d.fullSet:
			t = HeaderSeconds(d.fullIn)
		default:
			missing := math.Max(def.Max()-d.Remaining, 0)
			t = HeaderSeconds(missing * float64(def.Period) / def.Rate)
		}
		l = strconv.AppendQuote(l, d.Name)
		l = append(l, ";r="...)
		l = strconv.AppendInt(l, int64(math.Floor(math.Max(d.Remaining, 0))), 10)
		l = append(l, ";t="...)
		l = strconv.AppendInt(l, t, 10)
	}
	return string(p), string(l)
}

// maxHeaderSeconds caps header times: a valid but extreme definition (a tiny rate over a long
// period) can need longer than int64 can count, and the conversion must not wrap negative. It
// is retryAfter's own cap (algo.MaxRetryAfter, 10^15 ms), so that an admitted decision's t and a
// refusal's t and Retry-After stop at the same 10^12 s.
const maxHeaderSeconds = algo.MaxRetryAfter / 1000

// WaitSeconds is a refusal's retryAfter (ms) in whole seconds to tell a person or a Retry-After
// header: rounded up, at least 1 (a refusal asks to wait), 1 when it has none.
func WaitSeconds(retryAfter *int64) int64 {
	if retryAfter == nil {
		return 1
	}
	return max(1, HeaderSeconds(float64(*retryAfter)))
}

// HeaderSeconds converts ms to whole seconds for a header, rounded up and clamped to
// [0, 10^12].
func HeaderSeconds(ms float64) int64 {
	sec := math.Ceil(ms / 1000)
	switch {
	case math.IsNaN(sec) || sec < 0:
		return 0
	case sec > float64(maxHeaderSeconds):
		return maxHeaderSeconds
	}
	return int64(sec)
}
