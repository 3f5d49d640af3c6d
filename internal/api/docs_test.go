package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/api"
)

// TestDocsPageShowsEveryOperationOfTheDocument: /docs is made from the OpenAPI document, so every
// operation and schema the document has is on it; it needs no key and no script.
func TestDocsPageShowsEveryOperationOfTheDocument(t *testing.T) {
	h := newHarness(t, sqliteURL(t))
	res, err := http.Get(h.url + "/docs")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	page := string(body)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /docs: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if strings.Contains(page, "<script") || strings.Contains(page, "style=") {
		t.Fatal("/docs must work under the strict CSP: no scripts, no inline styles")
	}
	var doc struct {
		Paths      map[string]map[string]json.RawMessage
		Components struct{ Schemas map[string]json.RawMessage }
	}
	if err := json.Unmarshal(api.OpenAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	for path, ops := range doc.Paths {
		for method, raw := range ops {
			if method == "parameters" {
				continue
			}
			var op struct {
				OperationID string `json:"operationId"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			n++
			if !strings.Contains(page, `id="`+op.OperationID+`"`) || !strings.Contains(page, strings.ToUpper(method)+" "+path) {
				t.Errorf("/docs lacks %s %s (%s)", strings.ToUpper(method), path, op.OperationID)
			}
		}
	}
	for name := range doc.Components.Schemas {
		if !strings.Contains(page, `id="schema-`+name+`"`) {
			t.Errorf("/docs lacks the schema %s", name)
		}
	}
	if n < 15 {
		t.Fatalf("only %d operations in the document", n)
	}
}
