// Package limiter decides rate limits: the engine (engine.go) runs the pure limit math of
// package algo inside serializable database transactions, stores definitions (store.go) and
// sweeps state that reads like none (sweep.go). Its errors are the project's (package apperr).
package limiter

import (
	"errors"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
)

// The vocabulary of definitions is algo's; the engine's API speaks it under these names.
type (
	// Kind is the algorithm of a limit.
	Kind = algo.Kind
	// Definition configures one limit (see algo.Definition).
	Definition = algo.Definition
	// FieldError is one problem with one field of a definition or request.
	FieldError = algo.FieldError
	// Mode is Enforce or Shadow (see algo.Mode).
	Mode = algo.Mode
	// ValidationError lists what is wrong with a definition or request. Errors of the engine
	// carry it as the cause of their *apperr.Error, so errors.As still finds it.
	ValidationError = algo.ValidationError
	// Parent is one parent budget of a definition (see algo.Parent).
	Parent = algo.Parent
	// Calendar is the window of a quota.
	Calendar = algo.Calendar
)

// The limit kinds of DESIGN §3, and bounds on definitions and keys.
const (
	TokenBucket   = algo.TokenBucket
	FixedWindow   = algo.FixedWindow
	SlidingWindow = algo.SlidingWindow
	Quota         = algo.Quota
	GCRA          = algo.GCRA
	Concurrency   = algo.Concurrency
	Enforce       = algo.Enforce
	Shadow        = algo.Shadow
	MaxPenalty    = algo.MaxPenalty
	MaxShards     = algo.MaxShards
	MaxResolution = algo.MaxResolution
	MaxKeyBytes   = algo.MaxKeyBytes
	MaxAttributes = algo.MaxAttributes
	// KeyRule describes what ValidKey accepts, for error messages.
	KeyRule = algo.KeyRule
	// MaxAmount is the most a rate, capacity, maxReserved or count may be.
	MaxAmount = algo.MaxAmount
	// ReservedKeyRule says what ReservedKey refuses, for error messages.
	ReservedKeyRule = algo.ReservedKeyRule
	// SessionKeyPrefix and IPKeyPrefix start the keys the API derives itself (see algo).
	SessionKeyPrefix = algo.SessionKeyPrefix
	IPKeyPrefix      = algo.IPKeyPrefix
)

// ReservedKey reports whether s lies under a prefix of the keys the API derives itself.
func ReservedKey(s string) bool { return algo.ReservedKey(s) }

// ValidName reports whether s is an acceptable limit name.
func ValidName(s string) bool { return algo.ValidName(s) }

// CheckAttributes validates a decision's attributes (see algo.CheckAttributes).
func CheckAttributes(attrs map[string]string) error { return fromAlgo(algo.CheckAttributes(attrs)) }

// ValidAttributeName reports whether s can name a decision's attribute (see algo).
func ValidAttributeName(s string) bool { return algo.ValidAttributeName(s) }

// ValidKey reports whether s is an acceptable key (see algo.ValidKey).
func ValidKey(s string) bool { return algo.ValidKey(s) }

// Errors of the engine. Their messages are what a client is shown.
var (
	// ErrLimitNotFound: the name has no stored definition (and the request no inline config).
	ErrLimitNotFound = &apperr.Error{Code: apperr.LimitNotFound, Message: "no such limit"}
	// ErrDefinitionExists: a request carries an inline config for a name that has a stored definition.
	ErrDefinitionExists = &apperr.Error{Code: apperr.DefinitionExists, Field: "config",
		Message: "a stored definition exists for this name; omit config"}
	// ErrCountNeverAdmitted: a count the limit's kind never admits (see algo); an invalid_request
	// naming "count" in which errors.Is finds this.
	ErrCountNeverAdmitted = algo.ErrCountNeverAdmitted
	// ErrBadAttributes: the attributes cannot fill the parents' keys (see algo). The error is an
	// invalid_request naming "attributes…"; errors.Is finds this in it.
	ErrBadAttributes = algo.ErrBadAttributes
	// ErrCountExceedsCapacity: the count is more than the limit can ever admit at once.
	ErrCountExceedsCapacity = &apperr.Error{Code: apperr.CountExceedsCapacity, Field: "count",
		Message: "count is more than this limit can ever admit at once"}
	// ErrUnavailable: the decision was not made, because the engine is not running (Run) or
	// stopped before reaching it, or the database could not decide it safely (db's sentinel,
	// the same error, so that one errors.Is finds every way a decision fails closed); the
	// caller must fail closed.
	ErrUnavailable = db.ErrUnavailable
)

// IsNotFound reports whether err means the limit does not exist for this tenant.
func IsNotFound(err error) bool { return errors.Is(err, ErrLimitNotFound) }

// fromAlgo converts algo's plain errors into the project's vocabulary, at the engine's boundary.
// A validation error keeps the detail, field and field list the API has always shown, and stays
// reachable as the cause.
func fromAlgo(err error) error {
	var ve *algo.ValidationError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, algo.ErrCountExceedsCapacity):
		return ErrCountExceedsCapacity
	case errors.As(err, &ve):
		e := &apperr.Error{Code: apperr.Code(ve.Code), Message: ve.Detail(), Err: ve}
		for i, f := range ve.Fields {
			if i == 0 {
				e.Field = f.Field
			}
			e.Fields = append(e.Fields, apperr.FieldError{Field: f.Field, Message: f.Message})
		}
		return e
	}
	return err
}

// invalidRequest is an invalid_request error about one field.
func invalidRequest(field, msg string) error { return fromAlgo(algo.InvalidRequest(field, msg)) }
