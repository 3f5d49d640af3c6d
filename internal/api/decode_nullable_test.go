package api

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestNullableMembersAreTheDocuments keeps nullableMembers (the request members that take an
// explicit null) equal to the members the document's request bodies type with "null" (or
// "nullable": true): every other member's null is refused, so a member made nullable in the
// document and not here would be refused, and one here and not in the document accepted.
func TestNullableMembersAreTheDocuments(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(OpenAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	// The Go type each request schema with a nullable member is decoded into.
	goTypes := map[string]reflect.Type{"OverrideRequest": reflect.TypeFor[OverrideBody]()}

	found := map[string][]string{} // schema name → its nullable members
	seen := map[string]bool{}
	var walk func(s any, owner string)
	walk = func(s any, owner string) {
		switch v := s.(type) {
		case []any:
			for _, x := range v {
				walk(x, owner)
			}
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				name := strings.TrimPrefix(ref, "#/components/schemas/")
				if !seen[name] {
					seen[name] = true
					walk(schemas[name], name)
				}
			}
			if props, ok := v["properties"].(map[string]any); ok {
				for member, p := range props {
					if isNullableSchema(p) {
						found[owner] = append(found[owner], member)
					}
				}
			}
			for k, x := range v {
				if k != "$ref" {
					walk(x, owner)
				}
			}
		}
	}
	for path, item := range doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			o, _ := op.(map[string]any) // "parameters" is a list
			if rb, ok := o["requestBody"]; ok {
				walk(rb, method+" "+path)
			}
		}
	}
	if len(found) == 0 {
		t.Fatal("no request member of the document is nullable; expected at least OverrideRequest.expiresAt")
	}
	want := map[reflect.Type][]string{}
	for owner, members := range found {
		typ, ok := goTypes[owner]
		if !ok {
			t.Errorf("%s has the nullable members %v, but names no Go type here (goTypes) nor in nullableMembers", owner, members)
			continue
		}
		want[typ] = members
	}
	for typ, members := range want {
		if got := slices.Sorted(slices.Values(nullableMembers[typ])); !slices.Equal(got, slices.Sorted(slices.Values(members))) {
			t.Errorf("nullableMembers[%v] = %v, want the document's %v", typ, got, members)
		}
	}
	for typ, members := range nullableMembers {
		if _, ok := want[typ]; !ok {
			t.Errorf("nullableMembers[%v] = %v, which the document does not make nullable", typ, members)
		}
	}
}

// isNullableSchema reports whether a property schema takes null: "type" null or with null, a
// "nullable": true (OpenAPI 3.0), or a oneOf/anyOf with a null branch.
func isNullableSchema(s any) bool {
	m, ok := s.(map[string]any)
	if !ok {
		return false
	}
	switch t := m["type"].(type) {
	case string:
		if t == "null" {
			return true
		}
	case []any:
		if slices.Contains(t, any("null")) {
			return true
		}
	}
	if n, _ := m["nullable"].(bool); n {
		return true
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		if branches, ok := m[k].([]any); ok && slices.ContainsFunc(branches, isNullableSchema) {
			return true
		}
	}
	return false
}
