package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"
)

// The readable API documentation at /docs: the OpenAPI document rendered on the server as one
// HTML page, with no JavaScript and no third-party viewer, so it works under the strict
// Content-Security-Policy and can never disagree with /v1/openapi.json (it is made from it).

// docsPage is built once from OpenAPIDocument.
var docsPage = mustRenderDocs(OpenAPIDocument)

func (s *Server) docs(c *gin.Context) {
	c.Header("Cache-Control", "no-cache")
	c.Data(http.StatusOK, "text/html; charset=utf-8", docsPage)
}

type docsVM struct {
	Title, Version, Description string
	Operations                  []docsOperation
	Schemas                     []docsSchema
}

type docsOperation struct {
	Method, Path, ID, Summary, Description string
	Parameters                             []docsField
	Body                                   string // schema name of the JSON body
	Responses                              []docsResponse
}

type docsResponse struct {
	Status, Description, Schema string
}

type docsField struct {
	Name, In, Type, Description string
	Required                    bool
}

type docsSchema struct {
	Name, Description string
	Fields            []docsField
}

// openAPIDoc is the part of the document the page shows.
type openAPIDoc struct {
	Info struct {
		Title, Version, Description string
	}
	Paths      map[string]map[string]json.RawMessage
	Components struct {
		Schemas map[string]schemaDoc
	}
}

type operationDoc struct {
	OperationID string `json:"operationId"`
	Summary     string
	Description string
	Parameters  []struct {
		Name, In, Description string
		Required              bool
		Schema                schemaDoc
	}
	RequestBody *struct {
		Content map[string]struct{ Schema schemaDoc }
	} `json:"requestBody"`
	Responses map[string]struct {
		Description string
		Content     map[string]struct{ Schema schemaDoc }
	}
}

type schemaDoc struct {
	Ref         string `json:"$ref"`
	Type        any
	Description string
	Enum        []any
	Required    []string
	Properties  map[string]schemaDoc
	Items       *schemaDoc
	AllOf       []schemaDoc `json:"allOf"`
	OneOf       []schemaDoc `json:"oneOf"`
}

// typeName describes a schema in a few words: a referenced schema's name, a type, an enum.
func (s schemaDoc) typeName() string {
	switch {
	case s.Ref != "":
		return strings.TrimPrefix(s.Ref, "#/components/schemas/")
	case len(s.Enum) > 0:
		var vals []string
		for _, v := range s.Enum {
			vals = append(vals, fmt.Sprint(v))
		}
		return "one of " + strings.Join(vals, ", ")
	case s.Items != nil:
		return "array of " + s.Items.typeName()
	case len(s.OneOf) > 0:
		var alts []string
		for _, o := range s.OneOf {
			alts = append(alts, o.typeName())
		}
		return strings.Join(alts, " or ")
	}
	switch t := s.Type.(type) {
	case string:
		return t
	case []any:
		var alts []string
		for _, x := range t {
			alts = append(alts, fmt.Sprint(x))
		}
		return strings.Join(alts, " or ")
	}
	return "object"
}

// fields lists a schema's properties, those of the schemas it is made of (allOf, a $ref to
// one) included.
func (s schemaDoc) fields(all map[string]schemaDoc, seen map[string]bool) []docsField {
	if s.Ref != "" {
		name := strings.TrimPrefix(s.Ref, "#/components/schemas/")
		if seen[name] {
			return nil
		}
		seen[name] = true
		return all[name].fields(all, seen)
	}
	var out []docsField
	for _, part := range s.AllOf {
		out = append(out, part.fields(all, seen)...)
	}
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	for _, n := range slices.Sorted(maps.Keys(s.Properties)) {
		p := s.Properties[n]
		out = append(out, docsField{Name: n, Type: p.typeName(), Description: p.Description, Required: required[n]})
	}
	return out
}

func mustRenderDocs(raw []byte) []byte {
	page, err := renderDocs(raw)
	if err != nil {
		panic(fmt.Sprintf("api: /docs from openapi.json: %v", err)) // the document is embedded: a bug
	}
	return page
}

