package ui_test

import (
	"context"
	"encoding/csv"
	"net/http"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

func topRows(d *goquery.Document, table string) []string {
	var out []string
	d.Find("#" + table + " tbody tr").Each(func(_ int, s *goquery.Selection) {
		cells := s.Find("td").Map(func(_ int, c *goquery.Selection) string { return strings.Join(strings.Fields(c.Text()), " ") })
		out = append(out, strings.Join(cells, " | "))
	})
	return out
}

func readCSV(t *testing.T, r response) [][]string {
	t.Helper()
	wantStatus(t, r, http.StatusOK)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/csv") {
		t.Fatalf("content type %q", ct)
	}
	rows, err := csv.NewReader(strings.NewReader(r.body)).ReadAll()
	if err != nil {
		t.Fatalf("%v in %q", err, r.body)
	}
	return rows
}

// TestAnalyticsShowTopRefusedNearAndShadowKeysAndExportCSV: over real HTTP on both dialects, the
// analytics page says "no data yet" before any decision; then ranks refused keys, keys near their
// limit and shadow would-be refusals per tenant and per limit, from memory and after a flush
// alike (never counted twice); its panel (the htmx poll) and both CSV exports agree; another
// tenant sees none of it; bad ranges are a 400 with a message, never a 500.
func TestAnalyticsShowTopRefusedNearAndShadowKeysAndExportCSV(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		e := newEnv(t, onDatabase(url))
		e.operator()
		acme, other := e.tenant("acme"), e.tenant("other")
		ctx := context.Background()
		three := limiter.Definition{Kind: limiter.TokenBucket, Rate: 3, Period: 86_400_000}
		if _, _, err := e.engine.PutDefinition(ctx, acme.ID, "api", three, nil); err != nil {
			t.Fatal(err)
		}
		shadow := three
		shadow.Mode = limiter.Shadow
		if _, _, err := e.engine.PutDefinition(ctx, acme.ID, "beta", shadow, nil); err != nil {
			t.Fatal(err)
		}
		c := e.login(opEmail, opPassword)

		empty := c.get(tpath(acme, "/analytics"))
		wantStatus(t, empty, http.StatusOK)
		d := empty.doc(t)
		if d.Find("#no-data").Length() != 1 || d.Find("#top-refused .empty").Length() != 1 {
			t.Fatalf("before any decision the page does not say no data yet:\n%s", empty.body)
		}

		for range 5 {
			e.consume(acme, "api", "alice", 1) // 3 admitted (the third leaves 0: near), 2 refused
		}
		for range 4 {
			e.consume(acme, "api", "bob", 1) // 3 admitted, 1 refused
		}
		for range 4 {
			e.consume(acme, "beta", "carol", 1) // the third leaves 0 (near); the fourth would have been refused
		}
		check := func(when string) {
			t.Helper()
			d := c.get(tpath(acme, "/analytics?range=day")).doc(t)
			if got, want := strings.Join(topRows(d, "top-refused"), "; "), "api | alice | 2; api | bob | 1"; got != want {
				t.Fatalf("%s: top refused keys %q, want %q", when, got, want)
			}
			if got, want := strings.Join(topRows(d, "top-near"), "; "), "api | alice | 1; api | bob | 1; beta | carol | 1"; got != want {
				t.Fatalf("%s: keys near their limit %q, want %q", when, got, want)
			}
			if got, want := strings.Join(topRows(d, "top-shadow"), "; "), "beta | carol | 1"; got != want {
				t.Fatalf("%s: shadow would-be refusals %q, want %q", when, got, want)
			}
			if d.Find("#no-data").Length() != 0 || d.Find("#analytics-panel figure.chart").Length() != 2 {
				t.Fatalf("%s: the panel lacks its two charts", when)
			}
		}
		check("before a flush")
		if err := e.usage.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		check("after a flush")

		// One limit: its keys only, without the limit column; the poll renders the same panel.
		frag := c.get(tpath(acme, "/analytics/panel?range=hour&limit=beta"))
		wantStatus(t, frag, http.StatusOK)
		if !strings.HasPrefix(strings.TrimSpace(frag.body), `<div id="analytics-panel"`) || !strings.Contains(frag.body, `hx-trigger="every 10s"`) {
			t.Fatalf("the poll is not the self-refreshing panel: %.200s", frag.body)
		}
		fd := frag.doc(t)
		if got := strings.Join(topRows(fd, "top-shadow"), "; "); got != "carol | 1" {
			t.Fatalf("beta's shadow keys %q", got)
		}
		if fd.Find("#top-refused tbody tr").Length() != 0 {
			t.Fatal("beta shows api's refused keys")
		}

		keys := readCSV(t, c.get(tpath(acme, "/analytics/keys.csv?range=week")))
		want := [][]string{{"kind", "limit", "key", "decisions", "overcount"},
			{"refused", "api", "alice", "2", "0"}, {"refused", "api", "bob", "1", "0"},
			{"near", "api", "alice", "1", "0"}, {"near", "api", "bob", "1", "0"}, {"near", "beta", "carol", "1", "0"}, {"shadow", "beta", "carol", "1", "0"}}
		if len(keys) != len(want) {
			t.Fatalf("keys CSV %q, want %q", keys, want)
		}
		for i := range want {
			if strings.Join(keys[i], ",") != strings.Join(want[i], ",") {
				t.Fatalf("keys CSV row %d: %q, want %q", i, keys[i], want[i])
			}
		}
		ratio := readCSV(t, c.get(tpath(acme, "/analytics/ratio.csv?range=hour&limit=api")))
		last := ratio[len(ratio)-1]
		if len(ratio) != 61 || strings.Join(last[1:], ",") != "6,3,0,0.3333" {
			t.Fatalf("ratio CSV: %d rows, last %q; want 60 minutes and 6 allowed, 3 refused (ratio 0.3333) in the last", len(ratio), last)
		}
		// A would-be refusal was decided too (and admitted): it counts among the decisions, so
		// that a shadow-only limit is not "0 decisions" and the ratio is of every decision.
		all := readCSV(t, c.get(tpath(acme, "/analytics/ratio.csv?range=hour")))
		if last := all[len(all)-1]; strings.Join(last[1:], ",") != "9,3,1,0.2308" {
			t.Fatalf("ratio CSV of every limit: last %q; want 9 allowed, 3 refused, 1 shadow_refused (3 of 13: 0.2308)", last)
		}
		var summary string
		c.get(tpath(acme, "/analytics?range=hour&limit=beta")).doc(t).Find("#analytics-panel svg[aria-label]").Each(func(_ int, s *goquery.Selection) {
			summary += s.AttrOr("aria-label", "") + "\n"
		})
		if !strings.Contains(summary, "0.0 % of 4 decisions refused overall") {
			t.Fatalf("beta's refusal chart: %q; want 0.0 %% of its 4 decisions", summary)
		}

		od := c.get(tpath(other, "/analytics?range=week")).doc(t)
		if od.Find("#no-data").Length() != 1 || od.Find("tbody tr").Length() != 0 {
			t.Fatal("another tenant sees acme's analytics")
		}
		bad := c.get(tpath(acme, "/analytics?range=year"))
		wantStatus(t, bad, http.StatusBadRequest)
		if bad.doc(t).Find("#analytics-error").Length() != 1 {
			t.Fatal("an unknown range shows no message")
		}
		both := c.get(tpath(acme, "/analytics?range=year&limit=%20bad"))
		wantStatus(t, both, http.StatusBadRequest)
		if msg := text(both.doc(t), "#analytics-error"); !strings.Contains(msg, "range") || !strings.Contains(msg, "limit") {
			t.Fatalf("a bad range and a bad limit: %q; want both named", msg)
		}
		wantStatus(t, c.get(tpath(acme, "/analytics/keys.csv?limit=%20bad")), http.StatusBadRequest)
		// A CSV shows no fallback: its refusal says what to ask, not what it would show.
		for _, csv := range []string{"keys.csv", "ratio.csv"} {
			r := c.get(tpath(acme, "/analytics/"+csv+"?range=1h"))
			wantStatus(t, r, http.StatusBadRequest)
			if strings.Contains(r.body, "showing") || !strings.Contains(r.body, "use hour, day or week") {
				t.Errorf("%s with an unknown range: %q; want it to say the ranges, not what it shows", csv, r.body)
			}
			// A pair Go's query parser cannot decode was dropped, and the second of two values
			// ignored: the export fell back to the last hour of every limit and answered 200.
			for _, q := range []string{"range=week%zz", "range=hour&limit=a%zzb", "range=week&limit=single;x", "range=day&range=week", "limit=api&limit=x"} {
				r := c.get(tpath(acme, "/analytics/"+csv+"?"+q))
				wantStatus(t, r, http.StatusBadRequest)
				if !strings.Contains(r.body, "not well-formed") {
					t.Errorf("%s?%s: %q; want it to say the query is not well-formed", csv, q, r.body)
				}
			}
		}
		wantStatus(t, c.get(tpath(acme, "/analytics?range=week%zz")), http.StatusBadRequest)
	})
}
