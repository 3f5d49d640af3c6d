package sluice

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Defaults of WithBatching.
const (
	// DefaultBatchWindow is how long the first Limit call of a batch waits for others to join it:
	// short enough to add little to a call that waits for the network anyway.
	DefaultBatchWindow = time.Millisecond
	// DefaultBatchMaxItems is how many calls a batch holds before it is sent without waiting.
	DefaultBatchMaxItems = 100
	// MaxBatchItems is the most a batch may hold: what one POST /v1/decisions accepts.
	MaxBatchItems = 1000
)

// Bounds of what one batch sends, below the server's body limits (64 KiB for one decision, 1 MiB
// for a bulk request), so that batching never turns a valid call into a 413.
const (
	maxBatchedItemBytes = 32 << 10
	maxBatchBytes       = 1<<20 - 64<<10
)

// WithBatching merges concurrent Limit calls into one POST /v1/decisions request. The first call
// of a batch waits up to window for others to join (DefaultBatchWindow when window <= 0); the
// batch is sent when the window ends or as soon as it holds maxItems calls
// (DefaultBatchMaxItems when maxItems <= 0, at most MaxBatchItems). Off by default. The window
// counts against each call's timeout (WithTimeout): one longer than half the timeout is cut to
// half of it, so that a batch the window sends has time left for its request.
//
// Each Limit call returns what it would have returned unbatched, with these differences:
//   - Its Result carries no RateLimitPolicy and RateLimit headers (a bulk answer has none),
//     so neither does the Middleware's response.
//   - A problem of its own decision is the *Error the single call gets (same Status, Code and
//     Field: the bulk answer's "decisions[i]." prefix of Field is removed), wrapped with the
//     route POST /v1/decisions.
//   - A caller whose context ends gets the context's error at once, but its decision stays in
//     the batch and may still be made (and its tokens consumed), unless every caller of the
//     batch has left: its request is then cancelled (see below).
//
// When the bulk request as a whole fails (a network error, the client's timeout, a 5xx), every
// call of the batch follows the FailPolicy, as it would alone; a batch is never retried, as Limit
// is not. A call whose decision is too large to batch is sent alone, so that it gets the single
// call's own answer (a limit name Sluice cannot know never gets this far: Limit refuses it before
// sending). Check, Batch, CheckBatch and Bulk are never batched.
//
// A batch's request is bounded by the client's timeout (WithTimeout) and is cancelled once
// every caller in the batch has left (each one's context ended), so that it never outlives them
// all, even with WithTimeout(0).
func WithBatching(window time.Duration, maxItems int) Option {
	if window <= 0 {
		window = DefaultBatchWindow
	}
	if maxItems <= 0 {
		maxItems = DefaultBatchMaxItems
	}
	maxItems = min(maxItems, MaxBatchItems)
	return func(c *Client) { c.batcher = &batcher{window: window, maxItems: maxItems} }
}

// batcher collects concurrent Limit calls into batches. Design: no goroutine lives beyond the
// batch it serves. The first call of a batch arms a timer (time.AfterFunc) for the window; the
// batch is sent by whichever comes first, the timer or the call that fills it, and the one that
// detaches it from the batcher (under mu) is the one that sends it, in a goroutine of its own
// that ends with the request (bounded by the client's timeout, and cancelled once every caller of
// the batch has left). An idle client holds nothing, so there is nothing to Close.
type batcher struct {
	window   time.Duration
	maxItems int

	mu   sync.Mutex
	open *pendingBatch // the batch being filled, nil when none
}

// pendingBatch is one batch: its items are encoded by their callers as they join.
type pendingBatch struct {
	items [][]byte
	size  int
	timer *time.Timer

	// ctx is the bulk request's, cancelled (cancel) once every caller has left before the answer
	// came: no one is waiting for it any more, so it must not hold a goroutine and a connection
	// (with WithTimeout(0) nothing else would end it). waiting counts the callers still waiting;
	// both are guarded by the batcher's mu.
	ctx     context.Context
	cancel  context.CancelFunc
	waiting int

	done      chan struct{} // closed when results or err is set
	results   []wireBulkResult
	requestID string // the bulk request's, which Sluice logs a failed item's cause with
	err       error
}

// join adds an encoded item and returns its batch and index. A batch that reaches maxItems, or
// that the item would take over the byte budget, is detached and sent.
func (b *batcher) join(c *Client, item []byte) (*pendingBatch, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.open; p != nil && p.size+len(item)+1 > maxBatchBytes {
		b.detach(c, p)
	}
	p := b.open
	if p == nil {
		p = &pendingBatch{done: make(chan struct{})}
		p.ctx, p.cancel = context.WithCancel(context.Background())
		b.open = p
		p.timer = time.AfterFunc(b.window, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.open == p { // not already sent for being full
				b.detach(c, p)
			}
		})
	}
	p.items = append(p.items, item)
	p.size += len(item) + 1
	p.waiting++
	i := len(p.items) - 1
	if len(p.items) >= b.maxItems {
		b.detach(c, p)
	}
	return p, i
}

