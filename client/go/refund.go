package sluice

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
)

// Refund asks to give tokens back: Count of them, to Key ("" for the limit's global key) and,
// through Attributes, to the same decision's ancestors (nested budgets).
type Refund struct {
	Key        string            `json:"key,omitempty"`
	Count      float64           `json:"count"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

// RefundResult is what a refund gave back: Refunded (at most the count) and what the key holds
// afterwards, and the same for each ancestor.
type RefundResult struct {
	Name      string  `json:"name"`
	Key       *string `json:"key"`
	Refunded  float64 `json:"refunded"`
	Remaining float64 `json:"remaining"`
	Parents   []struct {
		Name      string  `json:"name"`
		Key       string  `json:"key"`
		Refunded  float64 `json:"refunded"`
		Remaining float64 `json:"remaining"`
	} `json:"parents"`
	// Replayed is true when Sluice answered with the stored answer of an earlier refund under
	// the same Idempotency-Key (WithIdempotencyKey): nothing was given back again.
	Replayed bool `json:"-"`
}

// Refund gives tokens back to a stored limit (charge what was used, give back the rest): never
// above the limit's maximum. Without an Idempotency-Key it is never retried: when its answer is
// lost the tokens may already be back, and a second refund could give back tokens another caller
// took since. Under WithIdempotencyKey it is retried like Limit: Sluice answers a retry with the
// first answer (RefundResult.Replayed) and gives nothing back again.
func (c *Client) Refund(ctx context.Context, name string, r Refund) (RefundResult, error) {
	if err := checkDecision(name, Decision{Key: r.Key, Count: &r.Count, Attributes: r.Attributes}); err != nil {
		return RefundResult{}, err
	}
	ik, err := idempotencyKeyOf(ctx)
	if err != nil {
		return RefundResult{}, err
	}
	var out RefundResult
	h, err := c.doKeyed(ctx, http.MethodPost, "/v1/limits/"+url.PathEscape(name)+"/refund", nil, r, consuming, &out, ik)
	if err != nil {
		return RefundResult{}, err
	}
	out.Replayed = h.Get("Idempotent-Replayed") == "true"
	return out, nil
}

// UnmarshalJSON decodes a refund's answer, refusing one without a member the OpenAPI document
// requires of it ({} or null would read as a refund of nothing).
func (r *RefundResult) UnmarshalJSON(b []byte) error {
	if err := requireMembers(b, "a refund", "name", "key", "refunded", "remaining"); err != nil {
		return err
	}
	type plain RefundResult
	return json.Unmarshal(b, (*plain)(r))
}
