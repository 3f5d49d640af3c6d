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

// The LLM budget recipe's Go versions (docs/recipes/llm-tokens.md: "With holds" and "With
// refunds"). The two functions below are the recipe's Go blocks, verbatim:
// TestLLMRecipeGoBlocksAreThisCode keeps them equal and the tests below run them against the
// real server.

func llmCall(ctx context.Context, c *sluice.Client, user, call string, estimate float64) error {
	h, err := c.Hold(sluice.WithIdempotencyKey(ctx, call+"-hold"), []sluice.HoldItem{
		{Name: "llm-rpm", Key: user, Count: 1},
		{Name: "llm-tpm", Key: user, Count: estimate},
		{Name: "llm-month", Key: user, Count: estimate},
	}, 2*time.Minute)
	var problem *sluice.Error
	if errors.As(err, &problem) && problem.Status == http.StatusTooManyRequests {
		// A limit or the tenant's plan refused: nothing held. The refusal is this call ID's
		// answer for 24 hours: come back after the wait as a new call (a new ID).
		return errTryLater(problem.RetryAfter)
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

func llmCallWithRefunds(ctx context.Context, c *sluice.Client, user, call string, estimate float64) error {
	b, err := c.Batch(sluice.WithIdempotencyKey(ctx, call+"-take"), []sluice.Item{
		{Name: "llm-rpm", Decision: sluice.Decision{Key: user}},
		{Name: "llm-tpm", Decision: sluice.Decision{Key: user, Count: sluice.Count(estimate)}},
		{Name: "llm-month", Decision: sluice.Decision{Key: user, Count: sluice.Count(estimate)}},
	})
	if err != nil {
		return err // Sluice unreachable (under FailClosed), or a mistake of ours
	}
	if !b.OK {
		return errTryLater(b.RetryAfter) // as in llmCall: come back as a new call (a new ID)
	}
	used, err := callModel(ctx) // the provider's reported total tokens
	if err != nil {
		used = 0 // the call failed: give the whole estimate back
	}
	for _, name := range []string{"llm-tpm", "llm-month"} {
		if back := estimate - used; back > 0 {
			if _, rerr := c.Refund(ctx, name, sluice.Refund{Key: user, Count: back}); rerr != nil {
				return errors.Join(err, rerr) // not resent: a second refund could give back too much
			}
		}
	}
	return err
}

// tryLater is the recipe's refusal: the caller tells its user when to come back.
type tryLater struct{ after time.Duration }

func (e tryLater) Error() string { return fmt.Sprintf("try again in %v", e.after) }

func errTryLater(after time.Duration) error { return tryLater{after} }

// callModel stands for the provider's call in the recipe; each test step sets what it returns.
var callModel func(ctx context.Context) (float64, error)

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

func TestLLMRecipeGoBlocksAreThisCode(t *testing.T) {
	doc, err := os.ReadFile("../../docs/recipes/llm-tokens.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("recipe_test.go")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, m := range goBlock.FindAllStringSubmatch(string(doc), -1) {
		for _, fn := range []string{"func llmCall(", "func llmCallWithRefunds("} {
			if !strings.HasPrefix(m[1], fn) {
				continue
			}
			found[fn] = true
			if !strings.Contains(string(src), "\n"+m[1]) {
				t.Fatalf("the recipe's %s…) differs from the one recipe_test.go compiles and runs; the recipe's:\n%s", fn, m[1])
			}
		}
	}
	if len(found) != 2 {
		t.Fatalf("the recipe's Go blocks define %v, want llmCall and llmCallWithRefunds", found)
	}
}

// TestLLMRecipeWithTheGoClient runs the recipe's llmCall: a call that used 1,234 of its 2,000
// estimated tokens is charged 1,234 once (also when retried whole), a failed call's hold is all
// given back, and a call the tokens-per-minute limit cannot hold is refused with when to come
// back, holding nothing.
func TestLLMRecipeWithTheGoClient(t *testing.T) {
	ctx, c := testCtx(t), newClient(t)
	putLLMLimits(t, c)
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
	requireRefusalKeptByItsCallID(t, c, user, func(call string) error { return llmCall(ctx, c, user, call, 90_000) })
}

// requireRefusalKeptByItsCallID: once the minute's tokens are back (a reset stands for the
// wait), the refused call's ID still answers its stored refusal, and the same call as a new ID,
// as the recipe says to come back, is made.
func requireRefusalKeptByItsCallID(t *testing.T, c *sluice.Client, user string, call func(id string) error) {
	t.Helper()
	if err := c.Reset(testCtx(t), "llm-tpm", user); err != nil {
		t.Fatal(err)
	}
	var later tryLater
	if err := call(user + "-call-3"); !errors.As(err, &later) {
		t.Fatalf("the refused call's ID after the wait: %v, want its stored refusal replayed", err)
	}
	callModel = func(context.Context) (float64, error) { return 80_000, nil }
	if err := call(user + "-call-3-again"); err != nil {
		t.Fatalf("the call as a new ID after the wait: %v, want it made", err)
	}
}

// putLLMLimits stores the recipe's three limits (PUT replaces: both tests may store them).
func putLLMLimits(t *testing.T, c *sluice.Client) {
	t.Helper()
	for name, d := range map[string]sluice.Definition{
		"llm-rpm":   {Kind: sluice.TokenBucket, Rate: 60, Period: 60_000},
		"llm-tpm":   {Kind: sluice.TokenBucket, Rate: 90_000, Period: 60_000},
		"llm-month": {Kind: sluice.Quota, Rate: 2_000_000, Calendar: "month", TimeZone: "UTC"},
	} {
		if _, err := c.Put(testCtx(t), name, d); err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
	}
}

// TestLLMRecipeWithRefundsWithTheGoClient runs the recipe's llmCallWithRefunds: a call that used
// 1,234 of its 2,000 estimated tokens keeps 1,234 taken of the month, a failed call gives its
// whole estimate back, and a call over the minute's tokens is refused with when to come back.
func TestLLMRecipeWithRefundsWithTheGoClient(t *testing.T) {
	ctx, c := testCtx(t), newClient(t)
	putLLMLimits(t, c)
	user := "go-refunds-" + fmt.Sprint(time.Now().UnixNano())
	month := func() float64 {
		t.Helper()
		v, err := c.Value(ctx, "llm-month", user)
		if err != nil {
			t.Fatal(err)
		}
		return v.Value
	}
	callModel = func(context.Context) (float64, error) { return 1234, nil }
	if err := llmCallWithRefunds(ctx, c, user, user+"-call-1", 2000); err != nil {
		t.Fatalf("a call that used 1234 tokens: %v", err)
	}
	if v := month(); v != 2_000_000-1234 {
		t.Fatalf("month after one call: %v, want %d", v, 2_000_000-1234)
	}
	failed := errors.New("the provider failed")
	callModel = func(context.Context) (float64, error) { return 0, failed }
	if err := llmCallWithRefunds(ctx, c, user, user+"-call-2", 2000); !errors.Is(err, failed) {
		t.Fatalf("a failed call: %v, want the provider's error alone", err)
	}
	if v := month(); v != 2_000_000-1234 {
		t.Fatalf("month after a failed call: %v, want %d (its estimate refunded)", v, 2_000_000-1234)
	}
	callModel = func(context.Context) (float64, error) { t.Fatal("the model was called after a refusal"); return 0, nil }
	if r, err := c.Limit(ctx, "llm-tpm", sluice.Decision{Key: user, Count: sluice.Count(88_000)}); err != nil || !r.OK {
		t.Fatalf("spending the minute's tokens: %+v, %v", r, err)
	}
	var later tryLater
	if err := llmCallWithRefunds(ctx, c, user, user+"-call-3", 90_000); !errors.As(err, &later) || later.after <= 0 {
		t.Fatalf("a call over the minute's tokens: %v, want errTryLater with a wait", err)
	}
	requireRefusalKeptByItsCallID(t, c, user, func(call string) error { return llmCallWithRefunds(ctx, c, user, call, 90_000) })
}
