// Package usage counts limit decisions (allowed, refused, and shadow-refused: admitted only
// because the limit is in shadow mode) per tenant, limit and minute for the dashboard's charts.
//
// Decisions are counted in memory (Record is a map update under a mutex, called from the
// limiter's OnDecision hook) and flushed to the usage_stats table periodically with additive
// upserts, one row per (tenant, name, minute) touched since the last flush: the decision path
// never writes usage rows itself. Several instances may flush into the same rows; the upsert adds
// to what is there. Counts not yet flushed are lost if the process crashes, which is acceptable
// for charts; Run flushes them once more on a graceful shutdown.
package usage

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/loop"
)

// Bucket is the width of one stored usage bucket.
const Bucket = time.Minute

// DefaultInterval is how often counts are flushed to the database.
const DefaultInterval = 10 * time.Second

// Retention is how long usage rows are kept; older rows are deleted by the flusher.
const Retention = 8 * 24 * time.Hour

// maxPending bounds the distinct (tenant, name, minute) counters held between flushes, so that a
// flood of inline-config names cannot grow memory without bound; beyond it, counts are dropped
// (and logged).
const maxPending = 100_000

// Options tune an Aggregator.
type Options struct {
	Interval time.Duration    // flush period; DefaultInterval when <= 0
	Now      func() time.Time // clock; time.Now when nil
	Logger   *slog.Logger
	// Flushed, when set, receives the result of every background flush (tests wait on it
	// instead of sleeping). Sends do not block.
	Flushed chan<- error
}

type counterKey struct {
	tenantID int64
	name     string
	bucket   int64 // ms since the epoch of the bucket's start
}

type counts struct{ allowed, refused, shadowRefused int64 }

// Aggregator counts decisions and flushes them. It is safe for concurrent use.
type Aggregator struct {
	db       *db.DB
	now      func() time.Time
	log      *slog.Logger
	interval time.Duration
	flushed  chan<- error

	mu      sync.Mutex
	pending map[counterKey]counts
	dropped int64

	flushMu   sync.Mutex // one flush at a time, so a failed flush's counts merge back in order
	lastPrune time.Time
}

// finalFlushTimeout bounds the flush Run makes on the way out, after its context has ended.
const finalFlushTimeout = 10 * time.Second

// New returns an Aggregator over d. It starts nothing: Run flushes in the background.
func New(d *db.DB, o Options) *Aggregator {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Aggregator{
		db: d, now: o.Now, log: o.Logger, interval: o.Interval, flushed: o.Flushed,
		pending: make(map[counterKey]counts),
	}
}

// Record counts one decision. Its signature matches limiter.Options.OnDecision. Tenant 0 (the
// system's own limits, such as dashboard logins) is not counted: it has no dashboard.
func (a *Aggregator) Record(tenantID int64, name string, ok bool) {
	if ok {
		a.add(tenantID, name, counts{allowed: 1})
	} else {
		a.add(tenantID, name, counts{refused: 1})
	}
}

// RecordShadowRefused counts one decision that a limit in shadow mode would have refused (it was
// admitted). Its signature matches limiter.Options.OnShadowRefused.
func (a *Aggregator) RecordShadowRefused(tenantID int64, name string) {
	a.add(tenantID, name, counts{shadowRefused: 1})
}

func (a *Aggregator) add(tenantID int64, name string, n counts) {
	if tenantID == 0 {
		return
	}
	k := counterKey{tenantID: tenantID, name: name, bucket: bucketStart(a.now())}
	a.mu.Lock()
	defer a.mu.Unlock()
	c, exists := a.pending[k]
	if !exists && len(a.pending) >= maxPending {
		a.dropped++
		return
	}
	c.allowed += n.allowed
	c.refused += n.refused
	c.shadowRefused += n.shadowRefused
	a.pending[k] = c
}

func bucketStart(t time.Time) int64 {
	ms := t.UnixMilli()
	return ms - ms%Bucket.Milliseconds()
}

// Run flushes the recorded counts every interval until ctx ends, then waits for a flush in
// progress, flushes once more (with a fresh deadline of its own, since ctx is over) and returns
// that final flush's error, or nil. A failed background flush is logged and its counts kept for
// the next one. Call it once.
func (a *Aggregator) Run(ctx context.Context) error {
	loop.Every(ctx, a.interval, 0, a.backgroundFlush)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalFlushTimeout)
	defer cancel()
	if err := a.Flush(fctx); err != nil {
		return fmt.Errorf("usage: final flush: %w", err)
	}
	return nil
}

func (a *Aggregator) backgroundFlush(ctx context.Context) {
	fctx, cancel := context.WithTimeout(ctx, a.interval+10*time.Second)
	err := a.Flush(fctx)
	cancel()
	// A flush cut short by shutdown is no failure to report: Run's final flush retries it.
	if err != nil && ctx.Err() == nil {
		a.log.Warn("usage flush failed; counts kept for the next attempt", "err", err)
	}
	if a.flushed != nil {
		select {
		case a.flushed <- err:
		default:
		}
	}
}

