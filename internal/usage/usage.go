// Package usage counts limit decisions (allowed, refused, and shadow-refused: admitted only
// because the limit is in shadow mode) per tenant, limit and minute for the dashboard's charts.
//
// Besides counts, the aggregator follows the keys behind them (analytics): per limit, minute and
// kind (refused, near their limit, would-be refused by a shadow limit) a bounded space-saving
// sketch of the most frequent keys (topn.go), flushed with the counts to usage_top_keys. The
// dashboard's top keys come from there, never from a scan of limit_state.
//
// Decisions are counted in memory (Record is a map update under a mutex, called from the
// limiter's OnDecision hook) and flushed to the usage_stats table periodically with additive
// upserts, one row per (tenant, name, minute) touched since the last flush, in short
// transactions of at most chunkRows rows (flush.go): the decision path never writes usage rows
// itself. Several instances may flush into the same rows; the upsert adds to what is there.
// Counts not yet flushed are lost if the process crashes, which is acceptable for charts; Run
// flushes them once more on a graceful shutdown.
//
// What is held between flushes is bounded, and so that no tenant can take another's room, each
// tenant has a share of it (share, below): a tenant's limits past its share are counted under
// its catch-all name OtherName instead.
package usage

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
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

// MinuteKeysRetention is how long the per-minute top keys (the last hour's view) are kept; the
// hourly ones are kept for Retention.
const MinuteKeysRetention = 3 * time.Hour

// NearFraction: a decision that leaves its key less than this fraction of the limit's maximum
// counts the key as near its limit.
const NearFraction = 0.2

// Kind is what a top-keys list counts.
type Kind string

// The kinds of top-keys lists.
const (
	KindRefused Kind = "refused" // refused decisions
	KindNear    Kind = "near"    // admitted decisions that left the key below NearFraction of its maximum
	KindShadow  Kind = "shadow"  // decisions a shadow-mode limit would have refused (admitted)
)

// Kinds lists every Kind in the order the dashboard shows them.
var Kinds = []Kind{KindRefused, KindNear, KindShadow}

// OtherName is the catch-all limit name of a tenant's counts and keys past its share of what the
// aggregator holds between flushes. Limit names cannot hold parentheses, so no limit has it.
const OtherName = "(other)"

// share bounds one kind of entry held between flushes: every tenant's named entries together,
// one tenant's, and the catch-alls (OtherName's, one per tenant and minute at most, or per
// tenant, minute and kind). A tenant's new name past named or perTenant goes under its catch-all,
// so its counts stay exact and only that name's detail is lost; past other, nothing is kept
// (dropped and logged). Inline configs let a tenant use any names, 1,000 a request, so without a
// share of its own one tenant could fill everything, and every other tenant's new names would be
// dropped.
type share struct{ named, perTenant, other int }

var (
	// counterShare bounds the (tenant, name, minute) counters: 100,000 is about 200,000 rows to
	// write, a flush of a few seconds (docs/performance.md), and 10,000 a tenant is 5,000 limits
	// deciding in each of two minutes of one flush interval.
	counterShare = share{named: 100_000, perTenant: 10_000, other: 10_000}
	// sketchShare bounds the top-keys sketches (each at most TopN keys, two rows a key to write).
	sketchShare = share{named: 10_000, perTenant: 1_000, other: 1_000}
)

// held counts what is held of a share.
type held struct {
	named, other int
	byTenant     map[int64]int // named entries per tenant
}

func newHeld() held { return held{byTenant: make(map[int64]int)} }

// admit takes room for one more entry of tenant under name, and reports whether there was any.
func (h *held) admit(s share, tenantID int64, name string) bool {
	if name == OtherName {
		if h.other >= s.other {
			return false
		}
		h.other++
		return true
	}
	if h.named >= s.named || h.byTenant[tenantID] >= s.perTenant {
		return false
	}
	h.named++
	h.byTenant[tenantID]++
	return true
}

