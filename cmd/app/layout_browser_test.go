package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// overflowing lists the elements of the page that reach past the viewport's right edge (a page
// that makes a phone scroll sideways), as tag.class, at most 10.
const overflowing = `(() => {
	const w = document.documentElement.clientWidth;
	const out = [];
	for (const e of document.querySelectorAll('body *')) {
		const r = e.getBoundingClientRect();
		if (r.width > 0 && r.right > w + 1 && getComputedStyle(e).position !== 'fixed') {
			let inScroller = false;
			for (let p = e.parentElement; p; p = p.parentElement) {
				const o = getComputedStyle(p).overflowX;
				if (o === 'auto' || o === 'scroll' || o === 'hidden') { inScroller = true; break; }
			}
			if (!inScroller) out.push(e.tagName.toLowerCase() + '.' + (e.className || '') + ' (' + Math.round(r.right) + 'px)');
		}
		if (out.length >= 10) break;
	}
	const page = document.documentElement.scrollWidth;
	if (page > w + 1) out.push('the page itself (' + page + 'px)');
	return out.join(', ');
})()`

// smallestChartLabel is the rendered size, in CSS px, of the smallest text of the page's usage
// charts (its font size in SVG units times the scale the SVG is drawn at), and how many texts
// were measured: "count smallest", or "" without a chart.
const smallestChartLabel = `(() => {
	let least = Infinity, n = 0;
	for (const svg of document.querySelectorAll('svg.chart-svg')) {
		const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
		for (const t of svg.querySelectorAll('text')) {
			least = Math.min(least, parseFloat(getComputedStyle(t).fontSize) * scale);
			n++;
		}
	}
	return n === 0 ? '' : n + ' ' + least.toFixed(2);
})()`

// chartsHidingNow counts the charts whose scrolling box, as the page opens, does not show their
// "now" end (the latest buckets).
const chartsHidingNow = `(() => {
	let n = 0;
	for (const box of document.querySelectorAll('.chart-scroll')) {
		const now = Array.from(box.querySelectorAll('text')).find(t => t.textContent.startsWith('now'));
		if (!now) continue;
		const b = box.getBoundingClientRect(), r = now.getBoundingClientRect();
		if (r.right > b.right + 1 || r.left < b.left - 1) n++;
	}
	return String(n);
})()`

// minChartLabelPx is the smallest chart label a phone may show.
const minChartLabelPx = 9

// untruncated lists where the page shows one of needles (long names) in the text of an element
// that is inside neither a .truncate box titled with the whole value nor a .breakable one, or
// whose box is wider than the viewport: a long name is cut short on one line and shows in full
// on hover, or, where it must be read whole (a name to type to confirm), wraps anywhere. The
// options of a select and the contents of a textarea are not checked.
func untruncated(needles ...string) string {
	js, _ := json.Marshal(needles)
	return `(() => {
	const needles = ` + string(js) + `;
	const w = document.documentElement.clientWidth;
	const out = [];
	for (const e of document.querySelectorAll('body *')) {
		if (e.closest('option, textarea, script')) continue;
		const own = Array.from(e.childNodes).filter(n => n.nodeType === Node.TEXT_NODE).map(n => n.textContent).join('');
		for (const n of needles) {
			if (!own.includes(n) || e.getBoundingClientRect().width === 0) continue;
			const box = e.closest('.truncate, .breakable');
			const where = e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className && typeof e.className === 'string' ? '.' + e.className.trim().replace(/ +/g, '.') : '');
			if (!box) out.push(where + ' shows ' + n.slice(0, 20) + '… untruncated');
			else if (box.matches('.truncate') && !(box.title || '').includes(n)) out.push(where + ' has no title with ' + n.slice(0, 20) + '…');
			else if (box.getBoundingClientRect().width > w + 1) out.push(where + ' is ' + Math.round(box.getBoundingClientRect().width) + 'px wide');
		}
		if (out.length >= 10) break;
	}
	return out.join(', ');
})()`
}