func renderDocs(raw []byte) ([]byte, error) {
	var doc openAPIDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	vm := docsVM{Title: doc.Info.Title, Version: doc.Info.Version, Description: doc.Info.Description}
	for _, path := range slices.Sorted(maps.Keys(doc.Paths)) {
		for _, method := range []string{"get", "put", "post", "delete", "options"} {
			rawOp, ok := doc.Paths[path][method]
			if !ok {
				continue
			}
			var op operationDoc
			if err := json.Unmarshal(rawOp, &op); err != nil {
				return nil, fmt.Errorf("%s %s: %w", method, path, err)
			}
			o := docsOperation{Method: strings.ToUpper(method), Path: path, ID: op.OperationID, Summary: op.Summary, Description: op.Description}
			for _, p := range op.Parameters {
				o.Parameters = append(o.Parameters, docsField{Name: p.Name, In: p.In, Type: p.Schema.typeName(), Description: p.Description, Required: p.Required})
			}
			if op.RequestBody != nil {
				if c, ok := op.RequestBody.Content["application/json"]; ok {
					o.Body = c.Schema.typeName()
				}
			}
			for _, st := range slices.Sorted(maps.Keys(op.Responses)) {
				r := op.Responses[st]
				var schema string
				for _, c := range r.Content {
					schema = c.Schema.typeName()
				}
				o.Responses = append(o.Responses, docsResponse{Status: st, Description: r.Description, Schema: schema})
			}
			vm.Operations = append(vm.Operations, o)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(doc.Components.Schemas)) {
		s := doc.Components.Schemas[n]
		vm.Schemas = append(vm.Schemas, docsSchema{Name: n, Description: s.Description, Fields: s.fields(doc.Components.Schemas, map[string]bool{})})
	}
	var b bytes.Buffer
	if err := docsTemplate.Execute(&b, vm); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

var docsTemplate = template.Must(template.New("docs").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} {{.Version}}</title>
<link rel="stylesheet" href="/static/app.css">
</head>
<body>
<main class="container">
<h1>{{.Title}} <small class="muted">{{.Version}}</small></h1>
<p>{{.Description}}</p>
<p>Made from <a href="/v1/openapi.json">/v1/openapi.json</a>, the OpenAPI 3.1 document the tests check every response against.</p>
<h2>Routes</h2>
<ul>{{range .Operations}}<li><a href="#{{.ID}}"><code>{{.Method}} {{.Path}}</code></a> {{.Summary}}</li>{{end}}</ul>
{{range .Operations}}
<section class="card" id="{{.ID}}">
<h3><code>{{.Method}} {{.Path}}</code></h3>
<p>{{.Summary}}</p>{{if .Description}}<p>{{.Description}}</p>{{end}}
{{if .Parameters}}<table class="table compact"><thead><tr><th>parameter</th><th>in</th><th>type</th><th></th></tr></thead><tbody>
{{range .Parameters}}<tr><td><code>{{.Name}}</code></td><td>{{.In}}</td><td>{{.Type}}</td><td>{{if .Required}}required. {{end}}{{.Description}}</td></tr>{{end}}
</tbody></table>{{end}}
{{if .Body}}<p>Body: <a href="#schema-{{.Body}}">{{.Body}}</a></p>{{end}}
<table class="table compact"><thead><tr><th>status</th><th>meaning</th><th>body</th></tr></thead><tbody>
{{range .Responses}}<tr><td>{{.Status}}</td><td>{{.Description}}</td><td>{{.Schema}}</td></tr>{{end}}
</tbody></table>
</section>
{{end}}
<h2>Schemas</h2>
{{range .Schemas}}
<section class="card" id="schema-{{.Name}}">
<h3>{{.Name}}</h3>{{if .Description}}<p>{{.Description}}</p>{{end}}
{{if .Fields}}<table class="table compact"><thead><tr><th>member</th><th>type</th><th></th></tr></thead><tbody>
{{range .Fields}}<tr><td><code>{{.Name}}</code></td><td>{{.Type}}</td><td>{{if .Required}}required. {{end}}{{.Description}}</td></tr>{{end}}
</tbody></table>{{end}}
</section>
{{end}}
</main>
</body>
</html>
`))
