// Package sluice is the Go client of Sluice, a multi-tenant rate-limiting service, and a
// net/http middleware built on it. It uses the standard library only.
//
// A Client makes typed calls to Sluice's JSON API (/v1) with a secret key. Problems Sluice
// answers with are returned as *Error (use errors.As). When Sluice cannot answer (network
// errors, timeouts, 5xx, a gateway's 429 in front of it), decision calls follow the client's
// FailPolicy: FailClosed (the
// default) returns the error, FailOpen an allowed Result marked Degraded, and Fallback whatever
// a function decides.
package sluice

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of a Client (see the options that change them).
const (
	DefaultTimeout    = 10 * time.Second
	DefaultRetries    = 2
	DefaultBackoff    = 50 * time.Millisecond
	DefaultMaxBackoff = time.Second
)

// maxResponseBytes bounds what the client reads of an answer (a bulk answer of 1,000 decisions
// is about 100 KB).
const maxResponseBytes = 8 << 20

// Client calls one Sluice server with one secret key. It is safe for concurrent use.
type Client struct {
	base       string
	key        string
	http       *http.Client
	timeout    time.Duration
	retries    int
	backoff    time.Duration
	maxBackoff time.Duration
	policy     FailPolicy
	batcher    *batcher // nil unless WithBatching
	// invalid is why every call is refused before sending (a base URL or secret key no request
	// can carry, wrapping ErrInvalidArgument), nil when none.
	invalid error
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the *http.Client the calls go through (default http.DefaultClient).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithTimeout bounds each call, its retries included (default DefaultTimeout; 0 for no bound
// beyond the context's). A call that runs out of time counts as Sluice not answering, so the
// FailPolicy applies; a context the caller cancels does not.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithRetries sets how many times an idempotent call is retried after a 503 or a network error
// (an attempt the http.Client's own Timeout ended included, while the call has time left)
// (default DefaultRetries; 0 disables retries: a keyed call is then sent once, not re-sent by
// net/http's Transport either).
func WithRetries(n int) Option { return func(c *Client) { c.retries = max(n, 0) } }

// WithBackoff sets the first delay before a retry and the cap of the delays, which double on each
// retry and are jittered (each is uniformly drawn from [d/2, d]).
func WithBackoff(first, maximum time.Duration) Option {
	return func(c *Client) { c.backoff, c.maxBackoff = max(first, 0), max(maximum, first, 0) }
}

// WithFailPolicy sets what decision calls return when Sluice cannot answer (default FailClosed).
func WithFailPolicy(p FailPolicy) Option { return func(c *Client) { c.policy = p } }

// New returns a client of the Sluice server at baseURL (e.g. "https://sluice.example.com", or
// "https://example.com/sluice" for a Sluice a reverse proxy serves under a path prefix: the
// routes, /v1/…, are appended to it) authenticating with secretKey. A baseURL that is not an
// http or https URL with a host, that has a query or a fragment, or a
// secretKey with a control character (a trailing newline, say: net/http refuses to send it),
// makes every call of the client fail before sending anything, with an error wrapping
// ErrInvalidArgument, whatever the FailPolicy.
func New(baseURL, secretKey string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), key: secretKey, http: http.DefaultClient,
		timeout: DefaultTimeout, retries: DefaultRetries, backoff: DefaultBackoff, maxBackoff: DefaultMaxBackoff}
	for _, o := range opts {
		o(c)
	}
	c.invalid = checkClient(baseURL, secretKey)
	if c.batcher != nil && c.timeout > 0 && c.batcher.window > c.timeout/2 {
		// The window counts against each call's timeout: a longer one would leave a call that
		// waits it out no time for its batch's request (or none at all: every batched call
		// would run out of time, and a FailOpen client admit unasked).
		c.batcher.window = c.timeout / 2
	}
	return c
}

// checkClient refuses a base URL or a secret key no request can carry, which would otherwise
// fail inside net/http as if Sluice could not answer (and a FailOpen client would admit).
func checkClient(baseURL, secretKey string) error {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("%w: base URL %q: want an http or https URL with a host, such as https://sluice.example.com", ErrInvalidArgument, baseURL)
	}
	// The routes are appended to the base URL: after a query or a fragment they would be part
	// of it, never of the path.
	if strings.ContainsAny(baseURL, "?#") {
		return fmt.Errorf("%w: base URL %q: want no query or fragment (a path prefix, such as https://example.com/sluice, is fine)", ErrInvalidArgument, baseURL)
	}
	// url.Parse takes any digits for a port; a dial of one out of range fails before anything
	// is sent, which would read as Sluice not answering.
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%w: base URL %q: port %s is not 1 to 65535", ErrInvalidArgument, baseURL, p)
		}
	}
	for i := range len(secretKey) {
		if b := secretKey[i]; b < 0x20 || b == 0x7f {
			return fmt.Errorf("%w: the secret key holds the control character %#x at byte %d (a trailing newline?)", ErrInvalidArgument, b, i)
		}
	}
	return nil
}

