package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// radioLabels measures, in the browser, each label of a radio or checkbox group: how many boxes
// besides its input its flex layout makes (a bare text node or each inline element is a box of
// its own, which is how the labels broke: "Secret (", the code and the rest laid out as columns),
// and whether the input sits left of the text on its first line.
const radioLabels = `JSON.stringify([...document.querySelectorAll('fieldset.radios label')].map(l => {
	const input = l.querySelector('input');
	const rest = [...l.childNodes].filter(n => n !== input && !(n.nodeType === 3 && !n.textContent.trim()));
	const ir = input.getBoundingClientRect();
	const tr = rest.length && rest[0].getBoundingClientRect ? rest[0].getBoundingClientRect() : null;
	return {text: l.textContent.trim(), boxes: getComputedStyle(l).display.includes('flex') ? rest.length : 1,
		inputFirst: !!tr && ir.right <= tr.left, sameLine: !!tr && ir.top < tr.top + 20 && ir.bottom > tr.top};
}))`

// TestKeyKindRadiosAndPublishableKeyInChromium: the API key form's Kind radios render each as
// one input beside one run of text; a publishable key created on the captcha page is shown again
// after a reload, and the embed snippet keeps carrying it; the tenant's plan page lists its use.
func TestKeyKindRadiosAndPublishableKeyInChromium(t *testing.T) {
	chromium := chromiumPath(t, "The API key form's radios and the publishable key")
	srv := startTestServer(t, nil, true)
	ctx := newBrowser(t, chromium)
	ctx, cancel := context.WithTimeout(ctx, 75*time.Second)
	defer cancel()
	watchPage(t, ctx)
	dr := driver{t, ctx}
	step, read := dr.step, dr.read
	const password = "a long enough password"
	dr.setUpFirstOperator(srv.setupURL, "op@example.com", password)
	dr.createTenant("acme")
	step("keys page", chromedp.Click(`nav.tabs a[href$="/keys"]`), chromedp.WaitVisible("#new-key-form"))
	var labels []struct {
		Text                 string
		Boxes                int
		InputFirst, SameLine bool
	}
	if err := json.Unmarshal([]byte(read("radio labels", chromedp.Evaluate[string](radioLabels))), &labels); err != nil {
		t.Fatal(err)
	}
	if len(labels) != 2 {
		t.Fatalf("found %d Kind labels, want 2: %+v", len(labels), labels)
	}
	for _, l := range labels {
		if l.Boxes != 1 || !l.InputFirst || !l.SameLine {
			t.Errorf("label %q renders as %d boxes beside its radio (want 1), radio first %v, same line %v", l.Text, l.Boxes, l.InputFirst, l.SameLine)
		}
	}

	step("create a publishable key",
		chromedp.Click(`nav.tabs a[href$="/captcha"]`),
		chromedp.WaitVisible("#new-pk-form"),
		chromedp.SendKeys("#pk-label", "shop"),
		chromedp.Click("#create-pk"),
		chromedp.WaitVisible("#new-secret"),
	)
	pk := read("new key", chromedp.Value("#new-secret"))
	if !strings.HasPrefix(pk, "pk_live_") {
		t.Fatalf("new publishable key %q", pk)
	}
	step("reload the captcha page", chromedp.Click(`nav.tabs a[href$="/captcha"]`), chromedp.WaitVisible("#publishable-keys"))
	shown := read("listed key", chromedp.Evaluate[string](`(document.querySelector('#publishable-keys input.pk-value') || {value: ''}).value`))
	if shown != pk {
		t.Fatalf("after a reload the page shows the publishable key %q, want %q", shown, pk)
	}
	if snippet := read("snippet", chromedp.Text("#embed-snippet")); !strings.Contains(snippet, "pk="+pk+"&") {
		t.Fatalf("the snippet lost the publishable key after a reload: %q", snippet)
	}

	step("plan page", chromedp.Click(`nav.tabs a[href$="/plan"]`), chromedp.WaitVisible("#plan-usage"))
	if keys := read("keys row", chromedp.Text(`#plan-usage tr[data-quota="keys"]`)); !strings.Contains(keys, "1") || !strings.Contains(keys, "100") {
		t.Fatalf("the plan page's keys row %q: want 1 used of the default 100", keys)
	}
}
