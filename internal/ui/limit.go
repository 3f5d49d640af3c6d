package ui

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/a-h/templ"
	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// limitVM is one limit's page: its configuration, usage charts, a key lookup with per-shard
// values, and the most recently used keys with their values and reset buttons.
type limitVM struct {
	Layout      layoutVM
	Name        string
	Kind        string
	Summary     string
	Config      []configRow
	EditURL     string
	ResetURL    string
	ResetAllURL string
	DeleteURL   string
	KeysURL     string
	SelfURL     string
	// Shadow: the limit is in shadow mode; EnforceURL is its switch to enforcement (a
	// confirmation page first) and ShadowRefused its would-be refusals in the last hour.
	Shadow        bool
	EnforceURL    string
	ShadowRefused int64
	Keys          []keyValueVM
	Lookup        *lookupVM
	LookupKey     string
	LookupError   string
	Error         string
	Charts        []*chartVM
	Window        *windowVM // quotas: the current calendar window
	Overrides     overridesVM
	InFlight      inFlightVM // open holds and leases (holds.go)
}

// windowVM is a quota's current window, in the quota's zone.
type windowVM struct {
	Start, Reset       string // "Mon 30 Mar 2026 00:00 CEST"
	StartISO, ResetISO string // RFC 3339, for <time datetime>
	Zone               string
}

// quotaWindow is the window a quota's keys count in now (the engine's clock: the database's on
// PostgreSQL), read as the default key's value; every key of a quota shares the calendar.
func (u *UI) quotaWindow(c *gin.Context, d limiter.StoredDefinition) (*windowVM, error) {
	// The engine's zone (the binary's zone data, not the machine's); a stored zone it lacks has
	// no window to show (its decisions are refused).
	loc, ok := algo.LoadZone(d.Definition.TimeZone)
	if !ok {
		return nil, nil
	}
	v, err := u.engine.GetValue(c.Request.Context(), tenantOf(c).ID, d.Name, "")
	if err != nil || v.WindowStart == nil || v.ResetAt == nil {
		return nil, err
	}
	const layout = "Mon 2 Jan 2006 15:04 MST"
	start, reset := time.UnixMilli(*v.WindowStart).In(loc), time.UnixMilli(*v.ResetAt).In(loc)
	return &windowVM{Start: start.Format(layout), Reset: reset.Format(layout),
		StartISO: start.Format(time.RFC3339), ResetISO: reset.Format(time.RFC3339), Zone: d.Definition.TimeZone}, nil
}

type configRow struct{ Label, Value string }

type lookupVM struct {
	Key    keyValueVM
	Shards []shardVM
	// FullAt is when the key is full again ("" when it is full); PenaltyUntil when its running
	// penalty ends ("" when none runs).
	FullAt, PenaltyUntil string
}

type shardVM struct {
	Shard int
	Value string
	TS    string
}

// recentKeysShown is how many recent keys the limit page lists.
const recentKeysShown = 20

func configRows(d limiter.Definition) []configRow {
	rate := fmtDef(d.Rate) + " " + limiter.PerDuration(d.Period) + " (" + strconv.FormatInt(d.Period, 10) + " ms)"
	if d.Kind == limiter.Quota {
		rate = quotaRate(d)
	}
	if d.Kind == limiter.Concurrency {
		rate = fmtDef(d.Rate) + " leases in flight, each lasting " + limiter.DurationWords(d.LeaseTTL) + " (" + strconv.FormatInt(d.LeaseTTL, 10) + " ms) unless released or extended"
	}
	rows := []configRow{
		{"Kind", string(d.Kind)},
		{"Rate", rate},
		{"Maximum (capacity)", fmtDef(d.Max())},
		{"Shards", strconv.Itoa(max(d.Shards, 1))},
	}
	if d.Kind == limiter.Quota {
		rows = append(rows, configRow{"Calendar", string(d.Calendar)}, configRow{"Time zone", d.TimeZone})
		if d.Calendar == "month" {
			rows = append(rows, configRow{"Billing day", strconv.Itoa(max(d.AnchorDay, 1))})
		}
	}
	for _, p := range d.Parents {
		rows = append(rows, configRow{"Parent", p.Name + " under key " + p.Key})
	}
	if d.MaxReserved != nil {
		rows = append(rows, configRow{"Max reserved", fmtDef(*d.MaxReserved)})
	}
	if d.Start != nil {
		rows = append(rows, configRow{"Window start", windowStart(*d.Start)})
	}
	if d.Kind == limiter.SlidingWindow {
		rows = append(rows, configRow{"Resolution", strconv.Itoa(max(d.Resolution, 1))})
	}
	jitter := "none"
	if d.Jitter > 0 {
		jitter = limiter.DurationWords(d.Jitter) + " (" + strconv.FormatInt(d.Jitter, 10) + " ms)"
	}
	rows = append(rows, configRow{"Jitter", jitter})
	rows = append(rows, configRow{"Mode", string(d.Normalized().Mode)})
	if d.Penalty > 0 {
		rows = append(rows, configRow{"Penalty", limiter.DurationWords(d.Penalty) + " (" + strconv.FormatInt(d.Penalty, 10) + " ms)"})
	}
	if d.IPFallback {
		rows = append(rows, configRow{"IP fallback", "on"})
	}
	return rows
}