// upsert adds to the stored counters; portable to PostgreSQL, SQLite and CockroachDB.
const upsert = `INSERT INTO usage_stats (tenant_id, name, bucket_start, allowed, refused, shadow_refused) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (tenant_id, name, bucket_start) DO UPDATE SET
	allowed = usage_stats.allowed + excluded.allowed,
	refused = usage_stats.refused + excluded.refused,
	shadow_refused = usage_stats.shadow_refused + excluded.shadow_refused`

// Flush writes the counts recorded so far in one transaction. On failure they are merged back
// and retried by the next flush, so nothing is counted twice or lost while the process lives.
func (a *Aggregator) Flush(ctx context.Context) error {
	a.flushMu.Lock()
	defer a.flushMu.Unlock()
	a.mu.Lock()
	batch := a.pending
	a.pending = make(map[counterKey]counts)
	dropped := a.dropped
	a.dropped = 0
	a.mu.Unlock()
	if dropped > 0 {
		a.log.Warn("usage: too many distinct counters between flushes; some decisions were not counted", "dropped", dropped)
	}
	now := a.now()
	prune := now.Sub(a.lastPrune) > time.Hour
	if len(batch) == 0 && !prune {
		return nil
	}
	keys := make([]counterKey, 0, len(batch))
	for k := range batch {
		keys = append(keys, k)
	}
	// A fixed order makes concurrent flushes from several instances lock rows in the same order.
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].tenantID != keys[j].tenantID {
			return keys[i].tenantID < keys[j].tenantID
		}
		if keys[i].name != keys[j].name {
			return keys[i].name < keys[j].name
		}
		return keys[i].bucket < keys[j].bucket
	})
	err := a.db.Serializable(db.WithPurpose(ctx, db.PurposeUsage), func(tx *gorm.DB) error {
		for _, k := range keys {
			c := batch[k]
			if err := tx.Exec(upsert, k.tenantID, k.name, k.bucket, c.allowed, c.refused, c.shadowRefused).Error; err != nil {
				return err
			}
		}
		if prune {
			return tx.Exec(`DELETE FROM usage_stats WHERE bucket_start < ?`, now.Add(-Retention).UnixMilli()).Error
		}
		return nil
	})
	if err != nil {
		a.mu.Lock()
		for k, c := range batch {
			p := a.pending[k]
			p.allowed += c.allowed
			p.refused += c.refused
			p.shadowRefused += c.shadowRefused
			a.pending[k] = p
		}
		a.mu.Unlock()
		return fmt.Errorf("usage: flush: %w", err)
	}
	if prune {
		a.lastPrune = now
	}
	return nil
}

// Point is one bar of a chart: the decisions in [Start, Start+step).
type Point struct {
	Start   time.Time
	Allowed int64
	Refused int64
	// ShadowRefused were admitted only because the limit is in shadow mode (not in Allowed).
	ShadowRefused int64
}

// Series returns the decisions of one tenant over the span ending now, in buckets of step
// (a whole number of minutes; the span is cut to a whole number of steps). name "" sums every
// limit of the tenant. Counts not yet flushed are included, so charts are current.
func (a *Aggregator) Series(ctx context.Context, tenantID int64, name string, span, step time.Duration) ([]Point, error) {
	a.flushMu.Lock() // no flush may move counts from memory to the table while we read both
	defer a.flushMu.Unlock()
	if step < Bucket || step%Bucket != 0 || span < step {
		return nil, fmt.Errorf("usage: series: step must be a whole number of minutes and span at least one step")
	}
	n := int(span / step)
	stepMS := step.Milliseconds()
	// The last bucket is the one containing now; buckets are aligned to step (on the epoch).
	nowMS := a.now().UnixMilli()
	end := nowMS - nowMS%stepMS + stepMS
	from := end - int64(n)*stepMS
	out := make([]Point, n)
	for i := range out {
		out[i].Start = time.UnixMilli(from + int64(i)*stepMS).UTC()
	}
	add := func(bucket int64, c counts) {
		if bucket < from || bucket >= end {
			return
		}
		i := (bucket - from) / stepMS
		out[i].Allowed += c.allowed
		out[i].Refused += c.refused
		out[i].ShadowRefused += c.shadowRefused
	}
	type row struct {
		BucketStart   int64
		Allowed       int64
		Refused       int64
		ShadowRefused int64
	}
	var rows []row
	err := a.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		q := `SELECT bucket_start, SUM(allowed) AS allowed, SUM(refused) AS refused, SUM(shadow_refused) AS shadow_refused FROM usage_stats
			WHERE tenant_id = ? AND bucket_start >= ? AND bucket_start < ?`
		args := []any{tenantID, from, end}
		if name != "" {
			q += ` AND name = ?`
			args = append(args, name)
		}
		return tx.Raw(q+` GROUP BY bucket_start`, args...).Scan(&rows).Error
	})
	if err != nil {
		return nil, fmt.Errorf("usage: series: %w", err)
	}
	for _, r := range rows {
		add(r.BucketStart, counts{r.Allowed, r.Refused, r.ShadowRefused})
	}
	a.mu.Lock()
	for k, c := range a.pending {
		if k.tenantID == tenantID && (name == "" || k.name == name) {
			add(k.bucket, c)
		}
	}
	a.mu.Unlock()
	return out, nil
}
