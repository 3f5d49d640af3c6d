package main

import (
	"context"
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

// TestDashboardPagesFitAPhoneAndADesktop: at 375 px (a phone) and 1280 px wide, no page of the
// dashboard has an element wider than the viewport, with a tenant named with the longest name
// allowed (128 characters) and a limit, a key and a webhook to list. Tables may scroll inside
// their own box, never the page.
func TestDashboardPagesFitAPhoneAndADesktop(t *testing.T) {
	chromium := chromiumPath(t, "The dashboard's layout at 375 and 1280 px")
	const email, password = "layout@example.com", "a long enough password"
	srv := startTestServer(t, map[string]string{"SLUICE_ADMIN_EMAIL": email, "SLUICE_ADMIN_PASSWORD": password}, false)
	ctx := newBrowser(t, chromium)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	dr := driver{t, ctx}
	step, read := dr.step, dr.read
	long := strings.Repeat("long-tenant-name.", 7) + "x1234567890ab"[:128-7*17]
	step("log in",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(srv.base+"/login"),
		chromedp.WaitVisible("#password"),
		chromedp.SendKeys("#email", email),
		chromedp.SendKeys("#password", password),
		chromedp.Submit("#password"),
		chromedp.WaitVisible("#new-tenant"),
	)
	step("create a tenant with the longest name",
		chromedp.SendKeys("#name", long),
		chromedp.Submit("#name"),
		chromedp.WaitVisible("#new-limit"),
	)
	tenantPath := read("the tenant's path", chromedp.Evaluate[string](`location.pathname.replace(/\/limits$/, '')`))
	step("create a limit",
		chromedp.Navigate(srv.base+tenantPath+"/new-limit"),
		chromedp.WaitVisible("#name"),
		chromedp.SendKeys("#name", "a-limit-with-a-rather-long-name.for.the.layout"),
		chromedp.SendKeys("#rate", "10"),
		chromedp.SendKeys("#period", "60000"),
		chromedp.Submit("#name"),
		chromedp.WaitVisible("#edit-limit"),
	)
	step("create a key",
		chromedp.Navigate(srv.base+tenantPath+"/keys"),
		chromedp.WaitVisible("#label"),
		chromedp.SendKeys("#label", "a key with a label long enough to wrap somewhere on a phone"),
		chromedp.Submit("#label"),
		chromedp.WaitVisible("#new-secret"),
	)
	pages := []string{"/tenants", tenantPath + "/limits", tenantPath + "/limits/a-limit-with-a-rather-long-name.for.the.layout",
		tenantPath + "/new-limit", tenantPath + "/keys", tenantPath + "/captcha", tenantPath + "/webhooks", tenantPath + "/audit", tenantPath + "/analytics", tenantPath + "/plan", "/audit",
		tenantPath + "/members", "/users", "/account", tenantPath + "/manage"}
	for _, width := range []int64{375, 1280} {
		for _, p := range pages {
			step("open "+p, chromedp.EmulateViewport(width, 800), chromedp.Navigate(srv.base+p), chromedp.WaitVisible("main"))
			if wide := read("measure "+p, chromedp.Evaluate[string](overflowing)); wide != "" {
				t.Errorf("%d px, %s: wider than the viewport: %s", width, p, wide)
			}
		}
	}
}