// windowStart shows a fixed window's start, an instant in milliseconds since the epoch (not a
// duration: the windows are aligned to it), as a time in UTC: "2026-03-30 00:00:30 UTC
// (1774828830000 ms)", with the milliseconds when it has some.
func windowStart(ms int64) string {
	t := timeMS(ms)
	layout := "2006-01-02 15:04:05 UTC"
	if ms%1000 != 0 {
		layout = "2006-01-02 15:04:05.000 UTC"
	}
	return t.Format(layout) + " (" + strconv.FormatInt(ms, 10) + " ms)"
}

func (u *UI) recentKeys(c *gin.Context, d limiter.StoredDefinition) ([]keyValueVM, error) {
	keys, err := u.engine.RecentKeys(c.Request.Context(), tenantOf(c).ID, d.Name, recentKeysShown)
	if err != nil {
		return nil, err
	}
	out := make([]keyValueVM, 0, len(keys))
	for _, k := range keys {
		out = append(out, keyValue(k.Key, k.Value, k.Definition))
	}
	return out, nil
}

func (u *UI) limitPage(c *gin.Context) {
	d, ok := u.storedLimit(c)
	if !ok {
		return
	}
	u.renderLimit(c, http.StatusOK, d, "")
}

// renderLimit renders the limit page; a ?key= query (even empty: the default key) looks a key
// up. errMsg is shown at the top (a refused reset, say).
func (u *UI) renderLimit(c *gin.Context, status int, d limiter.StoredDefinition, errMsg string) {
	t := tenantOf(c)
	l, err := u.layout(c, d.Name+" · "+t.Name, "limits")
	if err != nil {
		u.internalError(c, err)
		return
	}
	vm := limitVM{
		Layout: l, Name: d.Name, Kind: string(d.Definition.Kind), Summary: summary(d.Definition),
		Config: configRows(d.Definition), Error: errMsg,
		EditURL: limitPath(t.ID, d.Name, "/edit"), ResetURL: limitPath(t.ID, d.Name, "/reset"),
		ResetAllURL: limitPath(t.ID, d.Name, "/reset-all"), KeysURL: limitPath(t.ID, d.Name, "/keys"),
		DeleteURL: limitPath(t.ID, d.Name, "/delete"),
		SelfURL:   limitPath(t.ID, d.Name, ""),
		Shadow:    d.Definition.IsShadow(), EnforceURL: limitPath(t.ID, d.Name, "/enforce"),
	}
	if l.ReadOnly {
		vm.EditURL, vm.ResetURL, vm.ResetAllURL, vm.DeleteURL, vm.EnforceURL = "", "", "", "", ""
	}
	if vm.Keys, err = u.recentKeys(c, d); err != nil && !limiter.IsNotFound(err) {
		u.internalError(c, err)
		return
	}
	if d.Definition.Kind == limiter.Quota {
		if vm.Window, err = u.quotaWindow(c, d); err != nil && !limiter.IsNotFound(err) {
			u.internalError(c, err)
			return
		}
	}
	after := c.Query("overrides_after")
	if !limiter.ValidMatch(after) {
		after = "" // not a page's next (a hand-edited link): the first page
	}
	if vm.Overrides, err = u.overridesSection(c, d, after); err != nil && !limiter.IsNotFound(err) {
		u.internalError(c, err)
		return
	}
	if vm.InFlight, err = u.inFlightSection(c, d); err != nil {
		u.internalError(c, err)
		return
	}
	if _, has := c.Request.URL.Query()["key"]; has {
		key := c.Query("key")
		vm.LookupKey = key
		if key != "" && !limiter.ValidKey(key) {
			vm.LookupError = "Keys are 1 to 256 bytes of UTF-8."
			status = http.StatusUnprocessableEntity
		} else {
			v, err := u.engine.GetValue(c.Request.Context(), t.ID, d.Name, key)
			if err != nil && !limiter.IsNotFound(err) {
				u.internalError(c, err)
				return
			}
			if err == nil {
				lk := &lookupVM{Key: keyValue(key, v.Value, v.Definition)}
				if v.FullAt != 0 {
					lk.FullAt = fmtTime(timeMS(v.FullAt))
				}
				if v.PenaltyUntil != 0 {
					lk.PenaltyUntil = fmtTime(timeMS(v.PenaltyUntil))
				}
				for _, s := range v.Shards {
					ts := "never used (full)"
					if s.TS != 0 {
						ts = fmtTime(timeMS(s.TS))
					}
					lk.Shards = append(lk.Shards, shardVM{Shard: s.Shard, Value: fmtNum(s.Value), TS: ts})
				}
				vm.Lookup = lk
			}
		}
	}
	for _, spec := range []chartSpec{chartHour, chartDay} {
		ch, err := u.chart(c, t.ID, d.Name, spec.title, spec)
		if err != nil {
			u.internalError(c, err)
			return
		}
		if ch != nil {
			vm.Charts = append(vm.Charts, ch)
			if spec == chartHour {
				vm.ShadowRefused = ch.TotalShadow
			}
		}
	}
	u.render(c, status, limitPage(vm))
}

