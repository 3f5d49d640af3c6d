// Package metrics exposes Sluice's Prometheus metrics on a registry of its own (never the global
// default one, so that tests and several servers in one process never share counters):
// decisions by tenant, limit and result, decision latency, serializable-transaction retries and
// give-ups, connection pool statistics, sweeper progress and build information.
//
// Label cardinality is bounded: the first MaxLabelValues distinct tenants seen get their own
// label values, and so do the first MaxLabelValues limit names seen of each of those tenants;
// every later one is folded into "other". Limit names come from tenants (and inline configs are
// free-form), so an unbounded label would let one tenant grow the scrape without limit, and the
// names are bounded per tenant so that one tenant's flood of names never takes another's room
// (the system tenant's own limits, 0, included).
package metrics

import (
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-dev/sluice/internal/db"
)

// DefaultMaxLabelValues is the default number of distinct tenant label values, and of limit name
// label values per tenant, before the rest are folded into OtherLabel.
const DefaultMaxLabelValues = 100

// OtherLabel is the label value that stands for every tenant or name beyond the bound.
const OtherLabel = "other"

// Options configure New. DB may be nil (then no database metrics are registered).
type Options struct {
	DB             *db.DB
	MaxLabelValues int    // per label (tenant, name); DefaultMaxLabelValues when <= 0
	Version        string // reported by sluice_build_info; from the build info when empty
}

// Metrics owns the registry and the instruments the rest of the program feeds.
type Metrics struct {
	reg       *prometheus.Registry
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	inFlight  prometheus.Gauge
	swept     *prometheus.CounterVec
	sweepErrs prometheus.Counter
	overage   *prometheus.CounterVec
	webhooks  *prometheus.CounterVec
	emails    *prometheus.CounterVec
	tenants   *boundedLabels
	names     *namesByTenant
}

// New builds the registry with every collector registered.
func New(o Options) *Metrics {
	if o.MaxLabelValues <= 0 {
		o.MaxLabelValues = DefaultMaxLabelValues
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Consuming limit decisions by tenant ID, limit name and result (allowed, refused, or shadow_refused: " +
				"admitted only because the limit is in shadow mode; allowed + shadow_refused were admitted). " +
				"Tenants beyond the first " + strconv.Itoa(o.MaxLabelValues) + " seen, and each tenant's names beyond its first " + strconv.Itoa(o.MaxLabelValues) + ", are counted as \"other\".",
		}, []string{"tenant", "name", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_decision_duration_seconds",
			Help: "Latency of /v1 decision requests (limit and check, single and batch) by route and status class.",
			// Decisions are one short transaction; the tail is contention retries and the 5 s budget.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "status"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_decision_requests_in_flight",
			Help: "/v1 decision requests the server has received and not yet answered.",
		}),
		swept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_sweep_deleted_rows_total",
			Help: "Rows deleted by the background sweeper, by table.",
		}, []string{"table"}),
		sweepErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_sweep_errors_total",
			Help: "Sweeper runs that ended with an error (they are retried at the next interval).",
		}),
		overage: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_hold_overage_total",
			Help: "Amounts settled holds charged beyond what they held that their limit could not take (recorded, not enforced), by tenant ID and limit name.",
		}, []string{"tenant", "name"}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_webhook_attempts_total",
			Help: "Webhook delivery attempts by outcome: delivered, failed (to be retried) or given_up (the last try failed).",
		}, []string{"outcome"}),
		emails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_emails_total",
			Help: "Invite and password reset emails by outcome: sent, or failed (the link was shown on the page only).",
		}, []string{"outcome"}),
		tenants: newBoundedLabels(o.MaxLabelValues),
		names:   &namesByTenant{max: o.MaxLabelValues, of: map[string]*boundedLabels{}},
	}
	for _, o := range []string{"delivered", "failed", "given_up"} {
		m.webhooks.WithLabelValues(o) // every outcome from the first scrape, at 0
	}
	for _, o := range []string{"sent", "failed"} {
		m.emails.WithLabelValues(o)
	}
	m.reg.MustRegister(m.decisions, m.latency, m.inFlight, m.swept, m.sweepErrs, m.overage, m.webhooks, m.emails,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newBuildInfo(o.Version))
	if o.DB != nil {
		m.reg.MustRegister(newTxCollector(o.DB), collectors.NewDBStatsCollector(o.DB.SQL, string(o.DB.Dialect)))
	}
	return m
}

