package ui

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// overridesShown is how many overrides the limit page lists at a time (a "more" link pages on).
const overridesShown = 50

// overrideVM is one override row of the limit page.
type overrideVM struct {
	Match   string
	Effect  string // "allow", "deny", or the numbers it sets
	Expires string
	EditURL string
}

// overridesVM is the overrides section of the limit page.
type overridesVM struct {
	Rows      []overrideVM
	AddURL    string
	DeleteURL string
	MoreURL   string // the next page, "" on the last
}

// overrideFormVM is the add/edit form of an override. Values holds what was typed (redisplayed
// on error); Errors maps a field's JSON name (as the API reports it) to its message.
type overrideFormVM struct {
	Layout  layoutVM
	Limit   string
	Editing bool
	Action  string
	Cancel  string
	Values  map[string]string
	Errors  map[string]string
	FormErr string // a refusal of the whole form (the plan's quota of overrides, the limit's cap)
}

func overrideEffect(o limiter.Override) string {
	if o.Action != "" {
		return string(o.Action)
	}
	var parts []string
	if o.Rate != nil {
		parts = append(parts, "rate "+fmtDef(*o.Rate))
	}
	if o.Capacity != nil {
		parts = append(parts, "capacity "+fmtDef(*o.Capacity))
	}
	if o.MaxReserved != nil {
		parts = append(parts, "max reserved "+fmtDef(*o.MaxReserved))
	}
	return strings.Join(parts, ", ")
}

// overridesSection lists a page of the limit's overrides, starting after the match after.
func (u *UI) overridesSection(c *gin.Context, d limiter.StoredDefinition, after string) (overridesVM, error) {
	t := tenantOf(c)
	list, next, err := u.engine.ListOverrides(c.Request.Context(), t.ID, d.Name, after, overridesShown)
	if err != nil {
		return overridesVM{}, err
	}
	var vm overridesVM
	changes := mayChange(c)
	if changes {
		vm.AddURL, vm.DeleteURL = limitPath(t.ID, d.Name, "/overrides/new"), limitPath(t.ID, d.Name, "/overrides/delete")
	}
	for _, s := range list {
		o := s.Override
		row := overrideVM{Match: o.Match, Effect: overrideEffect(o), Expires: "never"}
		if changes {
			row.EditURL = limitPath(t.ID, d.Name, "/overrides/edit?match="+url.QueryEscape(o.Match))
		}
		if o.ExpiresAt != nil {
			row.Expires = fmtTime(timeMS(*o.ExpiresAt))
		}
		vm.Rows = append(vm.Rows, row)
	}
	if next != "" {
		vm.MoreURL = limitPath(t.ID, d.Name, "?overrides_after="+url.QueryEscape(next)+"#overrides")
	}
	return vm, nil
}

func overrideValues(o limiter.Override) map[string]string {
	v := map[string]string{"match": o.Match, "action": string(o.Action)}
	for f, p := range map[string]*float64{"rate": o.Rate, "capacity": o.Capacity, "maxReserved": o.MaxReserved} {
		if p != nil {
			v[f] = formNum(*p)
		}
	}
	if o.ExpiresAt != nil {
		layout := time.RFC3339 // with its milliseconds when it has some: saved unchanged, it stays
		if *o.ExpiresAt%1000 != 0 {
			layout = "2006-01-02T15:04:05.000Z07:00"
		}
		v["expiresAt"] = timeMS(*o.ExpiresAt).UTC().Format(layout)
	}
	return v
}

// parseOverrideForm reads the form; what it cannot parse is a field error, the rest is
// validated by the engine against the limit (the same rules as the API).
func parseOverrideForm(c *gin.Context) (map[string]string, limiter.Override, map[string]string) {
	form := readForm(c)
	vals, errs := form.vals, form.errs
	get, float := form.text, form.float
	// The match as posted, untrimmed: matches are exact byte strings, and the edit form posts
	// the stored one ("vip ") back in a hidden field.
	o := limiter.Override{Match: form.exact("match"), Action: limiter.Action(get("action"))}
	o.Rate, o.Capacity, o.MaxReserved = float("rate"), float("capacity"), float("maxReserved")
	if s := get("expiresAt"); s != "" {
		t, err := algo.ParseDateTime(s) // as the API reads it: no +24:00
		if err != nil {
			t, err = time.Parse("2006-01-02T15:04", s) // what a datetime-local field sends: read as UTC
		}
		if t = t.UTC(); err != nil || t.Year() < 1970 || t.Year() > 9999 { // in UTC, as it is stored and shown
			errs["expiresAt"] = "must be a time such as 2030-01-02T15:04:05Z (UTC), or empty for never"
		} else {
			ms := t.UnixMilli()
			o.ExpiresAt = &ms
		}
	}
	if o.Match == "" {
		errs["match"] = "is required: a key, or a prefix followed by one *"
	}
	return vals, o, errs
}

