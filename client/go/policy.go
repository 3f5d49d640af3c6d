package sluice

import (
	"context"
	"errors"
	"net/http"
)

// FailPolicy decides what a decision call (Limit, Check, Batch, CheckBatch, Bulk) returns when
// Sluice cannot answer: a network error, the client's timeout, a 5xx answer (after the
// retries the call allows), or a 429 that is not Sluice's problem (a gateway in front of it
// limiting this client). Problems that are the caller's (4xx: a bad request, a wrong key, an
// unknown limit) and a context the caller cancelled are always returned as errors: failing open
// on them would hide a mistake. The zero FailPolicy is FailClosed.
type FailPolicy struct {
	fallback FallbackFunc
}

// FallbackFunc makes the result of one decision Sluice could not make; err says why. The client
// marks what it returns Degraded. An error it returns is the call's error.
type FallbackFunc func(ctx context.Context, name string, d Decision, err error) (Result, error)

var (
	// FailClosed returns the error: the caller decides (the default).
	FailClosed = FailPolicy{}
	// FailOpen admits: every decision Sluice could not make is an allowed Result, Degraded.
	FailOpen = Fallback(func(_ context.Context, name string, d Decision, _ error) (Result, error) {
		return Result{OK: true, Name: name, Key: d.Key}, nil
	})
)

// Fallback is the policy that asks fn, e.g. to decide with an in-process limiter while Sluice
// is away. For a batch, fn is asked once per item and the batch is allowed when every item is.
func Fallback(fn FallbackFunc) FailPolicy { return FailPolicy{fallback: fn} }

// cannotAnswer reports whether err means Sluice did not answer (rather than answered no): a
// request that got no answer (a network error, the client's timeout), a 5xx, or a 429 that is
// not a problem of Sluice's (gatewayRefused). Nothing else is: not an error made before the
// request was sent (ErrInvalidArgument: the caller's arguments or the client's configuration),
// nor an answer that did not decode.
func cannotAnswer(ctx context.Context, err error) bool {
	if ctx.Err() != nil { // the caller gave up: its error, not Sluice's
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Status >= http.StatusInternalServerError || gatewayRefused(e)
	}
	return noAnswer(err)
}

// gatewayRefused reports whether e is a 429 that is not Sluice's problem (Sluice's own 429s are
// problems with a code): something in front of Sluice (a gateway, a load balancer) limiting this
// client, so that Sluice was never asked.
func gatewayRefused(e *Error) bool {
	return e.Status == http.StatusTooManyRequests && e.Code == ""
}

func (c *Client) fallbackOne(ctx context.Context, it Item, err error) (Result, error) {
	if c.policy.fallback == nil || !cannotAnswer(ctx, err) {
		return Result{}, err
	}
	r, ferr := c.policy.fallback(ctx, it.Name, it.Decision, err)
	if ferr != nil {
		return Result{}, ferr
	}
	r.Degraded = true
	return r, nil
}

func (c *Client) fallbackBatch(ctx context.Context, items []Item, err error) (BatchResult, error) {
	if c.policy.fallback == nil || !cannotAnswer(ctx, err) {
		return BatchResult{}, err
	}
	out := BatchResult{OK: true, Degraded: true, Results: make([]Result, len(items))}
	for i, it := range items {
		r, ferr := c.fallbackOne(ctx, it, err)
		if ferr != nil {
			return BatchResult{}, ferr
		}
		out.Results[i] = r
		out.OK = out.OK && r.OK
	}
	for _, r := range out.Results {
		if r.OK == out.OK { // a refused batch waits for its refusals, an admitted one for its reservations
			out.RetryAfter = max(out.RetryAfter, r.RetryAfter)
		}
	}
	return out, nil
}

func (c *Client) fallbackBulk(ctx context.Context, items []Item, err error) ([]BulkResult, error) {
	if c.policy.fallback == nil || !cannotAnswer(ctx, err) {
		return nil, err
	}
	out := make([]BulkResult, len(items))
	for i, it := range items {
		out[i].Result, out[i].Err = c.fallbackOne(ctx, it, err)
	}
	return out, nil
}
