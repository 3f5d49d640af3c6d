package sluice

import (
	"context"
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
// Code "rate_limited" and its RetryAfter. It is never retried (a lost answer may have held).
func (c *Client) Hold(ctx context.Context, items []HoldItem, ttl time.Duration) (Hold, error) {
	var w struct {
		HoldID    string         `json:"holdId"`
		ExpiresAt int64          `json:"expiresAt"`
		Results   []wireDecision `json:"results"`
	}
	body := struct {
		Limits []HoldItem `json:"limits"`
		TTL    int64      `json:"ttl"`
	}{items, ttl.Milliseconds()}
	if _, err := c.do(ctx, http.MethodPost, "/v1/holds", nil, body, consuming, &w); err != nil {
		return Hold{}, err
	}
	h := Hold{ID: w.HoldID, ExpiresAt: time.UnixMilli(w.ExpiresAt)}
	for _, r := range w.Results {
		h.Results = append(h.Results, r.result())
	}
	return h, nil
}

// SettleHold charges a hold's actual amounts, one per item in the hold's order, exactly once:
// a second settle, or one after a release or expiry, is an *Error with Code "hold_closed".
func (c *Client) SettleHold(ctx context.Context, id string, counts []float64) ([]Settled, error) {
	var w struct {
		Limits []Settled `json:"limits"`
	}
	body := struct {
		Counts []float64 `json:"counts"`
	}{counts}
	if _, err := c.do(ctx, http.MethodPost, "/v1/holds/"+url.PathEscape(id)+"/settle", nil, body, consuming, &w); err != nil {
		return nil, err
	}
	return w.Limits, nil
}

// ReleaseHold gives back everything a hold reserved.
func (c *Client) ReleaseHold(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/holds/"+url.PathEscape(id), nil, nil, consuming, nil)
	return err
}

// ReleaseLease ends a concurrency lease (Result.LeaseID): its slot is free at once.
func (c *Client) ReleaseLease(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(id)+"/release", nil, nil, consuming, nil)
	return err
}

// ExtendLease renews a lease to its limit's leaseTtl from now and returns its new expiry; an
// expired lease is an *Error with Code "lease_closed".
func (c *Client) ExtendLease(ctx context.Context, id string) (time.Time, error) {
	var w struct {
		ExpiresAt int64 `json:"expiresAt"`
	}
	if _, err := c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(id)+"/extend", nil, nil, consuming, &w); err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(w.ExpiresAt), nil
}
