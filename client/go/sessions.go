package sluice

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Authorization is an anonymous session's authorization, as AuthorizeSession answers it.
type Authorization struct {
	Authorized bool      `json:"authorized"`
	ExpiresAt  time.Time `json:"expiresAt"`
	// Token is an EdDSA JWT that proves the authorization offline (verify it with
	// /.well-known/jwks.json; its subject is the SHA-256 of the session ID). It does not replace
	// the session ID: decisions still take Request.Session, the ID itself.
	Token string `json:"token"`
}

// Session is an authorized anonymous session, as GetSession answers it.
type Session struct {
	SessionID    string    `json:"sessionId"`
	Authorized   bool      `json:"authorized"`
	AuthorizedAt time.Time `json:"authorizedAt"`
	ExpiresAt    time.Time `json:"expiresAt"`
}

// AuthorizeSession authorizes the anonymous session sessionID with the payload its page solved
// (the captcha widget's "altcha" form field): Sluice verifies the proof of work. A challenge
// authorizes once, so this call is never retried.
func (c *Client) AuthorizeSession(ctx context.Context, sessionID, payload string) (Authorization, error) {
	var a Authorization
	body := map[string]string{"sessionId": sessionID, "payload": payload}
	_, err := c.do(ctx, http.MethodPost, "/v1/sessions/authorize", nil, body, consuming, &a)
	return a, err
}

// GetSession reads the session's active authorization (an *Error with Code "not_found" when it
// has none).
func (c *Client) GetSession(ctx context.Context, sessionID string) (Session, error) {
	var s Session
	_, err := c.do(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(sessionID), nil, nil, idempotent, &s)
	return s, err
}

// RevokeSession ends the session's authorization (an *Error with Code "not_found" when there was
// none).
func (c *Client) RevokeSession(ctx context.Context, sessionID string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/sessions/"+url.PathEscape(sessionID), nil, nil, idempotent, nil)
	return err
}