// detach closes p to new items and sends it. b.mu is held.
func (b *batcher) detach(c *Client, p *pendingBatch) {
	b.open = nil
	p.timer.Stop() // when it already fired, its func finds b.open != p and does nothing
	// Every caller left while it was open: nothing is sent.
	if p.waiting == 0 {
		p.cancel()
	}
	go p.send(c)
}

// leave is a caller of p giving up before the answer came (its context ended). The last one to
// leave a batch that is sent cancels its request; an open batch stays open to new callers
// (detach cancels it if it has none when it closes).
func (b *batcher) leave(p *pendingBatch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p.waiting--
	if p.waiting == 0 && b.open != p {
		p.cancel()
	}
}

// send makes the bulk request; it runs once per batch, without any one caller's context (a
// batch serves many), bounded by the client's timeout and cancelled once every caller has left.
func (p *pendingBatch) send(c *Client) {
	defer close(p.done)
	defer p.cancel()
	if err := p.ctx.Err(); err != nil { // no one is waiting for it
		p.err = fmt.Errorf("sluice: POST /v1/decisions: every caller left: %w", err)
		return
	}
	body := make([]byte, 0, p.size+len(`{"decisions":[]}`))
	body = append(body, `{"decisions":[`...)
	for i, it := range p.items {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, it...)
	}
	body = append(body, "]}"...)
	var w wireBulk
	h, err := c.do(p.ctx, http.MethodPost, "/v1/decisions", nil, json.RawMessage(body), consuming, &w)
	if err != nil {
		p.err = err
		return
	}
	if len(w.Results) != len(p.items) {
		p.err = fmt.Errorf("sluice: POST /v1/decisions: %d results for %d decisions", len(w.Results), len(p.items))
		return
	}
	p.results, p.requestID = w.Results, h.Get("X-Request-ID")
}

// limitBatched is Limit through the batcher.
func (c *Client) limitBatched(ctx context.Context, name string, d Decision) (Result, error) {
	it := Item{Name: name, Decision: d}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("sluice: POST /v1/decisions: %w", err)
	}
	if c.invalid != nil { // as the single call: refused before sending, whatever the FailPolicy
		return Result{}, fmt.Errorf("sluice: POST /v1/decisions: %w", c.invalid)
	}
	enc, err := json.Marshal(it)
	if err != nil { // e.g. an inline Config with a Rate of NaN or ±Inf
		return Result{}, fmt.Errorf("sluice: POST /v1/decisions: %w: encode the decision: %w", ErrInvalidArgument, err)
	}
	if len(enc) > maxBatchedItemBytes {
		return c.decide(ctx, name, "/limit", d, consuming)
	}
	wait := ctx
	if c.timeout > 0 {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	p, i := c.batcher.join(c, enc)
	select {
	case <-p.done:
	case <-wait.Done():
		c.batcher.leave(p)
		// As unbatched: the client's timeout goes to the FailPolicy, the caller's context does not.
		return c.fallbackOne(ctx, it, fmt.Errorf("sluice: POST /v1/decisions: %w", &noAnswerError{wait.Err()}))
	}
	if p.err != nil {
		return c.fallbackOne(ctx, it, p.err)
	}
	r := p.results[i]
	if r.Error != nil {
		return c.fallbackOne(ctx, it, fmt.Errorf("sluice: POST /v1/decisions (batched): %w", unprefixed(r.Error, i, p.requestID)))
	}
	return r.result(), nil
}

// unprefixed is a bulk item's problem as the single call reports it: its fields without the
// item's "decisions[i]." prefix (and an unknown limit's without "name"), and the request's ID
// (an item's problem carries none).
func unprefixed(e *Error, i int, requestID string) *Error {
	out := reprefixed(e, i, "")
	if out.RequestID == "" {
		out.RequestID = requestID
	}
	if out.Code == CodeLimitNotFound && out.Field == "name" {
		out.Field = "" // the single call names its limit in the path, and its 404 no field
	}
	return out
}

// reprefixed is a bulk item's problem with its fields' "decisions[i]." prefix replaced by to.
func reprefixed(e *Error, i int, to string) *Error {
	prefix := fmt.Sprintf("decisions[%d].", i)
	swap := func(field string) string {
		if rest, ok := strings.CutPrefix(field, prefix); ok {
			return to + rest
		}
		return field
	}
	out := *e
	out.Field = swap(e.Field)
	if e.Errors != nil {
		out.Errors = make([]FieldError, len(e.Errors))
		for k, fe := range e.Errors {
			out.Errors[k] = FieldError{Field: swap(fe.Field), Detail: fe.Detail}
		}
	}
	return &out
}

// validName reports whether Sluice can know a limit of that name (^[A-Za-z0-9_.:-]{1,128}$, and
// not "." or "..", which a URL's path cannot carry: they are its dot segments). The single route
// answers limit_not_found for any other name, the bulk one invalid_request.
func validName(name string) bool {
	if len(name) == 0 || len(name) > 128 || name == "." || name == ".." {
		return false
	}
	for _, r := range []byte(name) {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '_', r == '.', r == ':', r == '-':
		default:
			return false
		}
	}
	return true
}