func (u *UI) renderOverrideForm(c *gin.Context, status int, d limiter.StoredDefinition, vm overrideFormVM) {
	title := "New override of " + d.Name
	if vm.Editing {
		title = "Edit override of " + d.Name
	}
	l, err := u.layout(c, title, "limits")
	if err != nil {
		u.internalError(c, err)
		return
	}
	t := tenantOf(c)
	vm.Layout, vm.Limit = l, d.Name
	vm.Action, vm.Cancel = limitPath(t.ID, d.Name, "/overrides"), limitPath(t.ID, d.Name, "#overrides")
	if vm.Values == nil {
		vm.Values = map[string]string{}
	}
	if vm.Errors == nil {
		vm.Errors = map[string]string{}
	}
	u.render(c, status, overrideFormPage(vm))
}

func (u *UI) newOverrideForm(c *gin.Context) {
	d, ok := u.storedLimit(c)
	if !ok {
		return
	}
	u.renderOverrideForm(c, http.StatusOK, d, overrideFormVM{})
}

func (u *UI) editOverrideForm(c *gin.Context) {
	d, ok := u.storedLimit(c)
	if !ok {
		return
	}
	match := c.Query("match")
	if !limiter.ValidMatch(match) {
		u.NotFound(c)
		return
	}
	s, err := u.engine.GetOverride(c.Request.Context(), tenantOf(c).ID, d.Name, match)
	switch {
	case err != nil && apperr.From(err).Code == apperr.NotFound, limiter.IsNotFound(err):
		u.NotFound(c)
	case err != nil:
		u.internalError(c, err)
	default:
		u.renderOverrideForm(c, http.StatusOK, d, overrideFormVM{Editing: true, Values: overrideValues(s.Override)})
	}
}

func (u *UI) saveOverride(c *gin.Context) {
	d, ok := u.storedLimit(c)
	if !ok {
		return
	}
	vals, o, errs := parseOverrideForm(c)
	vm := overrideFormVM{Editing: c.PostForm("editing") != "", Values: vals, Errors: errs}
	if len(errs) > 0 {
		u.renderOverrideForm(c, http.StatusUnprocessableEntity, d, vm)
		return
	}
	t := tenantOf(c)
	ctx := c.Request.Context()
	_, _, err := u.engine.PutOverrideIf(ctx, t.ID, d.Name, o, vm.Editing, u.auditTx().OverrideChange(actor(c)))
	if errors.Is(err, limiter.ErrOverrideNotFound) {
		vm.FormErr = "This override was deleted while you edited it: nothing was saved. Add it again if you meant to."
		u.renderOverrideForm(c, http.StatusConflict, d, vm)
		return
	}
	if err != nil {
		e := apperr.From(err)
		if e.Code == apperr.PlanQuotaReached || e.Code == apperr.Conflict {
			vm.FormErr = e.Sentence()
			u.renderOverrideForm(c, http.StatusConflict, d, vm)
			return
		}
		if e.Code != apperr.InvalidRequest && e.Code != apperr.InvalidConfig {
			if limiter.IsNotFound(err) {
				u.NotFound(c)
				return
			}
			u.internalError(c, err)
			return
		}
		for _, fe := range e.Fields {
			vm.Errors[fe.Field] = fe.Message
		}
		if len(e.Fields) == 0 {
			vm.Errors[e.Field] = e.Message
		}
		u.renderOverrideForm(c, http.StatusUnprocessableEntity, d, vm)
		return
	}
	redirect(c, limitPath(t.ID, d.Name, "?msg=override-saved#overrides"))
}

func (u *UI) deleteOverride(c *gin.Context) {
	d, ok := u.storedLimit(c)
	if !ok {
		return
	}
	t := tenantOf(c)
	ctx := c.Request.Context()
	match := c.PostForm("match")
	err := u.engine.DeleteOverride(ctx, t.ID, d.Name, match, u.auditTx().OverrideChange(actor(c)))
	switch {
	case err != nil && apperr.From(err).Code == apperr.NotFound:
		u.renderLimit(c, http.StatusNotFound, d, "That override no longer exists.")
		return
	case err != nil:
		u.internalError(c, err)
		return
	}
	redirect(c, limitPath(t.ID, d.Name, "?msg=override-deleted#overrides"))
}