// Retries: only idempotent calls are retried (GET, PUT, DELETE, Check, CheckBatch, Reset); a
// retried DELETE answered 404 succeeds when an earlier attempt got no answer from Sluice, since
// that attempt may have deleted the thing (so a DELETE of something that never existed may
// succeed when retried); after Sluice's own 503, which did nothing, the 404 is an error. A
// consuming decision (Limit, Batch, Bulk) is retried only under an Idempotency-Key (below):
// without one, when its answer is lost, Sluice may already have consumed the tokens and cannot
// recognise a repeat, so a retry could consume them twice. Its failure goes to the FailPolicy
// instead.
const (
	idempotent = true
	consuming  = false
)

// Limit consumes d.Count (default 1) tokens of the limit name for d's key if the limit allows it.
// A refusal is a Result with OK false, not an error. Limit is retried only when ctx carries an
// Idempotency-Key (WithIdempotencyKey), whose retry Sluice answers with the first answer. With
// WithBatching, concurrent calls without one share POST /v1/decisions requests.
func (c *Client) Limit(ctx context.Context, name string, d Decision) (Result, error) {
	if err := checkDecision(name, d); err != nil {
		return Result{}, err
	}
	if _, keyed := ctx.Value(idempotencyKey{}).(string); c.batcher != nil && !keyed {
		return c.limitBatched(ctx, name, d)
	}
	return c.decide(ctx, name, "/limit", d, consuming)
}

// Check answers what Limit would, consuming nothing.
func (c *Client) Check(ctx context.Context, name string, d Decision) (Result, error) {
	return c.decide(ctx, name, "/check", d, idempotent)
}

func (c *Client) decide(ctx context.Context, name, verb string, d Decision, retry bool) (Result, error) {
	if err := checkDecision(name, d); err != nil {
		return Result{}, err
	}
	ik := ""
	if verb == "/limit" {
		var err error
		if ik, err = idempotencyKeyOf(ctx); err != nil {
			return Result{}, err
		}
	}
	var w wireDecision
	h, own, err := c.doAttempts(ctx, http.MethodPost, "/v1/limits/"+url.PathEscape(name)+verb, nil, d, retry, &w, ik) // checkDecision checked the name
	if err != nil {
		return c.fallbackOne(ctx, Item{Name: name, Decision: d}, err)
	}
	r := w.result()
	r.RateLimitPolicy, r.RateLimit = h.Get("RateLimit-Policy"), h.Get("RateLimit")
	r.Replayed = h.Get("Idempotent-Replayed") == "true"
	r.ownReplay = r.Replayed && own
	return r, nil
}

// Batch consumes from every limit of items, or from none when one of them refuses (up to 100
// items). It is never retried (see Limit).
func (c *Client) Batch(ctx context.Context, items []Item) (BatchResult, error) {
	return c.batch(ctx, "/v1/limit", items, consuming)
}

// CheckBatch answers what Batch would, consuming nothing.
func (c *Client) CheckBatch(ctx context.Context, items []Item) (BatchResult, error) {
	return c.batch(ctx, "/v1/check", items, idempotent)
}

func (c *Client) batch(ctx context.Context, path string, items []Item, retry bool) (BatchResult, error) {
	for i, it := range items {
		if err := checkDecision(it.Name, it.Decision); err != nil {
			return BatchResult{}, fmt.Errorf("items[%d]: %w", i, err)
		}
	}
	ik := ""
	if path == "/v1/limit" {
		var err error
		if ik, err = idempotencyKeyOf(ctx); err != nil {
			return BatchResult{}, err
		}
	}
	var w wireBatch
	h, err := c.doKeyed(ctx, http.MethodPost, path, nil, struct {
		Limits []Item `json:"limits"`
	}{items}, retry, &w, ik)
	if err != nil {
		return c.fallbackBatch(ctx, items, err)
	}
	out := BatchResult{OK: w.OK, RetryAfter: ms(w.RetryAfter), Results: make([]Result, len(w.Results)),
		RateLimitPolicy: h.Get("RateLimit-Policy"), RateLimit: h.Get("RateLimit"), Replayed: h.Get("Idempotent-Replayed") == "true"}
	for i, r := range w.Results {
		out.Results[i] = r.result()
	}
	return out, nil
}

