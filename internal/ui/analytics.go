package ui

import (
	"encoding/csv"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/usage"
)

// The analytics page answers "who is being throttled, since when, and is it getting worse?": per
// tenant or per limit, over the last hour, day or week, the keys with the most refusals, the keys
// most often left near their limit, the keys a shadow limit would have refused (all from the
// usage aggregator's bounded top-N, never a scan of limit_state), and the decisions and refusal
// ratio over time. Its panel refreshes itself every 10 seconds; both tables export as CSV.

// analyticsRange is one choice of the time-range picker.
type analyticsRange struct {
	ID    string
	Label string
	chart chartSpec
}

var analyticsRanges = []analyticsRange{
	{"hour", "Last hour", chartSpec{"Last hour (per minute)", time.Hour, time.Minute}},
	{"day", "Last 24 hours", chartSpec{"Last 24 hours (per 15 minutes)", 24 * time.Hour, 15 * time.Minute}},
	{"week", "Last 7 days", chartSpec{"Last 7 days (per 3 hours)", 7 * 24 * time.Hour, 3 * time.Hour}},
}

// analyticsTopN is how many keys each table shows (and the CSV exports).
const analyticsTopN = 20

type analyticsVM struct {
	Layout layoutVM
	Panel  analyticsPanelVM
	Ranges []rangeOptionVM
	Limits []limitOptionVM
	Error  string // an unknown range or limit name in the query, shown above the panel
}

type rangeOptionVM struct {
	ID, Label string
	Selected  bool
}

type limitOptionVM struct {
	Name     string
	Selected bool
}

type analyticsPanelVM struct {
	PanelURL    string // the htmx poll
	KeysCSVURL  string
	RatioCSVURL string
	Scope       string // "all limits" or the limit's name
	Chart       *chartVM
	Ratio       ratioVM
	Tables      []topKeysVM
	Empty       bool // no decision at all in the range
}

type topKeysVM struct {
	ID, Title, Explain, Count string
	AllLimits                 bool // the Limit column is shown
	Rows                      []topKeyRowVM
}

type topKeyRowVM struct {
	Limit, LimitURL, Key, Hits string
	Approx                     bool // some of the hits may belong to keys no longer followed
	Overcount                  string
}

// ratioVM is the refusal ratio per bucket as SVG bars of 0–100 %.
type ratioVM struct {
	ViewBox, Summary           string
	Bars                       []ratioBarVM
	AxisX1, AxisX2, AxisY      string
	Grid                       []gridVM
	XLabels                    []xLabelVM
	Peak                       string
	HasRefusals                bool
	AxisLabelX, AxisLabelY     string
	RefusedTotal, DecidedTotal int64
}

type ratioBarVM struct{ X, Y, W, H, Tip string }

// analyticsMessages say what analyticsParams found bad: for the panel, which shows the
// fallback, and for a CSV export, which falls back to nothing (a file of another range than asked
// would be read as the one asked) and says what to ask.
var analyticsMessages = map[string]struct{ panel, csv string }{
	"range": {"Unknown time range; showing the last hour. The ranges are hour, day and week.",
		"unknown range: use hour, day or week"},
	"limit": {"Limit names are 1 to 128 letters, digits and _ . : -; showing every limit.",
		"limit names are 1 to 128 letters, digits and _ . : -"},
	"range and limit": {"Unknown time range and limit name; showing the last hour of every limit. The ranges are hour, day and week.",
		"unknown range (use hour, day or week) and limit name (1 to 128 letters, digits and _ . : -)"},
	"query": {"The address's query is not well-formed; showing the last hour of every limit.",
		`the query is not well-formed: give range and limit once each, separate them with "&", and percent-encode "%" and ";" in a value`},
}

// analyticsQuery reads ?range= and ?limit=; bad values fall back to the last hour and every
// limit, with the panel's message.
func analyticsQuery(c *gin.Context) (analyticsRange, string, string) {
	r, name, bad := analyticsParams(c)
	return r, name, analyticsMessages[bad].panel
}

