package api_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// recipeBlock finds the runnable shell blocks of a recipe: ```sh fences whose first line is a
// "# recipe:" comment.
var recipeBlock = regexp.MustCompile("(?s)```sh\n(# recipe:[^\n]*\n.*?)```")

// TestLLMRecipeRunsAsWritten runs the shell blocks of docs/recipes/llm-tokens.md, as written,
// against the real server (curl, bash -e: any failed request or missing replay fails it), and
// checks the budgets they leave for each version: with holds (user-7), one request and the
// 1,234 tokens used once (the hold and the settle retried, the failed call's hold released);
// with refunds (user-42), one request and the 1,234 tokens used, the rest refunded.
func TestLLMRecipeRunsAsWritten(t *testing.T) {
	doc, err := os.ReadFile("../../docs/recipes/llm-tokens.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := recipeBlock.FindAllStringSubmatch(string(doc), -1)
	if len(blocks) != 3 {
		t.Fatalf("found %d runnable blocks in the recipe, want 3 (definitions, one call with a hold, one call with refunds)", len(blocks))
	}
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("curl is required to run the LLM recipe on CI: %v", err)
		}
		t.Skipf("!!! SKIPPING the LLM recipe: curl is not installed (%v). Install it; CI=true turns this into a failure. !!!", err)
	}
	// The engine's clock stands still, so that the budgets the recipe leaves are exact however
	// slowly a busy machine runs it (a minute's bucket refills a request a second).
	frozen := time.Now()
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		h := startApp(t, url, app.Options{EngineNow: func() time.Time { return frozen }})
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
		if n := strings.Count(out.String(), `{"value":1998766,`); n != 2 {
			t.Fatalf("the last lines of the two versions showed the month's 1998766 tokens left %d times, want 2:\n%s", n, out.String())
		}
		if n := strings.Count(out.String(), `"charged":1234,"refunded":766`); n != 4 {
			t.Fatalf("the settle and its retry showed 1234 charged and 766 refunded on %d token limits, want 4 (2 limits, twice):\n%s", n, out.String())
		}
		for _, user := range []string{"user-7", "user-42"} {
			month := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/llm-month/value?key="+user, a.key, nil), http.StatusOK)
			if v := month["value"].(float64); v != 2_000_000-1234 {
				t.Fatalf("%s: monthly budget left %v, want %d (the tokens used, once)", user, v, 2_000_000-1234)
			}
			rpm := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/llm-rpm/value?key="+user, a.key, nil), http.StatusOK)
			if v := rpm["value"].(float64); v != 59 {
				t.Fatalf("%s: requests per minute left %v, want 59 (one request, the retry replayed, a failed call's hold released)", user, v)
			}
			tpm := requireJSON(t, h.send(t, http.MethodGet, "/v1/limits/llm-tpm/value?key="+user, a.key, nil), http.StatusOK)
			if v := tpm["value"].(float64); v != 90_000-1234 {
				t.Fatalf("%s: tokens per minute left %v, want 88766 (the tokens used, once)", user, v)
			}
		}
		stats, _, err := h.engine.OpenHolds(context.Background(), a.id, "llm-month", 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if stats.Open != 0 {
			t.Fatalf("%d holds left open by the recipe, want 0 (one settled, one released)", stats.Open)
		}
	})
}
