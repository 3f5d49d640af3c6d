package main

import (
	"bytes"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var haltedRE = regexp.MustCompile(`(test hook: halted after committing idempotent answers)`)

// idempotentPost posts body to url with the key and an Idempotency-Key; status 0 means the
// connection ended without an answer.
func idempotentPost(c *client, url, idemKey, body string) (int, http.Header, string) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, nil, err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+c.secret)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idemKey)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(raw)
}

// TestIdempotentDecisionSurvivesACrashBetweenCommitAndAnswer: the real binary, told by its
// test-only hook to stop after committing an idempotent decision and before answering it, is
// SIGKILLed there; the client saw no answer. The retry, against a restarted instance on the same
// database, gets the stored answer (Idempotent-Replayed) and the limit shows one consumption.
func TestIdempotentDecisionSurvivesACrashBetweenCommitAndAnswer(t *testing.T) {
	bin := buildBinary(t)
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			var env []string
			if dialect == "sqlite" {
				env = appEnv("sqlite:" + filepath.Join(t.TempDir(), "sluice.db"))
			} else {
				env = appEnv(postgresForTest(t))
			}
			halting := startApp(t, bin, append(env, "SLUICE_TEST_HALT_AFTER_IDEMPOTENT_COMMIT=true"))
			c := newClient(tenantAndKey(t, bin, env, "acme"))
			start := time.Now().UnixMilli() - 1000 // an hour's window that cannot refill during the test
			c.mustDo(t, "PUT", halting.base+"/v1/limits/fw", map[string]any{"kind": "fixed window", "rate": 10, "period": 3_600_000, "start": start}, 200)

			const body = `{"key":"alice","count":3}`
			type answer struct {
				status int
				body   string
			}
			first := make(chan answer, 1)
			go func() {
				status, _, b := idempotentPost(c, halting.base+"/v1/limits/fw/limit", "crash-1", body)
				first <- answer{status, b}
			}()
			halting.out.waitFor(t, haltedRE, 60*time.Second)
			halting.kill(t)
			select {
			case a := <-first:
				if a.status != 0 {
					t.Fatalf("the first attempt was answered (%d %s) although the process was killed before answering", a.status, a.body)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("the first attempt's connection did not end within 60 s of the kill")
			}

			restarted := startApp(t, bin, env)
			status, h, got := idempotentPost(c, restarted.base+"/v1/limits/fw/limit", "crash-1", body)
			if status != 200 || h.Get("Idempotent-Replayed") != "true" || !strings.Contains(got, `"remaining":7`) {
				t.Fatalf("retry after the crash: %d %v %s; want the stored answer (remaining 7) replayed", status, h, got)
			}
			value := c.mustDo(t, "GET", restarted.base+"/v1/limits/fw/value?key=alice", nil, 200)["value"].(float64)
			if value != 7 {
				t.Fatalf("value after the crash and the retry = %v, want 7 (one consumption of 3)", value)
			}
			t.Logf("%s: killed after the commit, before the answer; the retry on a restarted instance replayed %s", dialect, got)
			restarted.stop(t)
		})
	}
}
