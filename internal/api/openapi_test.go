package api_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/api"
)

// openAPIPath turns a gin route path (/v1/limits/:name) into OpenAPI form (/v1/limits/{name}).
func openAPIPath(ginPath string) string {
	parts := strings.Split(ginPath, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, ":") || strings.HasPrefix(p, "*") {
			parts[i] = "{" + p[1:] + "}"
		}
	}
	return strings.Join(parts, "/")
}

const jwksPath = "/.well-known/jwks.json"

func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Info    struct{ Title, Version string }       `json:"info"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPIDocument, &doc); err != nil {
		t.Fatalf("api.OpenAPIDocument is not JSON: %v", err)
	}
	if doc.OpenAPI != "3.1.0" || doc.Info.Title == "" || doc.Info.Version == "" {
		t.Fatalf("openapi %q, info %+v: want 3.1.0 with a title and version", doc.OpenAPI, doc.Info)
	}
	httpMethods := map[string]bool{"get": true, "put": true, "post": true, "delete": true, "patch": true, "head": true, "options": true, "trace": true}
	documented := map[string]bool{}
	for path, item := range doc.Paths {
		for method := range item {
			if httpMethods[method] {
				documented[strings.ToUpper(method)+" "+path] = true
			}
		}
	}

	h := newHarness(t, sqliteURL(t))
	registered := map[string]bool{}
	for _, ri := range apiRoutes(t, h.router) {
		registered[ri.Method+" "+openAPIPath(ri.Path)] = true
	}
	// The JWK set is the API's too, though outside /v1 where JWK sets are looked for.
	for _, ri := range h.router.Routes() {
		if ri.Path == jwksPath {
			registered[ri.Method+" "+ri.Path] = true
		}
	}
	var undocumented, phantom []string
	for r := range registered {
		if !documented[r] {
			undocumented = append(undocumented, r)
		}
	}
	for r := range documented {
		if !registered[r] {
			phantom = append(phantom, r)
		}
	}
	slices.Sort(undocumented)
	slices.Sort(phantom)
	if len(undocumented) > 0 {
		t.Errorf("routes missing from openapi.json: %v", undocumented)
	}
	if len(phantom) > 0 {
		t.Errorf("openapi.json documents routes that are not registered: %v", phantom)
	}
}