// Bulk makes up to 1,000 independent decisions in one request, each consuming, answered in the
// order of items. An invalid item gets its own Err and the others are decided. The error is
// for the request as a whole. Bulk is never retried (see Limit). When the request fails as a
// whole (no answer, a 5xx), every item follows the FailPolicy; so does an item Sluice answers
// with a 5xx problem of its own.
func (c *Client) Bulk(ctx context.Context, items []Item) ([]BulkResult, error) {
	out := make([]BulkResult, len(items))
	// An item Sluice would refuse as invalid, or that JSON cannot carry (an inline Config with a
	// Rate of NaN or ±Inf), gets its error here; the others are sent.
	var sent []Item
	var enc []json.RawMessage // enc[k] is sent[k] encoded
	var at []int              // at[k] is the index in items of sent[k]
	for i, it := range items {
		if err := checkDecision(it.Name, it.Decision); err != nil {
			out[i].Err = fmt.Errorf("sluice: decision %d (%s): %w", i, it.Name, err)
			continue
		}
		b, err := json.Marshal(it)
		if err != nil {
			out[i].Err = fmt.Errorf("sluice: decision %d (%s): %w: encode it: %w", i, it.Name, ErrInvalidArgument, err)
			continue
		}
		sent, enc, at = append(sent, it), append(enc, b), append(at, i)
	}
	if len(sent) == 0 {
		return out, nil
	}
	ik, err := idempotencyKeyOf(ctx)
	if err != nil {
		return nil, err
	}
	var w wireBulk
	h, err := c.doKeyed(ctx, http.MethodPost, "/v1/decisions", nil, struct {
		Decisions []json.RawMessage `json:"decisions"`
	}{enc}, consuming, &w, ik)
	if err != nil {
		fell, ferr := c.fallbackBulk(ctx, sent, err)
		if ferr != nil {
			return nil, ferr
		}
		for k, r := range fell {
			out[at[k]] = r
		}
		return out, nil
	}
	if len(w.Results) != len(sent) {
		return nil, fmt.Errorf("sluice: bulk: %d results for %d decisions", len(w.Results), len(sent))
	}
	for k, r := range w.Results {
		i := at[k]
		if r.Error != nil {
			// An item Sluice could not decide (a 5xx problem of its own) follows the FailPolicy,
			// as it would alone; fallbackOne returns any other problem as the item's error.
			// Its fields name it by its place among the items sent; the caller's is i.
			p := reprefixed(r.Error, k, fmt.Sprintf("decisions[%d].", i))
			if p.RequestID == "" { // an item's problem carries none: the request's is the one Sluice logs it under
				p.RequestID = h.Get("X-Request-ID")
			}
			out[i].Result, out[i].Err = c.fallbackOne(ctx, items[i], fmt.Errorf("sluice: decision %d (%s): %w", i, items[i].Name, p))
			continue
		}
		out[i].Result = r.result()
		// Sluice says it of the request as a whole: every item decided was replayed.
		out[i].Replayed = h.Get("Idempotent-Replayed") == "true"
	}
	return out, nil
}

// Value reads the limit's value now for key ("" for the global key), summed over its shards.
func (c *Client) Value(ctx context.Context, name, key string) (Value, error) {
	if err := checkText("key", key); err != nil {
		return Value{}, err
	}
	var q url.Values
	if key != "" {
		q = url.Values{"key": {key}}
	}
	path, err := limitPath(name, "/value")
	if err != nil {
		return Value{}, err
	}
	var v Value
	_, err = c.do(ctx, http.MethodGet, path, q, nil, idempotent, &v)
	return v, err
}

// Reset forgets the state of one key of the limit ("" for the global key), which starts full.
// It succeeds whether or not any state existed.
func (c *Client) Reset(ctx context.Context, name, key string) error {
	return c.reset(ctx, name, wireReset{Key: key})
}

// ResetAll forgets the state of every key of the limit.
func (c *Client) ResetAll(ctx context.Context, name string) error {
	return c.reset(ctx, name, wireReset{AllKeys: true})
}

func (c *Client) reset(ctx context.Context, name string, body wireReset) error {
	if err := checkText("key", body.Key); err != nil {
		return err
	}
	path, err := limitPath(name, "/reset")
	if err != nil {
		return err
	}
	_, err = c.do(ctx, http.MethodPost, path, nil, body, idempotent, nil)
	return err
}

