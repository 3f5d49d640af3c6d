package sluice

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// OverrideAction is what an override does instead of changing numbers.
type OverrideAction string

// The override actions.
const (
	// Allow admits the matched keys without counting.
	Allow OverrideAction = "allow"
	// Deny refuses the matched keys until the override expires (or for ever).
	Deny OverrideAction = "deny"
)

// Override changes a stored limit for the keys Match matches: an exact key, or a prefix
// followed by one "*" ("org:acme:*"). For a key the exact match wins, then the longest prefix.
// Give new numbers (Rate, Capacity, MaxReserved; nil keeps the definition's) or an Action.
// ExpiresAt nil never expires. A limit holds at most 10,000 overrides.
type Override struct {
	Match       string         `json:"match"`
	Rate        *float64       `json:"rate,omitempty"`
	Capacity    *float64       `json:"capacity,omitempty"`
	MaxReserved *float64       `json:"maxReserved,omitempty"`
	Action      OverrideAction `json:"action,omitempty"`
	ExpiresAt   *time.Time     `json:"expiresAt,omitempty"`
}

// StoredOverride is an override as Sluice stores it.
type StoredOverride struct {
	Override
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// OverridesPage is one page of a limit's overrides, ordered by match. Next is the match to pass
// as ListOverridesOptions.After for the following page; "" on the last page.
type OverridesPage struct {
	Overrides []StoredOverride
	Next      string
}

// ListOverridesOptions pages ListOverrides: Limit overrides per page (0: the server's default,
// 100; at most 1000), after the match After ("": from the first).
type ListOverridesOptions struct {
	Limit int
	After string
}

type wireOverridesPage struct {
	Overrides []StoredOverride `json:"overrides"`
	Next      *string          `json:"next"`
}

// PutOverride creates or replaces the override of the limit name whose match is o.Match. The
// limit must have a stored definition (a *Error with Code limit_not_found otherwise); an invalid
// override is a *Error naming the field.
func (c *Client) PutOverride(ctx context.Context, name string, o Override) (StoredOverride, error) {
	if err := checkText("match", o.Match); err != nil {
		return StoredOverride{}, err
	}
	path, err := limitPath(name, "/overrides")
	if err != nil {
		return StoredOverride{}, err
	}
	var s StoredOverride
	_, err = c.do(ctx, http.MethodPut, path, nil, o, idempotent, &s)
	return s, err
}

// ListOverrides reads one page of the overrides of the limit name.
func (c *Client) ListOverrides(ctx context.Context, name string, opts ListOverridesOptions) (OverridesPage, error) {
	path, err := limitPath(name, "/overrides")
	if err != nil {
		return OverridesPage{}, err
	}
	q := url.Values{}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.After != "" {
		q.Set("after", opts.After)
	}
	var w wireOverridesPage
	if _, err := c.do(ctx, http.MethodGet, path, q, nil, idempotent, &w); err != nil {
		return OverridesPage{}, err
	}
	p := OverridesPage{Overrides: w.Overrides}
	if w.Next != nil {
		p.Next = *w.Next
	}
	return p, nil
}

// DeleteOverride deletes the override of the limit name whose match is match (a *Error with
// Code not_found when there is none).
func (c *Client) DeleteOverride(ctx context.Context, name, match string) error {
	if err := checkText("match", match); err != nil {
		return err
	}
	path, err := limitPath(name, "/overrides")
	if err != nil {
		return err
	}
	_, err = c.do(ctx, http.MethodDelete, path, url.Values{"match": {match}}, nil, idempotent, nil)
	return err
}
