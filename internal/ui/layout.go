package ui

import (
	"math"
	"net/url"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
)

// layoutVM is what the shared layout needs: title, assets, the user, the current tenant and
// (for operators) the tenant switcher.
type layoutVM struct {
	Title      string
	CSS, JS    string
	HTMX       string
	LoggedIn   bool
	Email      string
	IsOperator bool
	Tenant     *tenantRef // the tenant whose pages are shown, if any
	Tenants    []tenantRef
	Nav        string // "limits", "keys", "audit", "tenants", "server-audit"
	Viewer     bool   // the user is a viewer of the tenant shown
	ReadOnly   bool   // the user may not change the tenant shown (readOnlyReason): no forms
	Flash      string
}

type tenantRef struct {
	ID        int64
	Name      string
	Suspended bool // read-only for its members until an operator resumes it
	Deleting  bool // read-only for everyone: its deletion began
}

func (u *UI) bareLayout(c *gin.Context, title string) layoutVM {
	return layoutVM{
		Title: title, CSS: u.static.url("app.css"), JS: u.static.url("app.js"), HTMX: u.static.url("htmx/htmx.min.js"),
		Flash: flash(c),
	}
}

// layout is the layout of a logged-in page; with a tenant in the context it shows its tabs.
func (u *UI) layout(c *gin.Context, title, nav string) (layoutVM, error) {
	l := u.bareLayout(c, title)
	p := principalOf(c)
	l.LoggedIn, l.Email, l.IsOperator, l.Nav = true, p.user.Email, p.user.IsOperator, nav
	if t := tenantOf(c); t.ID != 0 {
		l.Tenant = &tenantRef{ID: t.ID, Name: t.Name, Suspended: t.SuspendedAt != nil, Deleting: t.Deleting}
		l.Viewer, l.ReadOnly = !p.user.CanChange(t.ID), readOnlyReason(p.user, t) != ""
	}
	if p.user.IsOperator {
		ts, err := u.tenants.ListTenants(c.Request.Context())
		if err != nil {
			return l, err
		}
		for _, t := range ts {
			l.Tenants = append(l.Tenants, tenantRef{ID: t.ID, Name: t.Name})
		}
	}
	return l, nil
}

// Paths. Limit names match ^[A-Za-z0-9_.:-]+$, but are escaped anyway.

func tenantPath(id int64, rest string) string {
	return "/tenants/" + strconv.FormatInt(id, 10) + rest
}

func limitPath(tid int64, name, rest string) string {
	return tenantPath(tid, "/limits/"+url.PathEscape(name)+rest)
}

func fmtTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

func fmtTimePtr(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	return fmtTime(*t)
}

// fmtNum shows a token count rounded to two decimals, without trailing zeros ("7", "7.5").
func fmtNum(v float64) string {
	r := math.Round(v*100) / 100
	if r == 0 {
		r = 0 // no "-0"
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
}

// fmtDef shows a number of a definition (a rate, a capacity, a maximum) as fmtNum does, but one
// too small for two decimals (a rate of 0.004 a second) with its own digits rather than as "0":
// it is a valid setting, not a rounding residue of token arithmetic.
func fmtDef(v float64) string {
	if s := fmtNum(v); s != "0" || v == 0 {
		return s
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// safeNext accepts only a local path as a post-login destination (no open redirect).
func safeNext(next string) string {
	if len(next) > 0 && len(next) < 2048 && next[0] == '/' && (len(next) == 1 || (next[1] != '/' && next[1] != '\\')) {
		if u, err := url.Parse(next); err == nil && u.Scheme == "" && u.Host == "" {
			return next
		}
	}
	return ""
}

func fmtInt(i int) string { return strconv.Itoa(i) }