// analyticsCSVQuery is analyticsQuery for a CSV export, with the export's message.
func analyticsCSVQuery(c *gin.Context) (analyticsRange, string, string) {
	r, name, bad := analyticsParams(c)
	return r, name, analyticsMessages[bad].csv
}

// analyticsParams reads ?range= and ?limit=, naming what is bad ("range", "limit" or "range and
// limit"), with the last hour and every limit in its place.
func analyticsParams(c *gin.Context) (r analyticsRange, name, bad string) {
	r = analyticsRanges[0]
	// Read strictly: c.Query drops a pair it cannot decode (?range=week%zz) and takes the first
	// of two, and a CSV of another range than asked would be read as the one asked.
	q, err := url.ParseQuery(c.Request.URL.RawQuery)
	if err != nil || len(q["range"]) > 1 || len(q["limit"]) > 1 {
		return r, "", "query"
	}
	if id := q.Get("range"); id != "" {
		found := false
		for _, ar := range analyticsRanges {
			if ar.ID == id {
				r, found = ar, true
			}
		}
		if !found {
			bad = "range"
		}
	}
	name = q.Get("limit")
	if name != "" && !limiter.ValidName(name) {
		name = ""
		if bad == "" {
			bad = "limit"
		} else {
			bad += " and limit"
		}
	}
	return r, name, bad
}

func analyticsQS(r analyticsRange, name string) string {
	q := url.Values{"range": {r.ID}}
	if name != "" {
		q.Set("limit", name)
	}
	return "?" + q.Encode()
}

func (u *UI) analyticsPage(c *gin.Context) {
	t := tenantOf(c)
	r, name, msg := analyticsQuery(c)
	l, err := u.layout(c, "Analytics · "+t.Name, "analytics")
	if err != nil {
		u.internalError(c, err)
		return
	}
	vm := analyticsVM{Layout: l, Error: msg}
	for _, ar := range analyticsRanges {
		vm.Ranges = append(vm.Ranges, rangeOptionVM{ID: ar.ID, Label: ar.Label, Selected: ar.ID == r.ID})
	}
	defs, err := u.engine.ListDefinitions(c.Request.Context(), t.ID)
	if err != nil {
		u.internalError(c, err)
		return
	}
	for _, d := range defs {
		vm.Limits = append(vm.Limits, limitOptionVM{Name: d.Name, Selected: d.Name == name})
	}
	if vm.Panel, err = u.analyticsPanel(c, t.ID, r, name); err != nil {
		u.internalError(c, err)
		return
	}
	status := http.StatusOK
	if msg != "" {
		status = http.StatusBadRequest
	}
	u.render(c, status, analyticsPage(vm))
}

// analyticsPanelFragment is the htmx poll: the panel alone.
func (u *UI) analyticsPanelFragment(c *gin.Context) {
	r, name, _ := analyticsQuery(c)
	p, err := u.analyticsPanel(c, tenantOf(c).ID, r, name)
	if err != nil {
		u.internalError(c, err)
		return
	}
	u.render(c, http.StatusOK, analyticsPanel(p))
}

