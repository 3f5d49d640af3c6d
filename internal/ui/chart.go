package ui

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/usage"
)

// Usage charts are plain SVG computed here and written by chart.templ: no chart library and no
// JavaScript. Bars stack allowed (bottom), refused, and shadow-refused (top: admitted only because
// the limit is in shadow mode) decisions per bucket.

type chartSpec struct {
	title string
	span  time.Duration
	step  time.Duration
}

var (
	chartHour = chartSpec{"Last hour (per minute)", time.Hour, time.Minute}
	chartDay  = chartSpec{"Last 24 hours (per 15 minutes)", 24 * time.Hour, 15 * time.Minute}
)

// Chart geometry, in SVG user units. The SVG scales to its container but is never drawn
// narrower than 40rem (app.css: it scrolls instead), so that its 11-unit labels stay over 9 px.
const (
	chartW, chartH                = 720.0, 200.0
	padL, padR, padTop, padBottom = 48.0, 8.0, 10.0, 24.0
)

type chartVM struct {
	Title        string
	ViewBox      string
	Bars         []barVM
	Grid         []gridVM
	XLabels      []xLabelVM
	TotalAllowed int64
	TotalRefused int64
	TotalShadow  int64  // would-be refusals of limits in shadow mode
	Summary      string // text alternative for screen readers
	AxisX1       string
	AxisX2       string
	AxisY        string
}

type barVM struct {
	X, W                   string
	AllowedY, AllowedH     string
	RefusedY, RefusedH     string
	ShadowY, ShadowH       string
	HasAllowed, HasRefused bool
	HasShadow              bool
	Tip                    string
}

type gridVM struct{ Y, Label, LabelY, X1, X2 string }

type xLabelVM struct{ X, Y, Label, Anchor string }

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func timeMS(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// niceCeil rounds v up to 1, 2 or 5 times a power of ten, for readable axis labels.
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// chart builds one chart of a tenant's decisions (name "" for all of its limits); nil when the
// dashboard has no usage source.
func (u *UI) chart(c *gin.Context, tenantID int64, name, title string, spec chartSpec) (*chartVM, error) {
	if u.usage == nil {
		return nil, nil
	}
	points, err := u.usage.Series(c.Request.Context(), tenantID, name, spec.span, spec.step)
	if err != nil {
		return nil, err
	}
	return buildChart(points, title), nil
}

// buildChart lays out the bars of points.
func buildChart(points []usage.Point, title string) *chartVM {
	vm := &chartVM{Title: title, ViewBox: fmt.Sprintf("0 0 %g %g", chartW, chartH)}
	var peak int64
	for _, p := range points {
		vm.TotalAllowed += p.Allowed
		vm.TotalRefused += p.Refused
		vm.TotalShadow += p.ShadowRefused
		peak = max(peak, p.Allowed+p.Refused+p.ShadowRefused)
	}
	top := niceCeil(float64(peak))
	plotW, plotH := chartW-padL-padR, chartH-padTop-padBottom
	base := padTop + plotH
	vm.AxisX1, vm.AxisX2, vm.AxisY = f1(padL), f1(chartW-padR), f1(base)
	for _, frac := range []float64{0.5, 1} {
		y := base - frac*plotH
		vm.Grid = append(vm.Grid, gridVM{Y: f1(y), LabelY: f1(y + 4), Label: fmtNum(top * frac), X1: f1(padL), X2: f1(chartW - padR)})
	}
	n := len(points)
	if n == 0 {
		return vm
	}
	slot := plotW / float64(n)
	w := math.Max(1, slot*0.8)
	for i, p := range points {
		x := padL + float64(i)*slot + (slot-w)/2
		ah := float64(p.Allowed) / top * plotH
		rh := float64(p.Refused) / top * plotH
		sh := float64(p.ShadowRefused) / top * plotH
		tip := fmt.Sprintf("%s UTC: %d allowed, %d refused", p.Start.Format("Jan 2 15:04"), p.Allowed, p.Refused)
		if p.ShadowRefused > 0 {
			tip += fmt.Sprintf(", %d would-be refused (shadow)", p.ShadowRefused)
		}
		vm.Bars = append(vm.Bars, barVM{
			X: f1(x), W: f1(w),
			AllowedY: f1(base - ah), AllowedH: f1(ah), HasAllowed: p.Allowed > 0,
			RefusedY: f1(base - ah - rh), RefusedH: f1(rh), HasRefused: p.Refused > 0,
			ShadowY: f1(base - ah - rh - sh), ShadowH: f1(sh), HasShadow: p.ShadowRefused > 0,
			Tip: tip,
		})
	}
	labelY := f1(chartH - 6)
	vm.XLabels = []xLabelVM{
		{X: f1(padL), Y: labelY, Label: points[0].Start.Format("15:04"), Anchor: "start"},
		{X: f1(padL + plotW/2), Y: labelY, Label: points[n/2].Start.Format("15:04"), Anchor: "middle"},
		{X: f1(chartW - padR), Y: labelY, Label: "now (UTC)", Anchor: "end"},
	}
	vm.Summary = fmt.Sprintf("%s: %d allowed and %d refused decisions.", title, vm.TotalAllowed, vm.TotalRefused)
	if vm.TotalShadow > 0 {
		vm.Summary += fmt.Sprintf(" %d more were admitted only because the limit is in shadow mode.", vm.TotalShadow)
	}
	return vm
}