// Options tune an Aggregator.
type Options struct {
	Interval time.Duration    // flush period; DefaultInterval when <= 0
	Now      func() time.Time // clock; time.Now when nil
	Logger   *slog.Logger
	// Flushed, when set, receives the result of every background flush (tests wait on it
	// instead of sleeping). Sends do not block.
	Flushed chan<- error
	// OnMinute, when set, is called inside a flush's transactions, once per tenant in each whose
	// counts carry refusals or near-limit keys of it, with each such limit's minute: its
	// refusals so far (every instance's flushed counts, this flush's included) and the keys this
	// flush saw near their limit. A flush writes in chunks, one transaction each, so a tenant
	// whose minutes fill more than one is heard once per chunk, each minute once. The threshold
	// webhooks hang here, so that their outbox rows commit with the counts (at least once).
	OnMinute func(tx *gorm.DB, tenantID int64, limits []LimitMinute) error
}

// LimitMinute is one limit's minute as OnMinute hears it.
type LimitMinute struct {
	Name    string
	Minute  time.Time
	Refused int64      // refusals in the minute so far, across instances
	Near    []KeyCount // keys this flush saw near their limit in the minute, most first
}

type counterKey struct {
	tenantID int64
	name     string
	bucket   int64 // ms since the epoch of the bucket's start
}

type counts struct{ allowed, refused, shadowRefused int64 }

func (c counts) decisions() int64 { return c.allowed + c.refused + c.shadowRefused }

func (c *counts) add(n counts) {
	c.allowed += n.allowed
	c.refused += n.refused
	c.shadowRefused += n.shadowRefused
}

type sketchKey struct {
	counterKey
	kind Kind
}

// Aggregator counts decisions and flushes them. It is safe for concurrent use.
type Aggregator struct {
	db       *db.DB
	now      func() time.Time
	log      *slog.Logger
	interval time.Duration
	flushed  chan<- error
	onMinute func(tx *gorm.DB, tenantID int64, limits []LimitMinute) error

	mu           sync.Mutex
	pending      map[counterKey]counts
	heldCounters held
	folded       map[int64]int64 // decisions counted under OtherName since the last flush, per tenant
	dropped      int64
	sketches     map[sketchKey]*topN
	heldSketches held
	droppedKeys  int64

	flushMu   sync.RWMutex // one flush at a time, so a failed flush's counts merge back in order; readers share it
	lastPrune time.Time
	// unsure is the chunk whose transaction the last flush saw fail, which may have committed all
	// the same (Flush); nil when none. Guarded by flushMu: readers count it unless its ID is
	// stored (unsureUnits).
	unsure *chunk
	// afterChunk, set by tests only, runs after each chunk's transaction committed; its error is
	// taken for the transaction's (as a COMMIT whose answer was lost would be).
	afterChunk func() error
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
	a := &Aggregator{db: d, now: o.Now, log: o.Logger, interval: o.Interval, flushed: o.Flushed, onMinute: o.OnMinute}
	a.takeLocked()
	return a
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
	a.addLocked(k, n)
}

// addLocked adds n to k's counter, or to its tenant's catch-all of the minute when k is new and
// past the tenant's share, and returns the key counted under; ok is false when there was no room
// for that either (the decisions are dropped).
func (a *Aggregator) addLocked(k counterKey, n counts) (_ counterKey, ok bool) {
	c, exists := a.pending[k]
	if !exists && !a.heldCounters.admit(counterShare, k.tenantID, k.name) {
		k.name = OtherName
		c, exists = a.pending[k]
		if !exists && !a.heldCounters.admit(counterShare, k.tenantID, OtherName) {
			a.dropped += n.decisions()
			return k, false
		}
		a.folded[k.tenantID] += n.decisions()
	}
	c.add(n)
	a.pending[k] = c
	return k, true
}

// sketchLocked returns k's sketch, or its tenant's catch-all's of the same minute and kind when
// k is new and past the tenant's share; nil when there is no room for that either.
func (a *Aggregator) sketchLocked(k sketchKey) *topN {
	if t := a.sketches[k]; t != nil {
		return t
	}
	if !a.heldSketches.admit(sketchShare, k.tenantID, k.name) {
		k.name = OtherName
		if t := a.sketches[k]; t != nil {
			return t
		}
		if !a.heldSketches.admit(sketchShare, k.tenantID, OtherName) {
			return nil
		}
	}
	t := newTopN()
	a.sketches[k] = t
	return t
}

