package api_test

import (
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// recipeBlock finds the runnable shell blocks of a recipe: ```sh fences whose first line is a
// "# recipe:" comment.
var recipeBlock = regexp.MustCompile("(?s)```sh\n(# recipe:[^\n]*\n.*?)```")

// TestLLMRecipeRunsAsWritten runs the shell blocks of docs/recipes/llm-tokens.md, as written,
// against the real server (curl, bash -e: any failed request or missing replay fails it), and
// checks the budgets they leave: one request and the 1,234 tokens used, the rest refunded.
func TestLLMRecipeRunsAsWritten(t *testing.T) {
	doc, err := os.ReadFile("../../docs/recipes/llm-tokens.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := recipeBlock.FindAllStringSubmatch(string(doc), -1)
	if len(blocks) != 2 {
		t.Fatalf("found %d runnable blocks in the recipe, want 2 (definitions, one call)", len(blocks))
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	eachDB(t, func(t *testing.T, h *harness) {
		a := h.newTenant(t, "acme")
		var out strings.Builder
		for _, b := range blocks {
			cmd := exec.Command("bash", "-euo", "pipefail", "-c", b[1])
			cmd.Env = append(os.Environ(), "SLUICE="+h.url, "SLUICE_KEY="+a.key)
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("recipe block %q: %v\n%s", strings.SplitN(b[1], "\n", 2)[0], err, out.String())
			}
		}
		if !strings.Contains(out.String(), `"value":1998766`) {
			t.Fatalf("the recipe's last line did not show the month's 1998766 tokens left:\n%s", out.String())
		}
		month := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/llm-month/value?key=user-42", a.key, nil), http.StatusOK)
		if v := month["value"].(float64); v != 2_000_000-1234 {
			t.Fatalf("monthly budget left %v, want %d (the tokens used, once)", v, 2_000_000-1234)
		}
		rpm := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/llm-rpm/value?key=user-42", a.key, nil), http.StatusOK)
		if v := rpm["value"].(float64); v < 59 || v >= 60 {
			t.Fatalf("requests per minute left %v, want 59 and a little refill (one request, the retry replayed)", v)
		}
	})
}