// TestDashboardPagesFitAPhoneAndADesktop: at 375 px (a phone) and 1280 px wide, no page of the
// dashboard has an element wider than the viewport, with the longest names allowed: a tenant and
// a limit named with 128 characters, an API key labelled with 100, a 200-byte key with state
// and refusals, and a webhook endpoint with a long URL and a delivery. Tables and charts may
// scroll inside their own box, never the page; each long name is cut short with its full value
// in a tooltip; a chart's labels stay readable (at least 9 CSS px) at both widths, and a chart
// that scrolls opens at its latest buckets.
func TestDashboardPagesFitAPhoneAndADesktop(t *testing.T) {
	chromium := chromiumPath(t, "The dashboard's layout at 375 and 1280 px")
	hooks := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer hooks.Close()
	const email, password = "layout@example.com", "a long enough password"
	srv := startTestServer(t, map[string]string{"SLUICE_ADMIN_EMAIL": email, "SLUICE_ADMIN_PASSWORD": password,
		"WEBHOOK_ALLOW_PRIVATE": "true"}, false) // the receiver is on 127.0.0.1
	ctx := newBrowser(t, chromium)
	ctx, cancel := context.WithTimeout(ctx, 180*time.Second)
	defer cancel()
	dr := driver{t, ctx}
	step, read := dr.step, dr.read
	long := strings.Repeat("long-tenant-name.", 7) + "x1234567890ab"[:128-7*17]
	// Names with no place to break a line: "_" and "." between letters allow none.
	limit := strings.Repeat("long_limit_name.", 8)
	label := strings.Repeat("production_backend_", 6)[:100]
	key := "customer_" + strings.Repeat("0123456789abcdef", 12)
	hookURL := hooks.URL + "/sluice/" + strings.Repeat("webhook_receiver_", 6)
	if len(long) != 128 || len(limit) != 128 || len(label) != 100 || len(key) != 201 {
		t.Fatalf("name lengths %d, %d, %d, %d", len(long), len(limit), len(label), len(key))
	}
	step("desktop viewport", chromedp.EmulateViewport(1280, 900))
	logIn(dr, srv.base, email, password)
	step("create a tenant with the longest name",
		chromedp.SendKeys("#name", long),
		chromedp.Submit("#name"),
		chromedp.WaitVisible("#new-limit"),
	)
	tenantPath := read("the tenant's path", chromedp.Evaluate[string](`location.pathname.replace(/\/limits$/, '')`))
	limitPath := tenantPath + "/limits/" + limit
	step("create a limit with the longest name",
		chromedp.Navigate(srv.base+tenantPath+"/new-limit"),
		chromedp.WaitVisible("#name"),
		chromedp.SetValue("#name", limit),
		chromedp.SetValue("#rate", "10"),
		chromedp.SetValue("#period", "1m"),
		chromedp.Submit("#name"),
		chromedp.WaitVisible("#edit-limit"),
	)
	step("create an API key with the longest label",
		chromedp.Navigate(srv.base+tenantPath+"/keys"),
		chromedp.WaitVisible("#label"),
		chromedp.SetValue("#label", label),
		chromedp.Submit("#label"),
		chromedp.WaitVisible("#new-secret"),
	)
	secret := read("the key's secret", chromedp.Value("#new-secret"))
	for i := range 12 { // 10 a minute: the last two are refused, so the key is a top refused key
		if code, _ := v1(t, srv.base, secret, "/v1/limits/"+limit+"/limit", `{"key":"`+key+`"}`); code != http.StatusOK {
			t.Fatalf("decision %d: %d", i, code)
		}
	}
	step("wait for the analytics to show the decisions",
		chromedp.Navigate(srv.base+tenantPath+"/analytics"),
		chromedp.WaitVisible("#analytics-panel svg.chart-svg"),
		chromedp.WaitVisible(`#top-refused tbody tr td.key`),
	)
	step("create a webhook endpoint with a long URL",
		chromedp.Navigate(srv.base+tenantPath+"/webhooks"),
		chromedp.WaitVisible("#url"),
		chromedp.SetValue("#url", hookURL),
		chromedp.Submit("#url"),
		chromedp.WaitVisible("#new-secret"),
	)
	hookPath := read("the endpoint's page", chromedp.Evaluate[string](`new URL(document.querySelector('#webhooks tbody tr a').href).pathname`))
	step("send the endpoint a test event",
		chromedp.Navigate(srv.base+hookPath),
		chromedp.WaitVisible("#send-test"),
		chromedp.Click("#send-test"),
		chromedp.WaitVisible("#deliveries tbody tr"),
	)
	pages := []string{"/tenants", tenantPath + "/limits", limitPath, limitPath + "/edit", limitPath + "/reset-all", limitPath + "/delete",
		tenantPath + "/new-limit", tenantPath + "/keys", tenantPath + "/captcha", tenantPath + "/webhooks", hookPath, tenantPath + "/audit",
		tenantPath + "/analytics", tenantPath + "/plan", "/audit", tenantPath + "/members", "/users", "/account", tenantPath + "/manage"}
	for _, width := range []int64{375, 1280} {
		charts := 0
		for _, p := range pages {
			step("open "+p, chromedp.EmulateViewport(width, 800), chromedp.Navigate(srv.base+p), chromedp.WaitVisible("main"))
			if wide := read("measure "+p, chromedp.Evaluate[string](overflowing)); wide != "" {
				t.Errorf("%d px, %s: wider than the viewport: %s", width, p, wide)
			}
			if cut := read("look for long names on "+p, chromedp.Evaluate[string](untruncated(long, limit, label, key, hookURL))); cut != "" {
				t.Errorf("%d px, %s: %s", width, p, cut)
			}
			if labels := read("measure the chart labels of "+p, chromedp.Evaluate[string](smallestChartLabel)); labels != "" {
				charts++
				var n int
				var px float64
				if _, err := fmt.Sscan(labels, &n, &px); err != nil {
					t.Fatalf("chart labels %q: %v", labels, err)
				}
				if px < minChartLabelPx {
					t.Errorf("%d px, %s: chart labels drawn at %.2f CSS px, want at least %d", width, p, px, minChartLabelPx)
				}
				if n := read("look for the charts' now on "+p, chromedp.Evaluate[string](chartsHidingNow)); n != "0" {
					t.Errorf("%d px, %s: %s charts open scrolled away from now", width, p, n)
				}
			}
		}
		if charts < 3 { // the limits list, the limit's page, the analytics
			t.Errorf("%d px: only %d pages had a chart to measure", width, charts)
		}
	}
}
