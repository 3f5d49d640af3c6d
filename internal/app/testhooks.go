package app

import (
	"log/slog"

	"github.com/sluice-dev/sluice/internal/config"
)

// haltAfterIdempotentCommit is the engine's test-only hook for SLUICE_TEST_HALT_AFTER_IDEMPOTENT_COMMIT
// (nil when it is off): the goroutine deciding the group logs that it committed idempotent answers and then
// blocks for good (and its lane with it), so that the crash test (cmd/app) can SIGKILL the process after the commit and
// before any answer, and show that a retry against a new instance replays the stored answer.
func haltAfterIdempotentCommit(cfg config.Config, log *slog.Logger) func() {
	if !cfg.TestHaltAfterIdempotentCommit {
		return nil
	}
	return func() {
		log.Error("test hook: halted after committing idempotent answers (SLUICE_TEST_HALT_AFTER_IDEMPOTENT_COMMIT)")
		select {}
	}
}
