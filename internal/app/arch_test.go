package app_test

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sluice-dev/sluice/"

// allowedImports is the package map of docs/architecture.md as code: the project packages each
// package may import (non-test files). Dependencies point inward: surfaces (api, ui, demo) never
// import each other, domain packages never import a surface, and only the composition root
// (internal/app) and the command line see everything. A new package must be added here.
var allowedImports = map[string][]string{
	"internal/apperr":             {},
	"internal/config":             {"internal/strictjson"},
	"internal/loop":               {},
	"internal/strictjson":         {},
	"internal/hostname":           {},
	"internal/procs":              {},
	"internal/httpserver":         {},
	"internal/limiter/algo":       {},
	"internal/mail":               {},
	"migrations":                  {},
	"web":                         {},
	"internal/db":                 {"internal/apperr", "migrations"},
	"internal/limiter":            {"internal/apperr", "internal/db", "internal/limiter/algo"},
	"internal/tenants":            {"internal/apperr", "internal/db", "internal/hostname", "internal/loop"},
	"internal/captcha":            {"internal/apperr", "internal/db", "internal/loop", "internal/strictjson"},
	"internal/usage":              {"internal/db", "internal/loop"},
	"internal/webhooks":           {"internal/apperr", "internal/db", "internal/hostname", "internal/limiter", "internal/loop"},
	"internal/metrics":            {"internal/db"},
	"internal/api":                {"internal/apperr", "internal/captcha", "internal/db", "internal/httpserver", "internal/limiter", "internal/limiter/algo", "internal/strictjson", "internal/tenants", "internal/webhooks"},
	"internal/ui":                 {"internal/apperr", "internal/captcha", "internal/httpserver", "internal/limiter", "internal/limiter/algo", "internal/mail", "internal/strictjson", "internal/tenants", "internal/usage", "internal/webhooks"},
	"internal/demo":               {"internal/apperr", "internal/httpserver", "internal/limiter", "internal/tenants"},
	"internal/envoyrls":           {"internal/apperr", "internal/limiter", "internal/tenants"},
	"internal/app":                {"*"},
	"internal/app/apptest":        {"internal/app", "internal/config"},
	"internal/testkit":            {"internal/db"},
	"internal/testkit/withpg":     {"internal/testkit"},
	"internal/testkit/testreport": {},
	"cmd/app":                     {"internal/app", "internal/config", "internal/procs", "internal/tenants"},
	"cmd/bench":                   {"*"},
}

// testOnly are imported by tests and the benchmark only, never by the server.
var testOnly = []string{"internal/testkit", "internal/app/apptest"}

func TestDependenciesPointInward(t *testing.T) {
	root := filepath.Join("..", "..")
	found := map[string]bool{}
	for _, top := range []string{"internal", "cmd", "migrations", "web"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			pkg := filepath.ToSlash(rel)
			found[pkg] = true
			allowed, known := allowedImports[pkg]
			if !known {
				t.Errorf("%s is not in the package map: add it to allowedImports and docs/architecture.md", pkg)
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				dep, ok := strings.CutPrefix(strings.Trim(imp.Path.Value, `"`), module)
				if !ok {
					continue
				}
				if !slices.Contains(allowed, "*") && !slices.Contains(allowed, dep) {
					t.Errorf("%s imports %s, which the package map does not allow", path, dep)
				}
				if slices.Contains(testOnly, dep) && !strings.HasPrefix(pkg, "cmd/bench") && !slices.Contains(testOnly, pkg) && pkg != "internal/testkit/withpg" {
					t.Errorf("%s imports the test-only package %s", path, dep)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for pkg := range allowedImports {
		if !found[pkg] {
			t.Errorf("the package map names %s, which has no Go files", pkg)
		}
	}
}

// otherModules are the package map's rows that are modules or packages of their own, outside
// this module's import rules.
var otherModules = []string{"client/go", "client/gin", "examples", "client/typescript"}

// TestArchitectureDocMatchesThePackageMap reads the package map table of docs/architecture.md
// and checks it against allowedImports: a row for every package, and each row's "may import"
// column naming exactly the packages allowedImports allows ("everything" for "*").
func TestArchitectureDocMatchesThePackageMap(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The short names the table uses: "apperr" for internal/apperr, "migrations" as it is.
	resolve := func(name string) string {
		if _, ok := allowedImports["internal/"+name]; ok {
			return "internal/" + name
		}
		return name
	}
	_, section, _ := strings.Cut(string(doc), "\n## Package map\n")
	section, _, _ = strings.Cut(section, "\n## ")
	described := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue // not a row of the package map
		}
		mayImport := strings.TrimSpace(cells[3])
		var listed []string
		switch {
		case mayImport == "everything":
			listed = []string{"*"}
		case strings.HasPrefix(mayImport, "nothing"):
		default:
			for _, name := range backticked(mayImport) {
				listed = append(listed, resolve(name))
			}
		}
		slices.Sort(listed)
		for _, pkg := range backticked(cells[1]) {
			if slices.Contains(otherModules, pkg) {
				continue
			}
			allowed, known := allowedImports[pkg]
			if !known {
				t.Errorf("docs/architecture.md has a row for %s, which allowedImports does not know", pkg)
				continue
			}
			described[pkg] = true
			want := slices.Sorted(slices.Values(allowed))
			if !slices.Equal(listed, want) {
				t.Errorf("docs/architecture.md says %s may import %v; allowedImports says %v", pkg, listed, want)
			}
		}
	}
	for pkg := range allowedImports {
		if !described[pkg] {
			t.Errorf("docs/architecture.md's package map has no row for %s", pkg)
		}
	}
}

// backticked returns the `quoted` names in s, in order.
func backticked(s string) []string {
	var names []string
	for {
		_, rest, ok := strings.Cut(s, "`")
		if !ok {
			return names
		}
		name, after, ok := strings.Cut(rest, "`")
		if !ok {
			return names
		}
		names = append(names, name)
		s = after
	}
}

// TestLimitMathIsPure checks what the pure package pulls in, transitively: nothing of the
// project and no database library.
func TestLimitMathIsPure(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"internal/limiter/algo").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == module+"internal/limiter/algo" {
			continue
		}
		if strings.HasPrefix(dep, module) || strings.Contains(dep, "gorm") || strings.Contains(dep, "pgx") || strings.Contains(dep, "sqlite") || strings.Contains(dep, "database/sql") {
			t.Errorf("internal/limiter/algo depends on %s", dep)
		}
	}
}
