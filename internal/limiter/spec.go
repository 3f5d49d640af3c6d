package limiter

import (
	"strconv"

	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// Spec is a limit definition as a client writes it (the API's JSON body and inline config, the
// dashboard's form): every field optional, so that each missing one is reported by name.
type Spec struct {
	Kind        string   `json:"kind"`
	Rate        *float64 `json:"rate"`
	Period      *int64   `json:"period"`
	Capacity    *float64 `json:"capacity,omitempty"`
	MaxReserved *float64 `json:"maxReserved,omitempty"`
	Shards      *int     `json:"shards,omitempty"`
	Start       *int64   `json:"start,omitempty"`
	Resolution  *int     `json:"resolution,omitempty"`
	Jitter      *int64   `json:"jitter,omitempty"`
	IPFallback  *bool    `json:"ipFallback,omitempty"`
	Mode        *string  `json:"mode,omitempty"`
	Penalty     *int64   `json:"penalty,omitempty"`
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
	if b.Period == nil {
		missing = append(missing, FieldError{Field: "period", Message: "is required"})
	}
	// Explicit zeros are errors; absent fields take defaults (the domain type reads 0 as default).
	if b.Shards != nil && *b.Shards < 1 {
		missing = append(missing, FieldError{Field: "shards", Message: "must be between 1 and 1024"})
	}
	if b.Resolution != nil && *b.Resolution < 1 {
		missing = append(missing, FieldError{Field: "resolution", Message: "must be between 1 and 60"})
	}
	if len(missing) > 0 {
		return Definition{}, fromAlgo(&algo.ValidationError{Code: algo.CodeInvalidConfig, Fields: missing})
	}
	d := Definition{Kind: Kind(b.Kind), Rate: *b.Rate, Period: *b.Period,
		Capacity: b.Capacity, MaxReserved: b.MaxReserved, Start: b.Start}
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
	return d, fromAlgo(d.Validate())
}

// invalidConfig is an invalid_config error about one field.
func invalidConfig(field, msg string) error {
	return fromAlgo(&algo.ValidationError{Code: algo.CodeInvalidConfig, Fields: []FieldError{{Field: field, Message: msg}}})
}

// AuditDetail is how the audit log describes a definition that was saved: kind, rate and period,
// then the mode and the penalty when they are not the defaults.
func AuditDetail(def Definition) string {
	s := string(def.Kind) + " rate=" + strconv.FormatFloat(def.Rate, 'g', -1, 64) + " period=" + strconv.FormatInt(def.Period, 10)
	if def.IsShadow() {
		s += " mode=shadow"
	}
	if def.Penalty > 0 {
		s += " penalty=" + strconv.FormatInt(def.Penalty, 10)
	}
	return s
}
