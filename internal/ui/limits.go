package ui

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/limiter"
)

// limitsVM is a tenant's limits with their live values.
type limitsVM struct {
	Layout    layoutVM
	TenantID  int64
	ValuesURL string
	NewURL    string
	Rows      []limitRow
	Chart     *chartVM
}

type limitRow struct {
	Name    string
	URL     string
	Kind    string
	Summary string // "10 per 1 min, capacity 20, 4 shards"
	Shadow  bool   // in shadow mode
	Keys    []keyValueVM
}

type keyValueVM struct {
	Key     string
	Label   string // the key, or "(default key)"
	Value   string
	Max     string
	Percent int // value / max, 0..100, for the meter
}

func summary(d limiter.Definition) string {
	var b strings.Builder
	switch d.Kind {
	case limiter.Quota:
		b.WriteString(quotaRate(d))
	case limiter.Concurrency:
		b.WriteString(fmtDef(d.Rate) + " in flight, leases of " + limiter.DurationWords(d.LeaseTTL))
	default:
		b.WriteString(fmtDef(d.Rate) + " " + limiter.PerDuration(d.Period))
	}
	if d.Capacity != nil && d.Kind != limiter.SlidingWindow {
		b.WriteString(", capacity " + fmtDef(*d.Capacity))
	}
	if d.MaxReserved != nil {
		b.WriteString(", reserve up to " + fmtDef(*d.MaxReserved))
	}
	if d.Shards > 1 {
		b.WriteString(", " + strconv.Itoa(d.Shards) + " shards")
	}
	if d.Kind == limiter.SlidingWindow && d.Resolution > 1 {
		b.WriteString(", resolution " + strconv.Itoa(d.Resolution))
	}
	if d.Jitter > 0 {
		b.WriteString(", jitter " + limiter.DurationWords(d.Jitter))
	}
	if d.Penalty > 0 {
		b.WriteString(", penalty " + limiter.DurationWords(d.Penalty))
	}
	if d.IsShadow() {
		b.WriteString(", shadow mode")
	}
	for i, p := range d.Parents {
		if i == 0 {
			b.WriteString(", within ")
		} else {
			b.WriteString(" and ")
		}
		b.WriteString(p.Name)
	}
	return b.String()
}

// quotaRate states a quota: "1000 per month from day 31 (Europe/Berlin)".
func quotaRate(d limiter.Definition) string {
	s := fmtDef(d.Rate) + " per " + string(d.Calendar)
	if d.Calendar == "month" && d.AnchorDay > 1 {
		s += " from day " + strconv.Itoa(d.AnchorDay)
	}
	return s + " (" + d.TimeZone + ")"
}

func keyValue(key string, v float64, def limiter.Definition) keyValueVM {
	kv := keyValueVM{Key: key, Label: key, Value: fmtNum(v), Max: fmtDef(def.Max())}
	if key == "" {
		kv.Label = "(default key)"
	}
	if m := def.Max(); m > 0 {
		kv.Percent = int(math.Round(math.Max(0, math.Min(1, v/m)) * 100))
	}
	return kv
}

// liveKeysPerLimit is how many recent keys the limits list shows per limit.
const liveKeysPerLimit = 3

