package ui

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// planVM is a tenant's plan and its use of it: on the tenant's plan page, and with the form that
// sets it on the operator's page of the tenant.
type planVM struct {
	Rate      string // "20000 per second" or "no limit"
	Available string // decisions the rate admits right now ("" without a rate)
	Rows      []planUsageRow
	Custom    string // when an operator last set the plan, "" for the default plan
	// The operator's form: what was typed (empty: the default), each field's error, the defaults.
	FormURL  string
	Values   map[string]string
	Errors   map[string]string
	Defaults map[string]string
	FormErr  string
}

// planUsageRow is one count quota: used of max.
type planUsageRow struct {
	ID, Name, Used, Max string
	Near, Full          bool
}

// planFields are the operator form's fields, in order, with their labels.
var planFields = []struct{ name, label string }{
	{"decisionsPerSecond", "Decisions per second"},
	{"maxLimits", "Limits"},
	{"maxKeys", "API keys (not revoked)"},
	{"maxOverrides", "Overrides (all limits)"},
}

func countText(n int64) string {
	if n == 0 {
		return "no limit"
	}
	return strconv.FormatInt(n, 10)
}

func rateText(v float64) string {
	if v <= 0 {
		return "no limit"
	}
	return tenants.RateText(v) + " per second"
}

// planView reads a tenant's plan and its use of it.
func (u *UI) planView(ctx context.Context, tenantID int64) (planVM, error) {
	tp, err := u.tenants.TenantPlan(ctx, tenantID)
	if err != nil {
		return planVM{}, err
	}
	limits, err := u.engine.CountDefinitions(ctx, tenantID)
	if err != nil {
		return planVM{}, err
	}
	keys, err := u.tenants.KeyCount(ctx, tenantID)
	if err != nil {
		return planVM{}, err
	}
	overrides, err := u.engine.CountOverrides(ctx, tenantID)
	if err != nil {
		return planVM{}, err
	}
	p := tp.Plan
	vm := planVM{Rate: rateText(p.DecisionsPerSecond)}
	if p.DecisionsPerSecond > 0 {
		avail, err := u.engine.PlanAvailable(ctx, tenantID, p.DecisionsPerSecond)
		if err != nil {
			return planVM{}, err
		}
		vm.Available = strconv.FormatFloat(math.Floor(avail), 'f', -1, 64)
	}
	for _, r := range []struct {
		id, name  string
		used, max int64
	}{{"limits", "Limits", limits, p.MaxLimits}, {"keys", "API keys", keys, p.MaxKeys}, {"overrides", "Overrides", overrides, p.MaxOverrides}} {
		vm.Rows = append(vm.Rows, planUsageRow{ID: r.id, Name: r.name, Used: strconv.FormatInt(r.used, 10), Max: countText(r.max),
			Near: r.max > 0 && r.used*100 >= r.max*tenants.NearQuotaPercent, Full: r.max > 0 && r.used >= r.max})
	}
	if tp.UpdatedAt != nil {
		vm.Custom = fmtTime(*tp.UpdatedAt)
	}
	d := u.tenants.DefaultPlan()
	vm.Defaults = map[string]string{"decisionsPerSecond": rateText(d.DecisionsPerSecond), "maxLimits": countText(d.MaxLimits),
		"maxKeys": countText(d.MaxKeys), "maxOverrides": countText(d.MaxOverrides)}
	vm.Values = map[string]string{}
	if v := tp.Own.DecisionsPerSecond; v != nil {
		vm.Values["decisionsPerSecond"] = tenants.RateText(*v)
	}
	for name, v := range map[string]*int64{"maxLimits": tp.Own.MaxLimits, "maxKeys": tp.Own.MaxKeys, "maxOverrides": tp.Own.MaxOverrides} {
		if v != nil {
			vm.Values[name] = strconv.FormatInt(*v, 10)
		}
	}
	return vm, nil
}

// planPage shows a tenant its plan and its use of it.
func (u *UI) planPage(c *gin.Context) {
	t := tenantOf(c)
	l, err := u.layout(c, "Plan · "+t.Name, "plan")
	if err != nil {
		u.internalError(c, err)
		return
	}
	vm, err := u.planView(c.Request.Context(), t.ID)
	if err != nil {
		u.internalError(c, err)
		return
	}
	u.render(c, http.StatusOK, planPage(l, vm))
}

// parsePlanForm reads the operator's plan form: an empty field is the default; every bad field
// gets its own message.
func parsePlanForm(c *gin.Context) (tenants.PlanSettings, map[string]string, map[string]string) {
	var own tenants.PlanSettings
	values, errs := map[string]string{}, map[string]string{}
	for _, f := range planFields {
		v := strings.TrimSpace(c.PostForm(f.name))
		values[f.name] = v
		if v == "" {
			continue
		}
		if f.name == "decisionsPerSecond" {
			x, problem := parseNumber(v)
			switch problem {
			case "":
				own.DecisionsPerSecond = &x
			case errUnderflow:
				// A positive number below the smallest double reads as 0: taken as written, it
				// would be no limit.
				errs[f.name] = fmt.Sprintf("Decisions per second %q is too close to 0 for the server to hold and would read as 0, no limit: write 0 for no limit, or a rate of at least 5e-324.", v)
			default:
				errs[f.name] = "Decisions per second must be a number written in decimal, such as 20000 or 0.5 (0 for no limit), or empty for the default."
			}
			continue
		}
		n, ok := parseWhole(v)
		if !ok {
			errs[f.name] = "Must be a whole number written in decimal digits without a leading zero, fraction or exponent (0 for no limit), or empty for the default."
			continue
		}
		switch f.name {
		case "maxLimits":
			own.MaxLimits = &n
		case "maxKeys":
			own.MaxKeys = &n
		case "maxOverrides":
			own.MaxOverrides = &n
		}
	}
	if err := tenants.ValidatePlan(own); err != nil {
		for _, fe := range apperr.From(err).Fields {
			if _, seen := errs[fe.Field]; !seen {
				errs[fe.Field] = strings.ToUpper(fe.Message[:1]) + fe.Message[1:] + "."
			}
		}
	}
	return own, values, errs
}

// setTenantPlan is the operator's plan form on the tenant's management page.
func (u *UI) setTenantPlan(c *gin.Context) {
	t, ok := u.manageTenantOf(c)
	if !ok {
		return
	}
	own, values, errs := parsePlanForm(c)
	if len(errs) == 0 {
		err := u.tenants.SetPlan(c.Request.Context(), t.ID, own, actor(c))
		switch {
		case errors.Is(err, tenants.ErrInvalid):
			errs["decisionsPerSecond"] = apperr.From(err).Sentence()
		case err != nil:
			u.fail(c, err)
			return
		}
	}
	if len(errs) > 0 {
		u.renderManageTenant(c, http.StatusUnprocessableEntity, t, tenantVM{PlanValues: values, PlanErrors: errs})
		return
	}
	redirect(c, "/tenants/"+strconv.FormatInt(t.ID, 10)+"/manage?msg=plan-saved")
}
