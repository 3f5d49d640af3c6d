package api_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
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

// readmeRoute is a route as README.md names it in backticks: one or more methods joined by "/",
// then a /v1 path with OpenAPI's {parameters}, perhaps with a query.
var readmeRoute = regexp.MustCompile("`((?:[A-Z]+/)*[A-Z]+) (/v1/[^`?\\s]*)[^`]*`")

// TestReadmeNamesEveryRoute checks that README.md, the contract beside the OpenAPI document,
// names every /v1 route the router registers (CORS preflights aside).
func TestReadmeNamesEveryRoute(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range readmeRoute.FindAllStringSubmatch(string(readme), -1) {
		for _, method := range strings.Split(m[1], "/") {
			named[method+" "+m[2]] = true
		}
	}
	h := newHarness(t, sqliteURL(t))
	var missing []string
	for _, ri := range apiRoutes(t, h.router) {
		if r := ri.Method + " " + openAPIPath(ri.Path); ri.Method != http.MethodOptions && !named[r] {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		t.Errorf("README.md does not name these routes (as `METHOD /v1/path`): %v", missing)
	}
}
