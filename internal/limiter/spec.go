package limiter

import (
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// Spec is a limit definition as a client writes it (the API's JSON body and inline config, the
// dashboard's form): every field optional, so that each missing one is reported by name.
type Spec struct {
	Kind        string   `json:"kind"`
	Rate        *float64 `json:"rate,omitempty"`
	Period      *int64   `json:"period,omitempty"`
	Capacity    *float64 `json:"capacity,omitempty"`
	MaxReserved *float64 `json:"maxReserved,omitempty"`
	Shards      *int     `json:"shards,omitempty"`
	Start       *int64   `json:"start,omitempty"`
	Resolution  *int     `json:"resolution,omitempty"`
	Jitter      *int64   `json:"jitter,omitempty"`
	IPFallback  *bool    `json:"ipFallback,omitempty"`
	Mode        *string  `json:"mode,omitempty"`
	Penalty     *int64   `json:"penalty,omitempty"`
	// LeaseTTL (concurrency limits): how long a lease lasts unless released or extended, in ms.
	LeaseTTL *int64 `json:"leaseTtl,omitempty"`
	// Quotas: the calendar window, its IANA time zone, a monthly quota's billing day.
	Calendar  *string `json:"calendar,omitempty"`
	TimeZone  *string `json:"timeZone,omitempty"`
	AnchorDay *int    `json:"anchorDay,omitempty"`
	// Parents are the budgets a decision on this limit also spends (nested budgets).
	Parents []ParentSpec `json:"parents,omitempty"`
}

// ParentSpec is one parent budget as a client writes it: the parent limit's name and the
// template of the key it is spent under ("org:{org}").
type ParentSpec struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// ToDefinition converts and validates; field errors use the JSON names.
func (b Spec) ToDefinition() (Definition, error) {
	var missing []FieldError
	if b.Kind == "" {
		missing = append(missing, FieldError{Field: "kind", Message: "is required"})
	}
	if b.Rate == nil {
		missing = append(missing, FieldError{Field: "rate", Message: "is required"})
	}
	quota := Kind(b.Kind) == Quota
	concurrency := Kind(b.Kind) == Concurrency
	switch {
	case b.Period == nil && !quota && !concurrency:
		missing = append(missing, FieldError{Field: "period", Message: "is required"})
	case b.Period != nil && quota:
		missing = append(missing, FieldError{Field: "period", Message: "does not apply to quotas: the calendar sets the window"})
	case b.Period != nil && concurrency:
		missing = append(missing, FieldError{Field: "period", Message: "does not apply to concurrency limits: leaseTtl says how long a lease lasts"})
	}
	if b.AnchorDay != nil && *b.AnchorDay < 1 {
		missing = append(missing, FieldError{Field: "anchorDay", Message: "must be a day of the month between 1 and 31 (clamped to each month's last day)"})
	}
	// Explicit zeros are errors; absent fields take defaults (the domain type reads 0 as default).
	if b.Shards != nil && *b.Shards < 1 {
		missing = append(missing, FieldError{Field: "shards", Message: "must be between 1 and 1024"})
	}
	if b.Resolution != nil && *b.Resolution < 1 {
		missing = append(missing, FieldError{Field: "resolution", Message: "must be between 1 and 60"})
	}
	// Fields whose zero value the definition reads as "none": given, they must apply and be valid.
	switch {
	case b.LeaseTTL == nil:
	case !concurrency && !Kind(b.Kind).Known():
		// Validate names the kind; saying only that leaseTtl does not apply to it would hide that.
	case !concurrency:
		missing = append(missing, FieldError{Field: "leaseTtl", Message: "applies to concurrency limits only"})
	case *b.LeaseTTL < 1 || *b.LeaseTTL > algo.MaxLeaseTTL:
		missing = append(missing, FieldError{Field: "leaseTtl", Message: "must be a whole number of milliseconds from 1 to " + strconv.FormatInt(algo.MaxLeaseTTL, 10)})
	}
	if b.Calendar != nil && *b.Calendar == "" {
		missing = append(missing, FieldError{Field: "calendar", Message: `must be "day", "week" or "month"`})
	}
	if len(missing) > 0 {
		return Definition{}, fromAlgo(&algo.ValidationError{Code: algo.CodeInvalidConfig, Fields: missing})
	}
	d := Definition{Kind: Kind(b.Kind), Rate: *b.Rate,
		Capacity: b.Capacity, MaxReserved: b.MaxReserved, Start: b.Start}
	if b.Period != nil {
		d.Period = *b.Period
	}
	if b.Calendar != nil {
		d.Calendar = Calendar(*b.Calendar)
	}
	if b.TimeZone != nil {
		d.TimeZone = *b.TimeZone
	}
	if b.AnchorDay != nil {
		d.AnchorDay = *b.AnchorDay
	}
	for _, p := range b.Parents {
		d.Parents = append(d.Parents, Parent(p))
	}
	if b.Shards != nil {
		d.Shards = *b.Shards
	}
	if b.Resolution != nil {
		d.Resolution = *b.Resolution
	}
	if b.Jitter != nil {
		d.Jitter = *b.Jitter
	}
	if b.IPFallback != nil {
		d.IPFallback = *b.IPFallback
	}
	if b.Mode != nil {
		if *b.Mode == "" {
			return Definition{}, invalidConfig("mode", `must be "enforce" or "shadow"`)
		}
		d.Mode = Mode(*b.Mode)
	}
	if b.Penalty != nil {
		d.Penalty = *b.Penalty
	}
	if b.LeaseTTL != nil {
		d.LeaseTTL = *b.LeaseTTL
	}
	return d, fromAlgo(d.Validate())
}

// invalidConfig is an invalid_config error about one field.
func invalidConfig(field, msg string) error {
	return fromAlgo(&algo.ValidationError{Code: algo.CodeInvalidConfig, Fields: []FieldError{{Field: field, Message: msg}}})
}

// AuditDetail is how the audit log describes a definition that was stored: the kind, the rate
// and the period (or a quota's calendar, zone and billing day), the parents, then the mode and
// the penalty when they are not the defaults.
func AuditDetail(d Definition) string {
	var b strings.Builder
	b.WriteString(string(d.Kind) + " rate=" + strconv.FormatFloat(d.Rate, 'g', -1, 64))
	switch d.Kind {
	case Concurrency:
		b.WriteString(" leaseTtl=" + strconv.FormatInt(d.LeaseTTL, 10))
	case Quota:
		b.WriteString(" calendar=" + string(d.Calendar) + " timeZone=" + d.TimeZone)
		if d.Calendar == algo.Month {
			b.WriteString(" anchorDay=" + strconv.Itoa(max(d.AnchorDay, 1)))
		}
	default:
		b.WriteString(" period=" + strconv.FormatInt(d.Period, 10))
	}
	for i, p := range d.Parents {
		if i == 0 {
			b.WriteString(" parents=")
		} else {
			b.WriteString(",")
		}
		b.WriteString(p.Name + "(" + strconv.Quote(p.Key) + ")")
	}
	if d.IsShadow() {
		b.WriteString(" mode=shadow")
	}
	if d.Penalty > 0 {
		b.WriteString(" penalty=" + strconv.FormatInt(d.Penalty, 10))
	}
	return b.String()
}
