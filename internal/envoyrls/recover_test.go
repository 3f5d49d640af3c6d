package envoyrls

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestAPanicInACallIsAnUnavailableAnswer: a call that panics answers UNAVAILABLE (Envoy then
// fails closed) and is logged; the process goes on.
func TestAPanicInACallIsAnUnavailableAnswer(t *testing.T) {
	var logs bytes.Buffer
	s := &Service{log: slog.New(slog.NewTextHandler(&logs, nil))}
	resp, err := s.recoverPanics(context.Background(), nil, nil, func(context.Context, any) (any, error) { panic("boom") })
	if resp != nil || status.Code(err) != codes.Unavailable {
		t.Fatalf("answer %v, %v; want UNAVAILABLE", resp, err)
	}
	if !strings.Contains(logs.String(), "boom") {
		t.Fatalf("the panic was not logged: %q", logs.String())
	}
	if _, err := s.recoverPanics(context.Background(), nil, nil, func(context.Context, any) (any, error) { return "ok", nil }); err != nil {
		t.Fatalf("a call that does not panic: %v", err)
	}
}