func (u *UI) limitRows(c *gin.Context) ([]limitRow, error) {
	t := tenantOf(c)
	ctx := c.Request.Context()
	defs, err := u.engine.ListDefinitions(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	rows := make([]limitRow, 0, len(defs))
	for _, d := range defs {
		keys, err := u.engine.RecentKeys(ctx, t.ID, d.Name, liveKeysPerLimit)
		if err != nil && !limiter.IsNotFound(err) { // deleted meanwhile: show it without keys
			return nil, err
		}
		r := limitRow{Name: d.Name, URL: limitPath(t.ID, d.Name, ""), Kind: string(d.Definition.Kind), Summary: summary(d.Definition), Shadow: d.Definition.IsShadow()}
		for _, k := range keys {
			r.Keys = append(r.Keys, keyValue(k.Key, k.Value, k.Definition))
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func (u *UI) limitsPage(c *gin.Context) {
	l, err := u.layout(c, "Limits · "+tenantOf(c).Name, "limits")
	if err != nil {
		u.internalError(c, err)
		return
	}
	rows, err := u.limitRows(c)
	if err != nil {
		u.internalError(c, err)
		return
	}
	t := tenantOf(c)
	vm := limitsVM{Layout: l, TenantID: t.ID, Rows: rows, ValuesURL: tenantPath(t.ID, "/limit-values")}
	if !l.ReadOnly {
		vm.NewURL = tenantPath(t.ID, "/new-limit")
	}
	if vm.Chart, err = u.chart(c, t.ID, "", "All limits, last hour", chartHour); err != nil {
		u.internalError(c, err)
		return
	}
	u.render(c, http.StatusOK, limitsPage(vm))
}

// limitsValues is the htmx fragment that refreshes the limits table body.
func (u *UI) limitsValues(c *gin.Context) {
	rows, err := u.limitRows(c)
	if err != nil {
		u.internalError(c, err)
		return
	}
	t := tenantOf(c)
	u.render(c, http.StatusOK, limitRowsBody(rows, tenantPath(t.ID, "/limit-values")))
}

// limitFormVM is the create/edit form. Values holds what the user typed (redisplayed on
// error); Errors maps a field's JSON name (as the API reports it) to its message.
type limitFormVM struct {
	Layout  layoutVM
	Editing bool
	Action  string
	Cancel  string
	Name    string
	Values  map[string]string
	Errors  map[string]string
	Warning string
	Kinds   []string
	FormErr string // a refusal of the whole form (the plan's quota of limits)
}

var kinds = []string{string(limiter.TokenBucket), string(limiter.GCRA), string(limiter.FixedWindow), string(limiter.SlidingWindow), string(limiter.Quota), string(limiter.Concurrency)}

// durationFields are the form's fields that take a human duration ("10m", "1h30m", "1.5s") as
// well as milliseconds.
var durationFields = map[string]bool{"period": true, "leaseTtl": true, "jitter": true, "penalty": true}

// inputMode is a form field's keyboard on phones: durations take words ("10m"), the rest numbers.
func inputMode(field string) string {
	if durationFields[field] {
		return "text"
	}
	return "decimal"
}

// errDurationField is the error of a jitter, penalty or lease TTL the form cannot read (the
// period's, limiter.ErrDuration, offers "per 10 minutes", which reads oddly there).
const errDurationField = `use milliseconds (1500) or a duration such as "1.5s", "30s" or "2m30s"`

// parseLimitForm reads the form into the API's DefinitionBody and validates it with the API's
// own rules (DefinitionBody.ToDefinition -> limiter.Definition.Validate), so the dashboard and
// /v1 accept exactly the same definitions and name fields the same way.
func parseLimitForm(c *gin.Context) (map[string]string, limiter.Definition, map[string]string) {
	form := readForm(c)
	vals, errs := form.vals, form.errs
	get, float, integer := form.text, form.float, form.integer
	// duration reads a jitter, penalty or lease TTL: whole milliseconds go to the definition's
	// own rules as they are (so that 0 and a negative number get its message), anything else is
	// read as a human duration.
	duration := func(f string) *int64 {
		s := get(f)
		if s == "" {
			return nil
		}
		if v, ok := parseWhole(s); ok {
			return &v
		}
		ms, err := limiter.ParseDuration(s)
		if err != nil {
			errs[f] = errDurationField
			return nil
		}
		return &ms
	}
	smallInt := func(f string) *int {
		v := integer(f)
		if v == nil {
			return nil
		}
		if *v < math.MinInt32 || *v > math.MaxInt32 {
			errs[f] = "is out of range"
			return nil
		}
		i := int(*v)
		return &i
	}
	body := limiter.Spec{Kind: get("kind")}
	body.Rate = float("rate")
	if s := get("period"); s != "" { // milliseconds, or a human duration: "10m", "per 10 minutes"
		if ms, err := limiter.ParseDuration(s); err != nil {
			errs["period"] = err.Error()
		} else {
			body.Period = &ms
		}
	}
	if k := limiter.Kind(body.Kind); k == limiter.Quota || k == limiter.Concurrency {
		// The form starts with a period filled in; a quota's window is its calendar, a
		// concurrency limit's lease lasts leaseTtl.
		body.Period = nil
		delete(errs, "period")
	}
	body.LeaseTTL = duration("leaseTtl")
	if s := get("calendar"); s != "" {
		body.Calendar = &s
	}
	if s := get("timeZone"); s != "" {
		body.TimeZone = &s
	}
	body.AnchorDay = smallInt("anchorDay")
	body.Parents = parseParents(get("parents"), errs)
	body.Capacity = float("capacity")
	body.MaxReserved = float("maxReserved")
	body.Shards = smallInt("shards")
	body.Start = integer("start")
	body.Resolution = smallInt("resolution")
	body.Jitter = duration("jitter")
	body.Penalty = duration("penalty")
	if m := get("mode"); m != "" {
		body.Mode = &m
	}
	if c.PostForm("ipFallback") != "" {
		t := true
		body.IPFallback = &t
		vals["ipFallback"] = "on"
	}
	def, err := body.ToDefinition()
	if err != nil {
		for _, fe := range apperr.From(err).Fields {
			field, msg := formField(fe.Field, fe.Message)
			if _, seen := errs[field]; !seen { // a parse error says more than "is required"
				errs[field] = msg
			}
		}
	}
	return vals, def, errs
}

// parseParents reads the parents textarea: one parent per line, its name and its key template
// separated by white space; a template with white space in it (or that starts with a quote) is
// written quoted, as parentLine writes it ("org \" org:{org}\""). A line of another shape is an
// error on "parents".
func parseParents(text string, errs map[string]string) []limiter.ParentSpec {
	var out []limiter.ParentSpec
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, key, ok := line, "", false
		if at := strings.IndexFunc(line, unicode.IsSpace); at > 0 {
			name, key = line[:at], strings.TrimSpace(line[at:])
			if strings.HasPrefix(key, `"`) {
				unquoted, err := strconv.Unquote(key)
				key, ok = unquoted, err == nil
			} else {
				ok = !strings.ContainsFunc(key, unicode.IsSpace)
			}
		}
		if !ok {
			if _, seen := errs["parents"]; !seen {
				errs["parents"] = "line " + strconv.Itoa(i+1) + ": write a limit's name and a key template, such as \"org-daily org:{org}\" (quote a template with spaces)"
			}
			continue
		}
		out = append(out, limiter.ParentSpec{Name: name, Key: key})
	}
	return out
}

// parentLine is a parent as the parents textarea shows it, parseParents' input: its name and its
// key template, quoted when the template holds white space or starts with a quote, so that it
// is read back exactly.
func parentLine(p limiter.Parent) string {
	key := p.Key
	if strings.ContainsFunc(key, unicode.IsSpace) || strings.HasPrefix(key, `"`) {
		key = strconv.Quote(key)
	}
	return p.Name + " " + key
}

// formField is the form field a definition problem belongs to: the parents' problems
// ("parents[1].key") go to the parents box, naming the line.
func formField(field, msg string) (string, string) {
	rest, ok := strings.CutPrefix(field, "parents[")
	if !ok {
		return field, msg
	}
	i, after, _ := strings.Cut(rest, "]")
	n, err := strconv.Atoi(i)
	if err != nil {
		return "parents", msg
	}
	what := "the line"
	switch after {
	case ".name":
		what = "the name"
	case ".key":
		what = "the key template"
	}
	return "parents", "line " + strconv.Itoa(n+1) + ", " + what + ": " + msg
}

func definitionValues(d limiter.Definition) map[string]string {
	v := map[string]string{
		"kind":   string(d.Kind),
		"rate":   formNum(d.Rate),
		"period": limiter.FormatDuration(d.Period),
		"shards": strconv.Itoa(max(d.Shards, 1)),
		"jitter": "0",
		"mode":   string(d.Normalized().Mode),
	}
	if d.Jitter > 0 {
		v["jitter"] = limiter.FormatDuration(d.Jitter)
	}
	if d.Penalty > 0 {
		v["penalty"] = limiter.FormatDuration(d.Penalty)
	}
	if d.Kind == limiter.Concurrency {
		v["period"], v["leaseTtl"] = "", limiter.FormatDuration(d.LeaseTTL)
	}
	if d.Kind == limiter.Quota {
		v["period"] = ""
		v["calendar"], v["timeZone"] = string(d.Calendar), d.TimeZone
		if d.AnchorDay > 0 {
			v["anchorDay"] = strconv.Itoa(d.AnchorDay)
		}
	}
	var parents []string
	for _, p := range d.Parents {
		parents = append(parents, parentLine(p))
	}
	v["parents"] = strings.Join(parents, "\n")
	if d.Capacity != nil {
		v["capacity"] = formNum(*d.Capacity)
	}
	if d.MaxReserved != nil {
		v["maxReserved"] = formNum(*d.MaxReserved)
	}
	if d.Start != nil {
		v["start"] = strconv.FormatInt(*d.Start, 10)
	}
	if d.Kind == limiter.SlidingWindow {
		v["resolution"] = strconv.Itoa(max(d.Resolution, 1))
	}
	if d.IPFallback {
		v["ipFallback"] = "on"
	}
	return v
}

func (u *UI) renderLimitForm(c *gin.Context, status int, vm limitFormVM) {
	title := "New limit"
	if vm.Editing {
		title = "Edit " + vm.Name
	}
	l, err := u.layout(c, title, "limits")
	if err != nil {
		u.internalError(c, err)
		return
	}
	vm.Layout, vm.Kinds = l, kinds
	t := tenantOf(c)
	if vm.Editing {
		vm.Action, vm.Cancel = limitPath(t.ID, vm.Name, ""), limitPath(t.ID, vm.Name, "")
	} else {
		vm.Action, vm.Cancel = tenantPath(t.ID, "/limits"), tenantPath(t.ID, "/limits")
	}
	if vm.Values == nil {
		vm.Values = map[string]string{}
	}
	if vm.Errors == nil {
		vm.Errors = map[string]string{}
	}
	u.render(c, status, limitFormPage(vm))
}

func (u *UI) newLimitForm(c *gin.Context) {
	u.renderLimitForm(c, http.StatusOK, limitFormVM{Values: map[string]string{"kind": string(limiter.TokenBucket), "period": "1m"}})
}

func (u *UI) createLimit(c *gin.Context) {
	t := tenantOf(c)
	name := strings.TrimSpace(c.PostForm("name"))
	vals, def, errs := parseLimitForm(c)
	ctx := c.Request.Context()
	if !limiter.ValidName(name) {
		errs["name"] = "must be 1 to 128 letters, digits and _ . : -"
	} else if _, err := u.engine.GetDefinition(ctx, t.ID, name); err == nil {
		errs["name"] = limitNameTaken
	} else if !limiter.IsNotFound(err) {
		u.internalError(c, err)
		return
	}
	vm := limitFormVM{Name: name, Values: vals, Errors: errs}
	if len(errs) > 0 {
		u.renderLimitForm(c, http.StatusUnprocessableEntity, vm)
		return
	}
	u.saveLimit(c, vm, def)
}

// limitNameTaken is the create form's error on a name in use.
const limitNameTaken = "a limit with this name exists; edit it instead"

// errLimitMovedOn is saveLimit's answer when the limit's existence changed since the form's
// check: a create found it created meanwhile, an edit found it deleted.
var errLimitMovedOn = errors.New("ui: the limit was created or deleted meanwhile")

// saveLimit writes the form's definition. The create form's "no limit of this name" and the
// edit form's "this limit exists" are checked again in the writing transaction: a check before
// it alone would let two creates of one name both succeed (the second replacing the first) or
// an edit re-create a limit deleted meanwhile.
func (u *UI) saveLimit(c *gin.Context, vm limitFormVM, def limiter.Definition) {
	t := tenantOf(c)
	audit := u.auditTx().DefinitionChange(actor(c), "")
	_, _, err := u.engine.PutDefinition(c.Request.Context(), t.ID, vm.Name, def, func(tx *gorm.DB, ch limiter.DefinitionChange) error {
		if (ch.Before != nil) != vm.Editing {
			return errLimitMovedOn
		}
		return audit(tx, ch)
	})
	if errors.Is(err, errLimitMovedOn) {
		if vm.Editing {
			vm.FormErr = "This limit was deleted while you edited it: nothing was saved. Create it again if you meant to."
			u.renderLimitForm(c, http.StatusConflict, vm)
			return
		}
		vm.Errors["name"] = limitNameTaken
		u.renderLimitForm(c, http.StatusUnprocessableEntity, vm)
		return
	}
	var ve *limiter.ValidationError
	if errors.As(err, &ve) {
		for _, fe := range ve.Fields {
			vm.Errors[fe.Field] = fe.Message
		}
		u.renderLimitForm(c, http.StatusUnprocessableEntity, vm)
		return
	}
	if e := apperr.From(err); err != nil && e.Code == apperr.PlanQuotaReached {
		vm.FormErr = e.Sentence()
		u.renderLimitForm(c, http.StatusConflict, vm)
		return
	}
	if err != nil {
		u.internalError(c, err)
		return
	}
	redirect(c, limitPath(t.ID, vm.Name, "?msg=limit-saved"))
}

// auditTx records a change in the tenant's audit log inside the change's own transaction
// (limiter.AuditTx).
func (u *UI) auditTx() limiter.AuditTx { return u.tenants.AuditTx }

// limitName reads :name; an invalid name cannot exist, so it is a 404.
func (u *UI) storedLimit(c *gin.Context) (limiter.StoredDefinition, bool) {
	name := c.Param("name")
	if !limiter.ValidName(name) {
		u.NotFound(c)
		return limiter.StoredDefinition{}, false
	}
	d, err := u.engine.GetDefinition(c.Request.Context(), tenantOf(c).ID, name)
	if limiter.IsNotFound(err) {
		u.NotFound(c)
		return d, false
	}
	if err != nil {
		u.internalError(c, err)
		return d, false
	}
	return d, true
}

func (u *UI) editLimitForm(c *gin.Context) {
	d, ok := u.storedLimit(c)
	if !ok {
		return
	}
	u.renderLimitForm(c, http.StatusOK, limitFormVM{Editing: true, Name: d.Name, Values: definitionValues(d.Definition),
		Warning: "Changing the kind (except between token bucket and gcra), period, shards, start or resolution resets every key of this limit."})
}

func (u *UI) updateLimit(c *gin.Context) {
	d, ok := u.storedLimit(c)
	if !ok {
		return
	}
	vals, def, errs := parseLimitForm(c)
	vm := limitFormVM{Editing: true, Name: d.Name, Values: vals, Errors: errs}
	if len(errs) > 0 {
		u.renderLimitForm(c, http.StatusUnprocessableEntity, vm)
		return
	}
	u.saveLimit(c, vm, def)
}