// Registry is the registry behind Handler, for tests and for extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, MaxRequestsInFlight: 4, Timeout: 10 * time.Second})
}

// OnDecision counts one consumed decision; it has the signature of limiter.Options.OnDecision.
func (m *Metrics) OnDecision(tenantID int64, name string, ok bool) {
	result := "refused"
	if ok {
		result = "allowed"
	}
	tenant, name := m.labels(tenantID, name)
	m.decisions.WithLabelValues(tenant, name, result).Inc()
}

// labels are the tenant and name label values of tenantID's limit name, bounded.
func (m *Metrics) labels(tenantID int64, name string) (tenantLabel, nameLabel string) {
	tenantLabel = m.tenants.get(strconv.FormatInt(tenantID, 10))
	return tenantLabel, m.names.get(tenantLabel, name)
}

// OnShadowRefused counts one consumed decision that a limit in shadow mode would have refused
// (and so admitted); it has the signature of limiter.Options.OnShadowRefused.
func (m *Metrics) OnShadowRefused(tenantID int64, name string) {
	tenant, name := m.labels(tenantID, name)
	m.decisions.WithLabelValues(tenant, name, "shadow_refused").Inc()
}

// ObserveDecision records the latency of one decision request. route is the route pattern (a
// handful of values), status the HTTP status, folded to its class ("2xx", "4xx", ...).
func (m *Metrics) ObserveDecision(route string, status int, d time.Duration) {
	m.latency.WithLabelValues(route, statusClass(status)).Observe(d.Seconds())
}

// DecisionInFlight adds delta (+1 when a decision request arrives, -1 when it is answered) to
// the requests in flight.
func (m *Metrics) DecisionInFlight(delta float64) { m.inFlight.Add(delta) }

// OnHoldOverage counts an amount a settled hold charged beyond what its limit could take; it has
// the signature of limiter.Options.OnHoldOverage.
func (m *Metrics) OnHoldOverage(tenantID int64, name string, amount float64) {
	tenant, name := m.labels(tenantID, name)
	m.overage.WithLabelValues(tenant, name).Add(amount)
}

// OnWebhookAttempt counts one webhook delivery attempt's outcome; it has the signature of
// webhooks.Options.OnAttempt.
func (m *Metrics) OnWebhookAttempt(outcome string) { m.webhooks.WithLabelValues(outcome).Inc() }

// OnEmail counts one email sent, or one that could not be.
func (m *Metrics) OnEmail(sent bool) {
	outcome := "failed"
	if sent {
		outcome = "sent"
	}
	m.emails.WithLabelValues(outcome).Inc()
}

// Swept records rows deleted by the sweeper from table.
func (m *Metrics) Swept(table string, n int) {
	if n > 0 {
		m.swept.WithLabelValues(table).Add(float64(n))
	}
}

// SweepFailed records a sweeper run that ended with an error.
func (m *Metrics) SweepFailed() { m.sweepErrs.Inc() }

func statusClass(status int) string {
	if status < 100 || status > 599 {
		return "other"
	}
	return strconv.Itoa(status/100) + "xx"
}

// boundedLabels admits the first max distinct values and maps every later one to OtherLabel.
type boundedLabels struct {
	mu   sync.RWMutex
	max  int
	seen map[string]struct{}
}

func newBoundedLabels(max int) *boundedLabels {
	return &boundedLabels{max: max, seen: make(map[string]struct{}, max)}
}

