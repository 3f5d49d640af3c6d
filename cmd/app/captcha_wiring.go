package main

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/captcha"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/demo"
	"github.com/sluice-dev/sluice/internal/httpserver"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/web"
)

// anonymousSessions wires the captcha of DESIGN §6: the challenge, authorize, read and revoke
// routes under /v1, the JWK set at /.well-known/jwks.json, the session checker decisions use
// for "session" keys, and the /demo page.
//
// Keys derive from SECRET_KEY, so every instance and every restart agrees on them: the
// challenges' HMAC key from "captcha-hmac", the Ed25519 seed of the session tokens from
// "session-token". Tokens name BASE_URL as their issuer.
type anonymousSessions struct {
	store    *captcha.Store
	sessions *api.Sessions
	demo     *demo.Demo
	stop     func()
}

func newAnonymousSessions(ctx context.Context, cfg config.Config, d *db.DB, keys secrets, svc *tenants.Service, engine *limiter.Engine, log *slog.Logger) (*anonymousSessions, error) {
	issuer, err := captcha.NewIssuer(keys.derive("captcha-hmac"), nil)
	if err != nil {
		return nil, err
	}
	signer, err := captcha.NewSigner(keys.derive("session-token"), cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	store := captcha.NewStore(d, nil, captcha.WithLogger(log))
	sessions, err := api.NewSessions(api.SessionsDeps{
		Issuer: issuer, Store: store, Signer: signer,
		Auth: svc, Tenants: svc, Limiter: engine, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	widget, err := fs.Sub(web.Static(), "altcha")
	if err != nil {
		return nil, fmt.Errorf("captcha widget: %w", err)
	}
	dm, err := demo.New(demo.Deps{Tenants: svc, Widget: widget, Origins: []string{cfg.BaseURL}, Logger: log})
	if err != nil {
		return nil, err
	}
	x := &anonymousSessions{store: store, sessions: sessions, demo: dm}
	x.stop = background(log, "captcha sweep", store.Run) // expired sessions and used challenges
	return x, nil
}

// extra is api.Deps.Extra: the /v1 routes.
func (x *anonymousSessions) extra() []func(public, authed *gin.RouterGroup) {
	return []func(public, authed *gin.RouterGroup){x.sessions.Routes}
}

// surfaces are the routes outside /v1: the JWK set and the demo.
func (x *anonymousSessions) surfaces() []httpserver.Surface {
	return []httpserver.Surface{x.sessions, x.demo}
}

// listening tells the demo the address the server really listens on (port 0 in tests), so that
// its tenant allows that origin too.
func (x *anonymousSessions) listening(base string) { x.demo.AddOrigin(base) }

// close stops the store's sweep (Run); call it before the database closes.
func (x *anonymousSessions) close() { x.stop() }