func (u *UI) analyticsPanel(c *gin.Context, tenantID int64, r analyticsRange, name string) (analyticsPanelVM, error) {
	qs := analyticsQS(r, name)
	p := analyticsPanelVM{
		PanelURL:    tenantPath(tenantID, "/analytics/panel"+qs),
		KeysCSVURL:  tenantPath(tenantID, "/analytics/keys.csv"+qs),
		RatioCSVURL: tenantPath(tenantID, "/analytics/ratio.csv"+qs),
		Scope:       "all limits",
	}
	if name != "" {
		p.Scope = name
	}
	if u.usage == nil {
		p.Empty = true
		return p, nil
	}
	// The series and the three lists are independent reads: made at once, the panel costs the
	// slowest of them rather than their sum (docs/performance.md).
	ctx := c.Request.Context()
	var (
		wg     sync.WaitGroup
		points []usage.Point
		errs   [1 + 3]error
		tops   [3][]usage.KeyCount
	)
	wg.Go(func() { points, errs[0] = u.usage.Series(ctx, tenantID, name, r.chart.span, r.chart.step) })
	for i, k := range analyticsKinds {
		wg.Go(func() { tops[i], errs[1+i] = u.usage.TopKeys(ctx, tenantID, name, k.kind, r.chart.span, analyticsTopN) })
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return p, err
	}
	p.Chart = buildChart(points, r.chart.title+", "+p.Scope)
	p.Empty = p.Chart.TotalAllowed+p.Chart.TotalRefused+p.Chart.TotalShadow == 0
	p.Ratio = ratioChart(points, "Refusal ratio, "+r.chart.title)
	for i, k := range analyticsKinds {
		tv := topKeysVM{ID: "top-" + string(k.kind), Title: k.title, Explain: k.explain, Count: k.count, AllLimits: name == ""}
		for _, row := range tops[i] {
			tv.Rows = append(tv.Rows, topKeyRowVM{Limit: row.Name, LimitURL: limitPath(tenantID, row.Name, ""), Key: keyLabel(row.Key),
				Hits: strconv.FormatInt(row.Hits, 10), Approx: row.Overcount > 0, Overcount: strconv.FormatInt(row.Overcount, 10)})
		}
		p.Tables = append(p.Tables, tv)
	}
	return p, nil
}

// keyLabel names the keyless (global) state.
func keyLabel(k string) string {
	if k == "" {
		return "(no key)"
	}
	return k
}

var analyticsKinds = []struct {
	kind                  usage.Kind
	title, explain, count string
}{
	{usage.KindRefused, "Top refused keys", "The keys with the most refused decisions.", "Refused"},
	{usage.KindNear, "Keys near their limit", "Admitted decisions that left the key below 20 % of the limit's maximum.", "Decisions"},
	{usage.KindShadow, "Would-be refusals (shadow limits)", "Decisions a limit in shadow mode would have refused; they were admitted.", "Would-be refused"},
}

// ratioChart draws refused / (allowed + refused) per bucket; buckets without decisions have no bar.
func ratioChart(points []usage.Point, title string) ratioVM {
	vm := ratioVM{ViewBox: fmt.Sprintf("0 0 %g %g", chartW, chartH)}
	plotW, plotH := chartW-padL-padR, chartH-padTop-padBottom
	base := padTop + plotH
	vm.AxisX1, vm.AxisX2, vm.AxisY = f1(padL), f1(chartW-padR), f1(base)
	for _, frac := range []float64{0.5, 1} {
		y := base - frac*plotH
		vm.Grid = append(vm.Grid, gridVM{Y: f1(y), LabelY: f1(y + 4), Label: fmt.Sprintf("%.0f%%", frac*100), X1: f1(padL), X2: f1(chartW - padR)})
	}
	n := len(points)
	if n == 0 {
		return vm
	}
	slot := plotW / float64(n)
	w := max(1, slot*0.8)
	var peak float64
	for i, p := range points {
		vm.RefusedTotal += p.Refused
		vm.DecidedTotal += decided(p)
		if decided(p) == 0 {
			continue
		}
		ratio := float64(p.Refused) / float64(decided(p))
		peak = max(peak, ratio)
		h := ratio * plotH
		x := padL + float64(i)*slot + (slot-w)/2
		vm.Bars = append(vm.Bars, ratioBarVM{X: f1(x), Y: f1(base - h), W: f1(w), H: f1(h),
			Tip: fmt.Sprintf("%s UTC: %.1f %% refused (%d of %d)", p.Start.Format("Jan 2 15:04"), ratio*100, p.Refused, decided(p))})
	}
	vm.HasRefusals = vm.RefusedTotal > 0
	labelY := f1(chartH - 6)
	vm.XLabels = []xLabelVM{
		{X: f1(padL), Y: labelY, Label: points[0].Start.Format("Jan 2 15:04"), Anchor: "start"},
		{X: f1(chartW - padR), Y: labelY, Label: "now (UTC)", Anchor: "end"},
	}
	vm.Peak = fmt.Sprintf("%.1f %%", peak*100)
	overall := 0.0
	if vm.DecidedTotal > 0 {
		overall = float64(vm.RefusedTotal) / float64(vm.DecidedTotal) * 100
	}
	vm.Summary = fmt.Sprintf("%s: %.1f %% of %d decisions refused overall, at most %s in one bucket.", title, overall, vm.DecidedTotal, vm.Peak)
	return vm
}