func (b *boundedLabels) get(v string) string {
	b.mu.RLock()
	_, ok := b.seen[v]
	full := len(b.seen) >= b.max
	b.mu.RUnlock()
	if ok {
		return v
	}
	if full || v == OtherLabel {
		return OtherLabel // a real name "other" shares the bucket rather than spending a slot
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen[v]; ok {
		return v
	}
	if len(b.seen) >= b.max {
		return OtherLabel
	}
	b.seen[v] = struct{}{}
	return v
}

// namesByTenant bounds the name label values of each tenant label value separately. There are
// at most MaxLabelValues + 1 tenant label values, so at most that many bounds.
type namesByTenant struct {
	mu  sync.RWMutex
	max int
	of  map[string]*boundedLabels // by tenant label value
}

func (n *namesByTenant) get(tenant, name string) string {
	n.mu.RLock()
	b := n.of[tenant]
	n.mu.RUnlock()
	if b == nil {
		n.mu.Lock()
		if b = n.of[tenant]; b == nil {
			b = newBoundedLabels(n.max)
			n.of[tenant] = b
		}
		n.mu.Unlock()
	}
	return b.get(name)
}

// txCollector reads the database's retry counters at scrape time, so the hot path pays nothing.
type txCollector struct {
	db      *db.DB
	retries *prometheus.Desc
	giveUps *prometheus.Desc
}

func newTxCollector(d *db.DB) *txCollector {
	return &txCollector{
		db: d,
		retries: prometheus.NewDesc("sluice_db_tx_retries_total",
			"Serializable transaction attempts repeated after a serialization failure, deadlock, lost insert race (unique violation) or busy database, by what the transaction was for.", []string{"purpose"}, nil),
		giveUps: prometheus.NewDesc("sluice_db_tx_giveups_total",
			"Transactions that ran out of retries or of database and failed, by what they were for: a decision's failure is an HTTP 503 (fail closed), a sweep's or a usage flush's is run again later.", []string{"purpose"}, nil),
	}
}

func (c *txCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.retries; ch <- c.giveUps }

func (c *txCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range db.Purposes {
		ch <- prometheus.MustNewConstMetric(c.retries, prometheus.CounterValue, float64(c.db.RetriesFor(p)), p.String())
		ch <- prometheus.MustNewConstMetric(c.giveUps, prometheus.CounterValue, float64(c.db.GiveUpsFor(p)), p.String())
	}
}

// Build names the running build: version (the one given, else the module's, else "(devel)"),
// the VCS revision and the Go version ("unknown" when the binary does not say).
func Build(version string) (v, revision, goVersion string) {
	revision, goVersion = "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if version == "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	if version == "" {
		version = "(devel)"
	}
	return version, revision, goVersion
}

// newBuildInfo is sluice_build_info{version, revision, goversion} 1.
func newBuildInfo(version string) prometheus.Collector {
	version, revision, goVersion := Build(version)
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "sluice_build_info",
		Help:        "Always 1; the labels say which build is running.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	})
	g.Set(1)
	return g
}

// WatchGroups exports the engine's group-commit counters (read at scrape time): how many group
// transactions ran and how many decisions they carried (their ratio is the coalescing factor),
// the round trips and statements they sent PostgreSQL, and the time they took.
func (m *Metrics) WatchGroups(stats func() GroupCounts) {
	m.reg.MustRegister(&groupCollector{
		stats: stats,
		groups: prometheus.NewDesc("sluice_decision_group_transactions_total",
			"Group-commit transactions run (committed or failed).", nil, nil),
		jobs: prometheus.NewDesc("sluice_decision_group_requests_total",
			"Decision requests (single or batch) carried by group-commit transactions.", nil, nil),
		trips: prometheus.NewDesc("sluice_decision_group_round_trips_total",
			"Round trips to PostgreSQL made by group-commit transactions (every attempt's).", nil, nil),
		statements: prometheus.NewDesc("sluice_decision_group_statements_total",
			"Statements sent to PostgreSQL by group-commit transactions (every attempt's).", nil, nil),
		seconds: prometheus.NewDesc("sluice_decision_group_seconds_total",
			"Time the decision lanes' transactions took, summed (each group's closes of holds and leases and its decisions, from the first attempt's start to the last one's end). Its rate is how busy the decision lanes are: near SLUICE_DECISION_LANES, the database's turn is the decisions' ceiling.", nil, nil),
	})
}

// GroupCounts are the engine's group counters, read at scrape time.
type GroupCounts struct {
	Groups, Jobs, RoundTrips, Statements int64
	Seconds                              float64
}

type groupCollector struct {
	stats                                    func() GroupCounts
	groups, jobs, trips, statements, seconds *prometheus.Desc
}

func (c *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.groups
	ch <- c.jobs
	ch <- c.trips
	ch <- c.statements
	ch <- c.seconds
}

func (c *groupCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, m := range []struct {
		d *prometheus.Desc
		v float64
	}{{c.groups, float64(s.Groups)}, {c.jobs, float64(s.Jobs)}, {c.trips, float64(s.RoundTrips)}, {c.statements, float64(s.Statements)}, {c.seconds, s.Seconds}} {
		ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, m.v)
	}
}
