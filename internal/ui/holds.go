package ui

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/httpserver"
	"github.com/sluice-dev/sluice/internal/limiter"
)

// Open holds and leases on a limit's page, and their manual release (a confirmation page, then
// a POST that passes the cross-origin check and the tenant's access check like every dashboard
// change, audited as hold.release or lease.release).

// expiringSoonMs is what "expiring soon" means on the page.
const expiringSoonMs = 60_000

// inFlightRows is how many open holds and leases the page lists.
const inFlightRows = 20

// inFlightVM is the card of a limit's open holds and leases.
type inFlightVM struct {
	Holds, Leases         inFlightStats
	HoldRows, LeaseRows   []inFlightRow
	ShowHolds, ShowLeases bool // leases only on concurrency limits, holds on the others
	HoldsMore, LeasesMore bool // more than the rows listed are open
	ExpiringSoonSeconds   int
}

// inFlightStats summarises open holds or leases.
type inFlightStats struct {
	Open, ExpiringSoon string
	Oldest             string // "" when none is open
	Held               string // holds only: the amount they hold
}

// inFlightRow is one open hold or lease.
type inFlightRow struct {
	ID, Key, Amount, Created, Expires, ReleaseURL string
}

func (u *UI) inFlightSection(c *gin.Context, d limiter.StoredDefinition) (inFlightVM, error) {
	t := tenantOf(c)
	ctx := c.Request.Context()
	vm := inFlightVM{ExpiringSoonSeconds: expiringSoonMs / 1000}
	changes := mayChange(c)
	releaseURL := func(rest string) string {
		if !changes {
			return ""
		}
		return limitPath(t.ID, d.Name, rest)
	}
	keyLabel := func(k string) string {
		if k == "" {
			return "(default key)"
		}
		return k
	}
	if d.Definition.Kind == limiter.Concurrency {
		vm.ShowLeases = true
		st, ls, err := u.engine.OpenLeases(ctx, t.ID, d.Name, expiringSoonMs, inFlightRows)
		if err != nil {
			return vm, err
		}
		vm.Leases = inFlightStats{Open: strconv.FormatInt(st.Open, 10), ExpiringSoon: strconv.FormatInt(st.ExpiringSoon, 10)}
		if st.Oldest != 0 {
			vm.Leases.Oldest = fmtTime(timeMS(st.Oldest))
		}
		vm.LeasesMore = st.Open > int64(len(ls))
		for _, l := range ls {
			vm.LeaseRows = append(vm.LeaseRows, inFlightRow{ID: l.ID, Key: keyLabel(l.Key), Amount: "1",
				Created: fmtTime(timeMS(l.CreatedAt)), Expires: fmtTime(timeMS(l.ExpiresAt)),
				ReleaseURL: releaseURL("/leases/" + url.PathEscape(l.ID) + "/release")})
		}
		return vm, nil
	}
	vm.ShowHolds = true
	st, hs, err := u.engine.OpenHolds(ctx, t.ID, d.Name, expiringSoonMs, inFlightRows)
	if err != nil {
		return vm, err
	}
	vm.Holds = inFlightStats{Open: strconv.FormatInt(st.Open, 10), ExpiringSoon: strconv.FormatInt(st.ExpiringSoon, 10), Held: fmtNum(st.Held)}
	if st.Oldest != 0 {
		vm.Holds.Oldest = fmtTime(timeMS(st.Oldest))
	}
	vm.HoldsMore = st.More
	for _, h := range hs {
		vm.HoldRows = append(vm.HoldRows, inFlightRow{ID: h.ID, Key: keyLabel(h.Key), Amount: fmtNum(h.Count),
			Created: fmtTime(timeMS(h.CreatedAt)), Expires: fmtTime(timeMS(h.ExpiresAt)),
			ReleaseURL: releaseURL("/holds/" + url.PathEscape(h.ID) + "/release")})
	}
	return vm, nil
}

// releaseVM is the confirmation page of a manual release.
type releaseVM struct {
	Layout layoutVM
	Name   string // the limit
	What   string // "hold" or "lease"
	ID     string
	// Others are the other limits a hold reserves amounts of: releasing it gives those back too.
	Others []string
	Action string
	Cancel string
}