// limitKeys is the htmx fragment refreshing the recent keys table body.
func (u *UI) limitKeys(c *gin.Context) {
	d, ok := u.storedLimit(c)
	if !ok {
		return
	}
	keys, err := u.recentKeys(c, d)
	if err != nil && !limiter.IsNotFound(err) {
		u.internalError(c, err)
		return
	}
	t := tenantOf(c)
	resetURL := limitPath(t.ID, d.Name, "/reset")
	if !mayChange(c) {
		resetURL = ""
	}
	u.render(c, http.StatusOK, recentKeysBody(keys, limitPath(t.ID, d.Name, "/keys"), resetURL))
}

func (u *UI) resetKey(c *gin.Context) {
	d, ok := u.storedLimit(c)
	if !ok {
		return
	}
	// An empty key is the limit's default (global) key, as in the API's reset and the page's
	// lookup; a form without the field names no key and resets nothing.
	key, named := c.GetPostForm("key")
	if !named || (key != "" && !limiter.ValidKey(key)) {
		u.renderLimit(c, http.StatusUnprocessableEntity, d, "Cannot reset: a key is 1 to 256 bytes of UTF-8, or empty for the default key.")
		return
	}
	t := tenantOf(c)
	ctx := c.Request.Context()
	if err := u.engine.Reset(ctx, t.ID, d.Name, &key, u.auditTx().Reset(t.ID, actor(c), d.Name, &key)); err != nil && !limiter.IsNotFound(err) {
		u.internalError(c, err)
		return
	}
	redirect(c, limitPath(t.ID, d.Name, "?msg=key-reset&key="+url.QueryEscape(key)))
}

// resetAllVM is the confirmation step of "reset all keys": a page of its own, so it works
// without JavaScript.
type resetAllVM struct {
	Layout layoutVM
	Name   string
	Action string
	Cancel string
}

// confirmLimitAction renders the confirmation page of an irreversible action on the limit:
// title names it, page is its template and action the path it posts to.
func (u *UI) confirmLimitAction(c *gin.Context, title string, page func(resetAllVM) templ.Component, action string) {
	d, ok := u.storedLimit(c)
	if !ok {
		return
	}
	l, err := u.layout(c, title+" "+d.Name, "limits")
	if err != nil {
		u.internalError(c, err)
		return
	}
	t := tenantOf(c)
	u.render(c, http.StatusOK, page(resetAllVM{Layout: l, Name: d.Name,
		Action: limitPath(t.ID, d.Name, action), Cancel: limitPath(t.ID, d.Name, "")}))
}