// decided is every decision of a bucket: those a shadow-mode limit would have refused were
// decided too (and admitted), so a shadow-only limit's bucket is not "0 decisions".
func decided(p usage.Point) int64 { return p.Allowed + p.Refused + p.ShadowRefused }

// analyticsKeysCSV exports the three top-keys tables of the range as CSV.
func (u *UI) analyticsKeysCSV(c *gin.Context) {
	t := tenantOf(c)
	r, name, msg := analyticsCSVQuery(c)
	if msg != "" {
		c.String(http.StatusBadRequest, msg+"\n")
		return
	}
	var rows [][]string
	if u.usage != nil {
		for _, k := range analyticsKinds {
			top, err := u.usage.TopKeys(c.Request.Context(), t.ID, name, k.kind, r.chart.span, analyticsTopN)
			if err != nil {
				u.internalError(c, err)
				return
			}
			for _, row := range top {
				rows = append(rows, []string{string(k.kind), row.Name, row.Key, strconv.FormatInt(row.Hits, 10), strconv.FormatInt(row.Overcount, 10)})
			}
		}
	}
	writeCSV(c, fmt.Sprintf("sluice-top-keys-%s.csv", r.ID), []string{"kind", "limit", "key", "decisions", "overcount"}, rows)
}

// analyticsRatioCSV exports the decisions and refusal ratio per bucket of the range as CSV.
func (u *UI) analyticsRatioCSV(c *gin.Context) {
	t := tenantOf(c)
	r, name, msg := analyticsCSVQuery(c)
	if msg != "" {
		c.String(http.StatusBadRequest, msg+"\n")
		return
	}
	var rows [][]string
	if u.usage != nil {
		points, err := u.usage.Series(c.Request.Context(), t.ID, name, r.chart.span, r.chart.step)
		if err != nil {
			u.internalError(c, err)
			return
		}
		for _, p := range points {
			ratio := ""
			if d := decided(p); d > 0 {
				ratio = strconv.FormatFloat(float64(p.Refused)/float64(d), 'f', 4, 64)
			}
			rows = append(rows, []string{p.Start.Format(time.RFC3339), strconv.FormatInt(p.Allowed, 10), strconv.FormatInt(p.Refused, 10),
				strconv.FormatInt(p.ShadowRefused, 10), ratio})
		}
	}
	writeCSV(c, fmt.Sprintf("sluice-refusal-ratio-%s.csv", r.ID), []string{"bucket_start", "allowed", "refused", "shadow_refused", "refusal_ratio"}, rows)
}

// writeCSV answers a download. Cells that a spreadsheet would run as a formula are prefixed with
// a quote (keys are the tenant's callers' input).
func writeCSV(c *gin.Context, filename string, header []string, rows [][]string) {
	c.Header("Content-Type", "text/csv; charset=utf-8")
	c.Header("Content-Disposition", `attachment; filename="`+filename+`"`)
	c.Header("Cache-Control", "no-store")
	c.Status(http.StatusOK)
	w := csv.NewWriter(c.Writer)
	_ = w.Write(header)
	for _, r := range rows {
		for i, cell := range r {
			if cell != "" && (cell[0] == '=' || cell[0] == '+' || cell[0] == '-' || cell[0] == '@' || cell[0] == '\t' || cell[0] == '\r') {
				r[i] = "'" + cell
			}
		}
		_ = w.Write(r)
	}
	w.Flush()
}