func (u *UI) releaseHoldConfirm(c *gin.Context)  { u.releaseConfirm(c, "hold", "hid") }
func (u *UI) releaseLeaseConfirm(c *gin.Context) { u.releaseConfirm(c, "lease", "lid") }

// releaseTarget reads which limits the hold or lease id of the page's tenant involves and
// answers the 404 page (false) unless limit d is one of them: a release goes through the page of
// a limit it gives back to, and is audited under that limit. It returns the other limits.
func (u *UI) releaseTarget(c *gin.Context, d limiter.StoredDefinition, what, id string) ([]string, bool) {
	ctx, t := c.Request.Context(), tenantOf(c)
	var names []string
	var err error
	if what == "hold" {
		names, err = u.engine.HoldLimitNames(ctx, t.ID, id)
	} else {
		var name string
		name, err = u.engine.LeaseLimitName(ctx, t.ID, id)
		names = []string{name}
	}
	if err != nil {
		u.fail(c, err)
		return nil, false
	}
	if !slices.Contains(names, d.Name) {
		u.NotFound(c)
		return nil, false
	}
	return slices.DeleteFunc(names, func(n string) bool { return n == d.Name }), true
}

func (u *UI) releaseConfirm(c *gin.Context, what, param string) {
	d, ok := u.storedLimit(c)
	if !ok {
		return
	}
	id := c.Param(param)
	others, ok := u.releaseTarget(c, d, what, id)
	if !ok {
		return
	}
	l, err := u.layout(c, "Release a "+what+" of "+d.Name, "limits")
	if err != nil {
		u.internalError(c, err)
		return
	}
	t := tenantOf(c)
	u.render(c, http.StatusOK, releasePage(releaseVM{Layout: l, Name: d.Name, What: what, ID: id, Others: others,
		Action: limitPath(t.ID, d.Name, "/"+what+"s/"+url.PathEscape(id)+"/release"), Cancel: limitPath(t.ID, d.Name, "")}))
}

func (u *UI) releaseHold(c *gin.Context) {
	u.release(c, "hold", "hid", func(tid int64, id string) error { return u.engine.ReleaseHold(c.Request.Context(), tid, id) })
}

func (u *UI) releaseLease(c *gin.Context) {
	u.release(c, "lease", "lid", func(tid int64, id string) error { return u.engine.ReleaseLease(c.Request.Context(), tid, id) })
}

// release releases a hold or lease of the tenant that involves the page's limit after the
// confirmation and audits it. A hold or lease that is already closed is said on the limit's page
// (409); another tenant's, or one of another limit only, is not found. The release is committed
// before its audit entry is written (the engine's transaction is not the audit log's): when that
// write fails, the page says so and the failure is logged, so that it is not silently lost.
func (u *UI) release(c *gin.Context, what, param string, do func(tid int64, id string) error) {
	d, ok := u.storedLimit(c)
	if !ok {
		return
	}
	t := tenantOf(c)
	id := c.Param(param)
	if c.PostForm("confirm") != "yes" {
		redirect(c, limitPath(t.ID, d.Name, "/"+what+"s/"+url.PathEscape(id)+"/release"))
		return
	}
	others, ok := u.releaseTarget(c, d, what, id)
	if !ok {
		return
	}
	if err := do(t.ID, id); err != nil {
		if e := apperr.From(err); e.Status() == http.StatusConflict { // closed meanwhile: say so on the limit's page
			u.renderLimit(c, http.StatusConflict, d, e.Sentence())
			return
		}
		u.fail(c, err)
		return
	}
	detail := "released from the dashboard"
	if len(others) > 0 {
		detail += "; it also held " + strings.Join(others, ", ")
	}
	if !u.auditRequest(c, &t.ID, actor(c), what+".release", d.Name+" "+id, detail) {
		rid := c.GetString(httpserver.RequestIDKey)
		u.renderLimit(c, http.StatusInternalServerError, d, "The "+what+" "+id+" was released, but its audit log entry could not be written (request "+rid+"). The failure has been logged.")
		return
	}
	redirect(c, limitPath(t.ID, d.Name, "?msg="+what+"-released"))
}