func (u *UI) resetAllConfirm(c *gin.Context) {
	u.confirmLimitAction(c, "Reset all keys of", resetAllPage, "/reset-all")
}

// deleteLimitConfirm asks before deleteLimit: deleting drops the state of every key.
func (u *UI) deleteLimitConfirm(c *gin.Context) {
	u.confirmLimitAction(c, "Delete", deleteLimitPage, "/delete")
}

func (u *UI) deleteLimit(c *gin.Context) {
	d, ok := u.storedLimit(c)
	if !ok {
		return
	}
	t := tenantOf(c)
	if c.PostForm("confirm") != "yes" {
		redirect(c, limitPath(t.ID, d.Name, "/delete"))
		return
	}
	ctx := c.Request.Context()
	if err := u.engine.DeleteDefinition(ctx, t.ID, d.Name, u.auditTx().DefinitionChange(actor(c), "(from the dashboard)")); err != nil {
		u.fail(c, err)
		return
	}
	redirect(c, tenantPath(t.ID, "/limits?msg=limit-deleted"))
}

func (u *UI) resetAll(c *gin.Context) {
	d, ok := u.storedLimit(c)
	if !ok {
		return
	}
	t := tenantOf(c)
	if c.PostForm("confirm") != "yes" {
		redirect(c, limitPath(t.ID, d.Name, "/reset-all"))
		return
	}
	ctx := c.Request.Context()
	if err := u.engine.Reset(ctx, t.ID, d.Name, nil, u.auditTx().Reset(t.ID, actor(c), d.Name, nil)); err != nil && !limiter.IsNotFound(err) {
		u.internalError(c, err)
		return
	}
	redirect(c, limitPath(t.ID, d.Name, "?msg=all-reset"))
}

// enforceVM is the confirmation step of switching a shadow limit to enforcement: a page of its
// own, so it works without JavaScript.
type enforceVM struct {
	Layout        layoutVM
	Name          string
	Action        string
	Cancel        string
	ShadowRefused int64 // would-be refusals in the last hour: what enforcing would have refused
}

func (u *UI) enforceConfirm(c *gin.Context) {
	d, ok := u.storedLimit(c)
	if !ok {
		return
	}
	t := tenantOf(c)
	if !d.Definition.IsShadow() {
		redirect(c, limitPath(t.ID, d.Name, ""))
		return
	}
	l, err := u.layout(c, "Enforce "+d.Name, "limits")
	if err != nil {
		u.internalError(c, err)
		return
	}
	vm := enforceVM{Layout: l, Name: d.Name, Action: limitPath(t.ID, d.Name, "/enforce"), Cancel: limitPath(t.ID, d.Name, "")}
	if u.usage != nil {
		points, err := u.usage.Series(c.Request.Context(), t.ID, d.Name, chartHour.span, chartHour.step)
		if err != nil {
			u.internalError(c, err)
			return
		}
		for _, p := range points {
			vm.ShadowRefused += p.ShadowRefused
		}
	}
	u.render(c, http.StatusOK, enforcePage(vm))
}

// enforce switches a shadow limit to enforcement, keeping its state (the shadow decisions wrote
// exactly what enforcement would have), and audits it like any definition change.
func (u *UI) enforce(c *gin.Context) {
	d, ok := u.storedLimit(c)
	if !ok {
		return
	}
	t := tenantOf(c)
	if c.PostForm("confirm") != "yes" {
		redirect(c, limitPath(t.ID, d.Name, "/enforce"))
		return
	}
	if !d.Definition.IsShadow() {
		redirect(c, limitPath(t.ID, d.Name, ""))
		return
	}
	def := d.Definition
	def.Mode = limiter.Enforce
	ctx := c.Request.Context()
	if _, _, err := u.engine.PutDefinition(ctx, t.ID, d.Name, def, u.auditTx().DefinitionChange(actor(c), "(switched from shadow to enforce)")); err != nil {
		u.fail(c, err)
		return
	}
	redirect(c, limitPath(t.ID, d.Name, "?msg=limit-enforced"))
}
