package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// The LLM budget recipe's Go version (docs/recipes/llm-tokens.md, "With holds"). The function
// below is the recipe's Go block, verbatim: TestLLMRecipeGoBlockIsThisCode keeps them equal and
// TestLLMRecipeWithTheGoClient runs it against the real server.

func llmCall(ctx context.Context, c *sluice.Client, user, call string, estimate float64) error {
	h, err := c.Hold(sluice.WithIdempotencyKey(ctx, call+"-hold"), []sluice.HoldItem{
		{Name: "llm-rpm", Key: user, Count: 1},
		{Name: "llm-tpm", Key: user, Count: estimate},
		{Name: "llm-month", Key: user, Count: estimate},
	}, 2*time.Minute)
	var problem *sluice.Error
	if errors.As(err, &problem) && problem.Status == http.StatusTooManyRequests {
		return errTryLater(problem.RetryAfter) // a limit or the tenant's plan refused: nothing held
	}
	if err != nil {
		return err // Sluice unreachable, or a mistake of ours
	}
	used, err := callModel(ctx) // the provider's reported total tokens
	if err != nil {
		return errors.Join(err, c.ReleaseHold(sluice.WithIdempotencyKey(ctx, call+"-release"), h.ID))
	}
	_, err = c.SettleHold(sluice.WithIdempotencyKey(ctx, call+"-settle"), h.ID, []float64{1, used, used})
	return err
}

// tryLater is the recipe's refusal: the caller tells its user when to come back.
type tryLater struct{ after time.Duration }

func (e tryLater) Error() string { return fmt.Sprintf("try again in %v", e.after) }

func errTryLater(after time.Duration) error { return tryLater{after} }

// callModel stands for the provider's call in the recipe; each test step sets what it returns.
var callModel func(ctx context.Context) (float64, error)

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

func TestLLMRecipeGoBlockIsThisCode(t *testing.T) {
	doc, err := os.ReadFile("../../docs/recipes/llm-tokens.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("recipe_test.go")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range goBlock.FindAllStringSubmatch(string(doc), -1) {
		if !strings.HasPrefix(m[1], "func llmCall(") {
			continue
		}
		found = true
		if !strings.Contains(string(src), "\n"+m[1]) {
			t.Fatalf("the recipe's llmCall differs from the one recipe_test.go compiles and runs; the recipe's:\n%s", m[1])
		}
	}
	if !found {
		t.Fatal("the recipe has no Go block starting with func llmCall(")
	}
}

// TestLLMRecipeWithTheGoClient runs the recipe's llmCall: a call that used 1,234 of its 2,000
// estimated tokens is charged 1,234 once (also when retried whole), a failed call's hold is all
// given back, and a call the tokens-per-minute limit cannot hold is refused with when to come
// back, holding nothing.
func TestLLMRecipeWithTheGoClient(t *testing.T) {
	ctx, c := testCtx(t), newClient(t)
	for name, d := range map[string]sluice.Definition{
		"llm-rpm":   {Kind: sluice.TokenBucket, Rate: 60, Period: 60_000},
		"llm-tpm":   {Kind: sluice.TokenBucket, Rate: 90_000, Period: 60_000},
		"llm-month": {Kind: sluice.Quota, Rate: 2_000_000, Calendar: "month", TimeZone: "UTC"},
	} {
		if _, err := c.Put(ctx, name, d); err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
	}
	month := func(user string) float64 {
		t.Helper()
		v, err := c.Value(ctx, "llm-month", user)
		if err != nil {
			t.Fatal(err)
		}
		return v.Value
	}
	user := "go-" + fmt.Sprint(time.Now().UnixNano())

	callModel = func(context.Context) (float64, error) { return 1234, nil }
	if err := llmCall(ctx, c, user, user+"-call-1", 2000); err != nil {
		t.Fatalf("a call that used 1234 tokens: %v", err)
	}
	if v := month(user); v != 2_000_000-1234 {
		t.Fatalf("month after one call: %v, want %d", v, 2_000_000-1234)
	}
	// The same call again (a retry of the whole function): every step replays, nothing more charged.
	if err := llmCall(ctx, c, user, user+"-call-1", 2000); err != nil {
		t.Fatalf("the call retried: %v", err)
	}
	if v := month(user); v != 2_000_000-1234 {
		t.Fatalf("month after the call retried: %v, want %d (charged once)", v, 2_000_000-1234)
	}

	failed := errors.New("the provider failed")
	callModel = func(context.Context) (float64, error) { return 0, failed }
	if err := llmCall(ctx, c, user, user+"-call-2", 2000); !errors.Is(err, failed) {
		t.Fatalf("a failed call: %v, want the provider's error alone (the release succeeded)", err)
	}
	if v := month(user); v != 2_000_000-1234 {
		t.Fatalf("month after a failed call: %v, want %d (its hold released)", v, 2_000_000-1234)
	}

	// Tokens per minute nearly spent by other calls: a call estimated at the whole minute's
	// tokens is refused (it would wait most of a minute: no refill during the test frees them),
	// nothing held.
	if r, err := c.Limit(ctx, "llm-tpm", sluice.Decision{Key: user, Count: sluice.Count(88_000)}); err != nil || !r.OK {
		t.Fatalf("spending the minute's tokens: %+v, %v", r, err)
	}
	callModel = func(context.Context) (float64, error) { t.Fatal("the model was called after a refusal"); return 0, nil }
	var later tryLater
	if err := llmCall(ctx, c, user, user+"-call-3", 90_000); !errors.As(err, &later) || later.after <= 0 {
		t.Fatalf("a call over the minute's tokens: %v, want errTryLater with a wait", err)
	}
	if v := month(user); v != 2_000_000-1234 {
		t.Fatalf("month after a refused call: %v, want %d (nothing held)", v, 2_000_000-1234)
	}
}
