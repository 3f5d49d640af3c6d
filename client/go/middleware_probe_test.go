package sluice_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// records is a slog handler that keeps what is logged, level and message.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *records) Enabled(context.Context, slog.Level) bool { return true }
func (l *records) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r)
	return nil
}
func (l *records) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *records) WithGroup(string) slog.Handler      { return l }

// at is what was logged at level or above, one "LEVEL message" a line.
func (l *records) at(level slog.Level) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, r := range l.recs {
		if r.Level >= level {
			b.WriteString(r.Level.String() + " " + r.Message + "\n")
		}
	}
	return b.String()
}

// TestANilLoggerLogsNowhere: WithLogger(nil) is a middleware that logs nothing, not one that
// panics at its first failure (when Sluice is down).
func TestANilLoggerLogsNowhere(t *testing.T) {
	c := sluice.New("http://"+closedAddr(t), secretKey, sluice.WithTimeout(10*time.Second))
	h := sluice.Middleware(c, "api", sluice.WithLogger(nil))(&okHandler{})
	if w := serve(h, "198.51.100.7:1"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("Sluice down, failing closed, logging nowhere: %d %q, want 503", w.Code, w.Body)
	}
}