// Put creates or replaces the definition of the limit name.
func (c *Client) Put(ctx context.Context, name string, d Definition) (StoredDefinition, error) {
	path, err := limitPath(name, "")
	if err != nil {
		return StoredDefinition{}, err
	}
	var s StoredDefinition
	_, err = c.do(ctx, http.MethodPut, path, nil, d, idempotent, &s)
	return s, err
}

// Get reads the definition of the limit name (a *Error with Code limit_not_found when none).
func (c *Client) Get(ctx context.Context, name string) (StoredDefinition, error) {
	path, err := limitPath(name, "")
	if err != nil {
		return StoredDefinition{}, err
	}
	var s StoredDefinition
	_, err = c.do(ctx, http.MethodGet, path, nil, nil, idempotent, &s)
	return s, err
}

// List reads every definition of the tenant.
func (c *Client) List(ctx context.Context) ([]StoredDefinition, error) {
	var l wireList
	_, err := c.do(ctx, http.MethodGet, "/v1/limits", nil, nil, idempotent, &l)
	return l.Limits, err
}

// Delete deletes the definition of the limit name and its state.
func (c *Client) Delete(ctx context.Context, name string) error {
	path, err := limitPath(name, "")
	if err != nil {
		return err
	}
	_, err = c.do(ctx, http.MethodDelete, path, nil, nil, idempotent, nil)
	return err
}

// do makes one call: it sends body as JSON, retries when retry allows it, and decodes a 2xx
// answer into out (when not nil) or a problem into *Error.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body any, retry bool, out any) (http.Header, error) {
	return c.doKeyed(ctx, method, path, q, body, retry, out, "")
}

// doKeyed is do with an Idempotency-Key header when idemKey is not "": the call is then retried
// like an idempotent one (Sluice replays the first answer).
func (c *Client) doKeyed(ctx context.Context, method, path string, q url.Values, body any, retry bool, out any, idemKey string) (http.Header, error) {
	h, _, err := c.doAttempts(ctx, method, path, q, body, retry, out, idemKey)
	return h, err
}

// doAttempts is doKeyed, also reporting, under an idemKey, whether the answer is this call's own:
// every attempt of the call sends one random Sluice-Call-Id, which Sluice stores with the answer
// it decides and replays with it, so a replay carrying it answers an earlier attempt of this
// call (whose answer was lost), and one carrying another (or none) another call under the key.
func (c *Client) doAttempts(ctx context.Context, method, path string, q url.Values, body any, retry bool, out any, idemKey string) (http.Header, bool, error) {
	retry = retry || idemKey != ""
	if c.invalid != nil {
		return nil, false, fmt.Errorf("sluice: %s %s: %w", method, path, c.invalid)
	}
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil { // e.g. a Rate of NaN or ±Inf
			return nil, false, fmt.Errorf("sluice: %s %s: %w: encode the body: %w", method, path, ErrInvalidArgument, err)
		}
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	target := c.base + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	callID := ""
	if idemKey != "" {
		callID = newCallID()
	}
	mayHaveActed := false // an earlier attempt got no answer from Sluice, so may have been carried out
	for attempt := 0; ; attempt++ {
		h, err := c.once(ctx, method, target, payload, out, idemKey, callID)
		if err == nil {
			return h, callID != "" && h.Get(callIDHeader) == callID, nil
		}
		if mayHaveActed && method == http.MethodDelete && idemKey == "" && notFound(err) {
			// The attempt whose answer was lost may have deleted it: what the caller wanted.
			// Sluice's own 503 problem means it did nothing: a 404 after it is an error.
			return http.Header{}, false, nil
		}
		mayHaveActed = mayHaveActed || !sluiceAnswered(err)
		if !retry || attempt >= c.retries || !retryable(err) || ctx.Err() != nil {
			return nil, false, fmt.Errorf("sluice: %s %s: %w", method, path, err)
		}
		if werr := wait(ctx, c.retryDelay(ctx, attempt, err)); werr != nil {
			return nil, false, fmt.Errorf("sluice: %s %s: %w (while waiting to retry after: %w)", method, path, werr, err)
		}
	}
}

// callIDHeader carries a keyed call's ID (doAttempts).
const callIDHeader = "Sluice-Call-Id"