// takeLocked empties what is held and returns it, for a flush.
func (a *Aggregator) takeLocked() (batch map[counterKey]counts, sketches map[sketchKey]*topN) {
	batch, sketches = a.pending, a.sketches
	a.pending, a.sketches = make(map[counterKey]counts), make(map[sketchKey]*topN)
	a.heldCounters, a.heldSketches = newHeld(), newHeld()
	a.folded = make(map[int64]int64)
	return batch, sketches
}

// Observation is one consumed decision of one key (limiter.KeyOutcome, converted by the
// composition root: this package imports no limiter).
type Observation struct {
	Name, Key      string
	OK             bool // admitted
	ShadowRefused  bool // admitted only because the limit is in shadow mode
	Remaining, Max float64
}

// Observe counts one decision like Record and RecordShadowRefused, and follows its key in the
// minute's top-keys sketch of its kind: refused, would-be refused (shadow), or admitted but left
// below NearFraction of the limit's maximum. Tenant 0 is not counted.
func (a *Aggregator) Observe(tenantID int64, o Observation) {
	if tenantID == 0 {
		return
	}
	var n counts
	var kind Kind
	switch {
	case o.ShadowRefused:
		n.shadowRefused, kind = 1, KindShadow
	case !o.OK:
		n.refused, kind = 1, KindRefused
	default:
		n.allowed = 1
		if o.Max > 0 && o.Remaining < NearFraction*o.Max {
			kind = KindNear
		}
	}
	k := counterKey{tenantID: tenantID, name: o.Name, bucket: bucketStart(a.now())}
	a.mu.Lock()
	defer a.mu.Unlock()
	k, counted := a.addLocked(k, n)
	if kind == "" {
		return
	}
	var t *topN
	if counted { // a key of decisions not counted is not followed either
		t = a.sketchLocked(sketchKey{counterKey: k, kind: kind})
	}
	if t == nil {
		a.droppedKeys++
		return
	}
	t.add(o.Key, 1)
}

func bucketStart(t time.Time) int64 {
	ms := t.UnixMilli()
	return ms - ms%Bucket.Milliseconds()
}

// hourStart is the start of the hour of bucket (ms since the epoch).
func hourStart(bucket int64) int64 { return bucket - bucket%time.Hour.Milliseconds() }

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

func (k counterKey) compare(o counterKey) int {
	if c := cmp.Compare(k.tenantID, o.tenantID); c != 0 {
		return c
	}
	if c := cmp.Compare(k.name, o.name); c != 0 {
		return c
	}
	return cmp.Compare(k.bucket, o.bucket)
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
// limit of the tenant. Counts not yet flushed are included, so charts are current. A step of
// whole hours reads the hourly table (the week view: 1,680 rows for ten limits, not 100,800),
// any other the minute table; both hold every flushed minute, the current one's included.
func (a *Aggregator) Series(ctx context.Context, tenantID int64, name string, span, step time.Duration) ([]Point, error) {
	a.flushMu.RLock() // no flush may move counts from memory to the table while we read both
	defer a.flushMu.RUnlock()
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
	var unsure []*unit
	err := a.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		var err error
		if unsure, err = a.unsureUnits(tx); err != nil {
			return err
		}
		// Summed per step in the database: a week per minute of ten limits is 100,800 rows,
		// which the page needs as 56 (docs/performance.md); per hour it is 1,680.
		table := "usage_stats"
		if step%time.Hour == 0 {
			table = "usage_stats_hourly"
		}
		q := `SELECT bucket_start - bucket_start % ? AS bucket_start, SUM(allowed) AS allowed, SUM(refused) AS refused, SUM(shadow_refused) AS shadow_refused FROM ` + table + `
			WHERE tenant_id = ? AND bucket_start >= ? AND bucket_start < ?`
		args := []any{stepMS, tenantID, from, end}
		if name != "" {
			q += ` AND name = ?`
			args = append(args, name)
		}
		return tx.Raw(q+` GROUP BY 1`, args...).Scan(&rows).Error
	})
	if err != nil {
		return nil, fmt.Errorf("usage: series: %w", err)
	}
	for _, r := range rows {
		add(r.BucketStart, counts{r.Allowed, r.Refused, r.ShadowRefused})
	}
	addAsked := func(k counterKey, c counts) { // of the tenant and limit asked for
		if k.tenantID == tenantID && (name == "" || k.name == name) {
			add(k.bucket, c)
		}
	}
	for _, u := range unsure {
		addAsked(u.key, u.counts)
	}
	a.mu.Lock()
	for k, c := range a.pending {
		addAsked(k, c)
	}
	a.mu.Unlock()
	return out, nil
}

