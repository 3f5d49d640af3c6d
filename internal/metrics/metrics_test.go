package metrics_test

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/metrics"
	"github.com/sluice-dev/sluice/internal/testkit"
)

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestDecisionLabelsAreBoundedAndTheRestFoldIntoOther(t *testing.T) {
	m := metrics.New(metrics.Options{MaxLabelValues: 3})
	for tenant := range int64(10) {
		for n := range 10 {
			m.OnDecision(tenant, fmt.Sprint("name", n), n%2 == 0)
		}
	}
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	tenants, names := map[string]bool{}, map[string]bool{}
	var total float64
	for _, f := range families {
		if f.GetName() != "sluice_decisions_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				switch l.GetName() {
				case "tenant":
					tenants[l.GetValue()] = true
				case "name":
					names[l.GetValue()] = true
				}
			}
			total += s.GetCounter().GetValue()
		}
	}
	if len(tenants) != 4 || !tenants["other"] || len(names) != 4 || !names["other"] {
		t.Fatalf("label values: tenants %v, names %v; want 3 each plus other", tenants, names)
	}
	if total != 100 {
		t.Fatalf("decisions counted: %v, want 100 (folding must not lose counts)", total)
	}
}

// TestOneTenantsNamesTakeNoOtherTenantsRoom: names are bounded per tenant, so a tenant that
// decides on many names (inline configs take any) leaves another tenant's names their own
// label values, a later one's too.
func TestOneTenantsNamesTakeNoOtherTenantsRoom(t *testing.T) {
	m := metrics.New(metrics.Options{MaxLabelValues: 3})
	m.OnDecision(2, "early", true)
	for n := range 50 {
		m.OnDecision(1, fmt.Sprint("flood", n), true)
	}
	m.OnDecision(2, "late", true)
	m.OnDecision(0, "plan.decisions", false)
	body := scrape(t, m)
	for _, want := range []string{
		`sluice_decisions_total{name="early",result="allowed",tenant="2"} 1`,
		`sluice_decisions_total{name="late",result="allowed",tenant="2"} 1`,
		`sluice_decisions_total{name="plan.decisions",result="refused",tenant="0"} 1`,
		`sluice_decisions_total{name="other",result="allowed",tenant="1"} 47`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
}

func TestScrapeShowsDatabaseRetriesPoolStatsBuildInfoAndLatency(t *testing.T) {
	d := testkit.Open(t, db.SQLite)
	m := metrics.New(metrics.Options{DB: d, Version: "v1.2.3"})
	m.ObserveDecision("/v1/limit", 200, 3*time.Millisecond)
	m.ObserveDecision("/v1/limit", 503, 5*time.Second)
	m.Swept("limit_state", 7)
	body := scrape(t, m)
	for _, want := range []string{
		`sluice_db_tx_retries_total{purpose="decision"} 0`,
		`sluice_db_tx_giveups_total{purpose="sweep"} 0`,
		`go_sql_max_open_connections{db_name="sqlite"} 4`,
		`sluice_build_info{goversion="go`,
		`version="v1.2.3"`,
		`sluice_decision_duration_seconds_count{route="/v1/limit",status="2xx"} 1`,
		`sluice_decision_duration_seconds_count{route="/v1/limit",status="5xx"} 1`,
		`sluice_sweep_deleted_rows_total{table="limit_state"} 7`,
		"go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}

func TestScrapeShowsTheDecisionGroups(t *testing.T) {
	m := metrics.New(metrics.Options{})
	m.WatchGroups(func() metrics.GroupCounts {
		return metrics.GroupCounts{Groups: 4, Jobs: 60, RoundTrips: 5, Statements: 15, Seconds: 0.25}
	})
	body := scrape(t, m)
	for _, want := range []string{
		"sluice_decision_group_transactions_total 4",
		"sluice_decision_group_requests_total 60",
		"sluice_decision_group_round_trips_total 5",
		"sluice_decision_group_statements_total 15",
		"sluice_decision_group_seconds_total 0.25",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("scrape lacks %q", want)
		}
	}
}

func TestEachMetricsHasItsOwnRegistry(t *testing.T) {
	a, b := metrics.New(metrics.Options{}), metrics.New(metrics.Options{})
	a.OnDecision(1, "x", true)
	if strings.Contains(scrape(t, b), "sluice_decisions_total{") {
		t.Fatal("a decision counted in one registry shows in another")
	}
}