// newCallID is a random ID for one keyed call: 128 bits, URL-safe.
func newCallID() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand's Read never fails
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (c *Client) once(ctx context.Context, method, target string, payload []byte, out any, idemKey, callID string) (http.Header, error) {
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json, application/problem+json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		// Under its lower-case name, which net/http writes as it is (header names are
		// case-insensitive): its Transport re-sends a request whose header map holds an
		// "Idempotency-Key" entry when a reused connection broke after it was sent, unseen by
		// doAttempts (even with WithRetries(0), and for a call without a body, such as a lease's
		// release); under this name every attempt is doAttempts', and redirects still work.
		req.Header["idempotency-key"] = []string{idemKey}
		req.Header.Set(callIDHeader, callID)
	}
	// Everything a request could be refused for before it leaves (its URL, its header values) is
	// checked before this point, so an error of Do is the transport's: no answer.
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, &noAnswerError{err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, &noAnswerError{fmt.Errorf("read the answer: %w", err)}
	}
	if resp.StatusCode >= 300 {
		return nil, problem(resp, data)
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.Unmarshal(data, out); err != nil {
			return nil, fmt.Errorf("decode the answer (%d, %s): %w", resp.StatusCode, resp.Header.Get("Content-Type"), err)
		}
	}
	return resp.Header, nil
}

// problem reads an error answer. One that is not a problem (a proxy's page) still becomes an
// *Error with its status, so that errors.As and the retry and fail policies treat it alike.
func problem(resp *http.Response, data []byte) *Error {
	e := &Error{}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct != "application/problem+json" || json.Unmarshal(data, e) != nil || e.Code == "" {
		snippet := strings.TrimSpace(string(data[:min(len(data), 200)]))
		e = &Error{Title: http.StatusText(resp.StatusCode), Detail: "the answer is not a problem: " + snippet}
	}
	e.Status = resp.StatusCode
	if e.RetryAfter == 0 {
		e.RetryAfter = retryAfterHeader(resp.Header.Get("Retry-After"), time.Now())
	}
	return e
}

// retryAfterHeader reads a Retry-After header: delay-seconds or an HTTP date (RFC 9110, 10.2.3);
// 0 when it is absent, malformed or in the past.
func retryAfterHeader(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(math.MaxInt64/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// notFound reports whether err is Sluice's answer that the thing named does not exist.
func notFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound && (e.Code == CodeLimitNotFound || e.Code == CodeNotFound)
}

// sluiceAnswered reports whether err is Sluice's own problem: not a network error, nor a proxy's
// error page (which it may send after forwarding the request).
func sluiceAnswered(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code != ""
}

// noAnswerError is a request that got no answer (or an answer cut short): a network error, or
// the client's timeout. It is what the FailPolicy applies to, with a 5xx; an error made before
// the request was sent never is.
type noAnswerError struct{ err error }

func (e *noAnswerError) Error() string { return e.err.Error() }
func (e *noAnswerError) Unwrap() error { return e.err }

// noAnswer reports whether err is a request that got no answer.
func noAnswer(err error) bool {
	var n *noAnswerError
	return errors.As(err, &n)
}

// retryable reports whether a failed attempt may succeed when repeated: Sluice failed closed
// (503) or the request did not get an answer, an attempt the http.Client's own Timeout ended
// included (its error is a context.DeadlineExceeded). Whether the call still has time is for
// the caller to check (its context's Err): the call's own deadline or cancellation ends it.
func retryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Status == http.StatusServiceUnavailable
	}
	return noAnswer(err) && !errors.Is(err, context.Canceled)
}

// retryDelay is how long to wait before retry number attempt+1 after err: the jittered backoff,
// or, when the answer asked for longer with Retry-After (Sluice's 503 asks for 1 s), that long,
// up to the maximum backoff, so that a proxy asking for minutes cannot stall a call. That wait
// is taken only when it leaves the call at least as long again for the retry before its deadline:
// otherwise the backoff's retry may still be answered in time, where waiting out the Retry-After
// would most likely fail the call at its deadline.
func (c *Client) retryDelay(ctx context.Context, attempt int, err error) time.Duration {
	d := c.delay(attempt)
	var e *Error
	if !errors.As(err, &e) || e.RetryAfter <= d {
		return d
	}
	asked := max(d, min(e.RetryAfter, c.maxBackoff))
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < 2*asked {
		return d
	}
	return asked
}

// delay is the jittered exponential backoff before retry number attempt+1.
func (c *Client) delay(attempt int) time.Duration {
	d := c.maxBackoff
	if attempt < 30 && c.backoff<<attempt < c.maxBackoff {
		d = c.backoff << attempt
	}
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d-d/2)
}

func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
