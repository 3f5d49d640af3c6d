package db

import (
	"context"
	"sync/atomic"
)

// Purpose says what a transaction is for. The retry and give-up counters are kept per purpose so
// that the metrics tell a decision that failed closed (its callers got a 503) from background
// work that will simply run again.
type Purpose int

// The purposes. Transactions whose context carries none count as PurposeOther.
const (
	PurposeOther    Purpose = iota // API keys, definitions, the dashboard, audit, captcha
	PurposeDecision                // the engine's group transactions, resets, values
	PurposeSweep                   // the sweepers' work: full limit_state rows, expired holds and leases
	PurposeUsage                   // the usage aggregator's flushes
	numPurposes
)

// Purposes lists every purpose, for metrics.
var Purposes = []Purpose{PurposeOther, PurposeDecision, PurposeSweep, PurposeUsage}

func (p Purpose) String() string {
	switch p {
	case PurposeDecision:
		return "decision"
	case PurposeSweep:
		return "sweep"
	case PurposeUsage:
		return "usage"
	default:
		return "other"
	}
}

type purposeKey struct{}

// WithPurpose marks the transactions run with ctx as serving p.
func WithPurpose(ctx context.Context, p Purpose) context.Context {
	return context.WithValue(ctx, purposeKey{}, p)
}

// PurposeOf is what ctx's transactions serve: PurposeOther unless WithPurpose said otherwise.
func PurposeOf(ctx context.Context) Purpose {
	if p, ok := ctx.Value(purposeKey{}).(Purpose); ok && p >= 0 && p < numPurposes {
		return p
	}
	return PurposeOther
}

// txCounters are the retry and give-up counters of one purpose.
type txCounters struct {
	retries atomic.Int64
	giveUps atomic.Int64
}