// TopKeys returns the n keys of one tenant with the most decisions of kind over the span ending
// now, most first: a span of up to an hour in whole minutes (the current one included), from the
// minute table; a longer one in whole hours (the current hour and the span's hours before it,
// so up to an hour more than span), from the hourly table. name "" ranks the keys of every
// limit of the tenant together (each key named with its limit). It reads usage_top_keys (never
// limit_state) and merges this instance's counts not yet flushed, as Series does.
func (a *Aggregator) TopKeys(ctx context.Context, tenantID int64, name string, kind Kind, span time.Duration, n int) ([]KeyCount, error) {
	if span < Bucket || n <= 0 {
		return nil, fmt.Errorf("usage: top keys: span must be at least a minute and n positive")
	}
	a.flushMu.RLock() // as in Series: no flush moves counts between the two while we read both
	defer a.flushMu.RUnlock()
	table, width := "usage_top_keys", Bucket.Milliseconds()
	if span > time.Hour {
		table, width = "usage_top_keys_hourly", time.Hour.Milliseconds()
	}
	nowMS := a.now().UnixMilli()
	from := nowMS - nowMS%width - span.Milliseconds() + width
	if span > time.Hour {
		from -= width // the current hour is partial: the span's whole hours come before it
	}
	var rows []KeyCount
	var unsure []*unit
	err := a.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		var err error
		if unsure, err = a.unsureUnits(tx); err != nil {
			return err
		}
		q := `SELECT name, limit_key AS key, SUM(hits) AS hits, SUM(overcount) AS overcount FROM ` + table + `
			WHERE tenant_id = ? AND kind = ? AND bucket_start >= ?`
		args := []any{tenantID, string(kind), from}
		if name != "" {
			q += ` AND name = ?`
			args = append(args, name)
		}
		// Room for this instance's unflushed keys to move a stored key into the first n.
		args = append(args, n+TopN)
		return tx.Raw(q+` GROUP BY name, limit_key ORDER BY hits DESC, name, key LIMIT ?`, args...).Scan(&rows).Error
	})
	if err != nil {
		return nil, fmt.Errorf("usage: top keys: %w", err)
	}
	type nk struct{ name, key string }
	byKey := make(map[nk]int, len(rows))
	for i, r := range rows {
		byKey[nk{r.Name, r.Key}] = i
	}
	merge := func(sk sketchKey, t *topN) {
		if sk.tenantID != tenantID || sk.kind != kind || sk.bucket < from || (name != "" && sk.name != name) {
			return
		}
		for key, e := range t.m {
			if i, ok := byKey[nk{sk.name, key}]; ok {
				rows[i].Hits += e.hits
				rows[i].Overcount += e.overcount
				continue
			}
			byKey[nk{sk.name, key}] = len(rows)
			rows = append(rows, KeyCount{Name: sk.name, Key: key, Hits: e.hits, Overcount: e.overcount})
		}
	}
	for _, u := range unsure {
		for _, s := range u.sketches {
			merge(sketchKey{counterKey: u.key, kind: s.kind}, s.t)
		}
	}
	a.mu.Lock()
	for sk, t := range a.sketches {
		merge(sk, t)
	}
	a.mu.Unlock()
	sortKeyCounts(rows)
	if len(rows) > n {
		rows = rows[:n]
	}
	return rows, nil
}
