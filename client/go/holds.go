package sluice

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// HoldItem is one amount a hold reserves: Count of the stored limit Name for Key ("" for the
// limit's global key), and through Attributes of its ancestors (nested budgets).
type HoldItem struct {
	Name       string            `json:"name"`
	Key        string            `json:"key,omitempty"`
	Count      float64           `json:"count"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

// Hold is an admitted hold: settle it (SettleHold) or release it (ReleaseHold) before ExpiresAt,
// after which Sluice releases it by itself.
type Hold struct {
	ID        string
	ExpiresAt time.Time
	Results   []Result
	// Replayed is true when Sluice answered with the stored answer of an earlier Hold under the
	// same Idempotency-Key (WithIdempotencyKey): this call held nothing more.
	Replayed bool
}

// Settled is one limit of a settled hold: what it held, what it now counts (Charged), what was
// given back, and the Overage that did not fit (recorded, never taken).
type Settled struct {
	Name     string  `json:"name"`
	Key      *string `json:"key"`
	Held     float64 `json:"held"`
	Charged  float64 `json:"charged"`
	Refunded float64 `json:"refunded"`
	Overage  float64 `json:"overage"`
}

// Hold reserves every item all or nothing for ttl (1 ms to 24 h). A refusal is an *Error with
// Code "rate_limited" and its RetryAfter (or "tenant_quota_exceeded" when the tenant's plan
// refused: each item is one decision of it). Without WithIdempotencyKey it is never retried (a
// lost answer may have held); with one it is retried, and a retry is answered with the first
// hold.
func (c *Client) Hold(ctx context.Context, items []HoldItem, ttl time.Duration) (Hold, error) {
	for i, it := range items {
		if err := checkDecision(it.Name, Decision{Key: it.Key, Count: &it.Count, Attributes: it.Attributes}); err != nil {
			return Hold{}, fmt.Errorf("items[%d]: %w", i, err)
		}
	}
	ik, err := idempotencyKeyOf(ctx)
	if err != nil {
		return Hold{}, err
	}
	var w wireHold
	body := struct {
		Limits []HoldItem `json:"limits"`
		TTL    int64      `json:"ttl"`
	}{items, ttl.Milliseconds()}
	hs, err := c.doKeyed(ctx, http.MethodPost, "/v1/holds", nil, body, consuming, &w, ik)
	if err != nil {
		return Hold{}, err
	}
	h := Hold{ID: w.HoldID, ExpiresAt: time.UnixMilli(w.ExpiresAt), Replayed: hs.Get("Idempotent-Replayed") == "true"}
	for _, r := range w.Results {
		h.Results = append(h.Results, r.result())
	}
	return h, nil
}

// SettleHold charges a hold's actual amounts, one per item in the hold's order, exactly once:
// a second settle, or one after a release or expiry, is an *Error with Code "hold_closed"
// (except a retry under the first one's Idempotency-Key, which gets the first answer again).
// Like the other calls on holds and leases it is retried only under WithIdempotencyKey.
func (c *Client) SettleHold(ctx context.Context, id string, counts []float64) ([]Settled, error) {
	for i, n := range counts {
		if !(n >= 0 && n <= 1e15) { // NaN fails both
			return nil, fmt.Errorf("counts[%d]: %w: count %v: a count is a number of tokens from 0 to 1e15", i, ErrInvalidArgument, n)
		}
	}
	ik, err := idempotencyKeyOf(ctx)
	if err != nil {
		return nil, err
	}
	var w struct {
		Limits []Settled `json:"limits"`
	}
	body := struct {
		Counts []float64 `json:"counts"`
	}{counts}
	if _, err := c.doKeyed(ctx, http.MethodPost, "/v1/holds/"+url.PathEscape(id)+"/settle", nil, body, consuming, &w, ik); err != nil {
		return nil, err
	}
	return w.Limits, nil
}

// ReleaseHold gives back everything a hold reserved.
func (c *Client) ReleaseHold(ctx context.Context, id string) error {
	return c.closeKeyed(ctx, http.MethodDelete, "/v1/holds/"+url.PathEscape(id), nil)
}

// ReleaseLease ends a concurrency lease (Result.LeaseID): its slot is free at once.
func (c *Client) ReleaseLease(ctx context.Context, id string) error {
	return c.closeKeyed(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(id)+"/release", nil)
}

// ExtendLease renews a lease to its limit's leaseTtl from now and returns its new expiry; an
// expired lease is an *Error with Code "lease_closed".
func (c *Client) ExtendLease(ctx context.Context, id string) (time.Time, error) {
	var w struct {
		ExpiresAt int64 `json:"expiresAt"`
	}
	if err := c.closeKeyed(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(id)+"/extend", &w); err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(w.ExpiresAt), nil
}

// closeKeyed makes a call on a hold or lease without a body, with ctx's Idempotency-Key when it
// has one (then retried, the stored answer replayed) and otherwise never retried.
func (c *Client) closeKeyed(ctx context.Context, method, path string, out any) error {
	ik, err := idempotencyKeyOf(ctx)
	if err != nil {
		return err
	}
	_, err = c.doKeyed(ctx, method, path, nil, nil, consuming, out, ik)
	return err
}

// wireHold is a hold's answer as Sluice sends it.
type wireHold struct {
	HoldID    string         `json:"holdId"`
	ExpiresAt int64          `json:"expiresAt"`
	Results   []wireDecision `json:"results"`
}

// UnmarshalJSON decodes a hold's answer, refusing one without a member the OpenAPI document
// requires of it ({} or null would read as a hold with no ID).
func (w *wireHold) UnmarshalJSON(b []byte) error {
	if err := requireMembers(b, "a hold", "holdId", "expiresAt", "results"); err != nil {
		return err
	}
	type plain wireHold
	return json.Unmarshal(b, (*plain)(w))
}
