package sluice_test

import (
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

// TestRequestsThatCannotBeSentAreErrorsNeverFailedOpen: a secret key net/http refuses to send (a
// trailing newline), a base URL without a scheme and an inline Config JSON cannot carry (a Rate
// of +Inf) fail before anything reaches Sluice. That is not Sluice failing to answer: a FailOpen
// client returns ErrInvalidArgument, admits nothing and sends nothing, batched or not.
func TestRequestsThatCannotBeSentAreErrorsNeverFailedOpen(t *testing.T) {
	ctx := testCtx(t)
	good := newClient(t)
	name := limitName(t, "one")
	if _, err := good.Put(ctx, name, sluice.Definition{Kind: sluice.TokenBucket, Rate: 1, Period: 3_600_000}); err != nil {
		t.Fatal(err)
	}
	infinite := sluice.Decision{Key: "alice", Config: &sluice.Definition{Kind: sluice.TokenBucket, Rate: math.Inf(1), Period: 1000}}
	for _, mode := range []struct {
		what string
		opts []sluice.Option
	}{{"unbatched", nil}, {"batched", []sluice.Option{sluice.WithBatching(time.Millisecond, 10)}}} {
		ct := &countingTransport{}
		open := func(base, key string) *sluice.Client {
			return sluice.New(base, key, append([]sluice.Option{sluice.WithFailPolicy(sluice.FailOpen),
				sluice.WithHTTPClient(&http.Client{Transport: ct})}, mode.opts...)...)
		}
		for _, c := range []struct {
			what   string
			client *sluice.Client
			name   string
			d      sluice.Decision
		}{
			{"a secret key with a trailing newline", open(baseURL, secretKey+"\n"), name, sluice.Decision{Key: "alice"}},
			{"a base URL without a scheme", open(strings.TrimPrefix(baseURL, "http://"), secretKey), name, sluice.Decision{Key: "alice"}},
			{"a base URL with a port out of range", open("http://127.0.0.1:99999", secretKey), name, sluice.Decision{Key: "alice"}},
			{"a base URL with a port but no host", open("http://:8080", secretKey), name, sluice.Decision{Key: "alice"}},
			{"an inline Config with a Rate of +Inf", open(baseURL, secretKey), "inline.inf", infinite},
		} {
			for i := range 4 {
				if r, err := c.client.Limit(ctx, c.name, c.d); !errors.Is(err, sluice.ErrInvalidArgument) || r.OK || r.Degraded {
					t.Errorf("%s, %s: Limit #%d = %+v, %v; want ErrInvalidArgument", mode.what, c.what, i, r, err)
				}
			}
			if r, err := c.client.Batch(ctx, []sluice.Item{{Name: c.name, Decision: c.d}}); !errors.Is(err, sluice.ErrInvalidArgument) || r.OK || r.Degraded {
				t.Errorf("%s, %s: Batch = %+v, %v; want ErrInvalidArgument", mode.what, c.what, r, err)
			}
			// The whole call's error (a client that can send nothing), or the item's.
			res, err := c.client.Bulk(ctx, []sluice.Item{{Name: c.name, Decision: c.d}})
			if err == nil && len(res) == 1 {
				err = res[0].Err
			}
			if !errors.Is(err, sluice.ErrInvalidArgument) {
				t.Errorf("%s, %s: Bulk = %+v, %v; want ErrInvalidArgument", mode.what, c.what, res, err)
			}
		}
		if n := ct.n.Load(); n != 0 {
			t.Errorf("%s: %d requests were sent, want none", mode.what, n)
		}
	}
	if v, err := good.Value(ctx, name, "alice"); err != nil || !near(v.Value, 1) {
		t.Errorf("value %+v, %v: nothing was consumed, want 1", v, err)
	}

	// In Bulk, the item JSON cannot carry gets its own error and the others are decided.
	res, err := sluice.New(baseURL, secretKey, sluice.WithFailPolicy(sluice.FailOpen)).Bulk(ctx, []sluice.Item{
		{Name: "inline.inf", Decision: infinite}, {Name: name, Decision: sluice.Decision{Key: "bob"}}})
	if err != nil || len(res) != 2 || !errors.Is(res[0].Err, sluice.ErrInvalidArgument) || res[1].Err != nil || !res[1].OK || res[1].Degraded {
		t.Errorf("Bulk with one item of +Inf: %+v, %v; want that item's ErrInvalidArgument and the other decided", res, err)
	}

	// The middleware answers 500 (this server's misconfiguration), never passes the request.
	next := &okHandler{}
	limit := sluice.Middleware(sluice.New(baseURL, secretKey+"\n", sluice.WithFailPolicy(sluice.FailOpen)), name,
		sluice.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))(next)
	if w := serve(limit, "192.0.2.1:1234"); w.Code != http.StatusInternalServerError || next.calls != 0 {
		t.Errorf("middleware with a malformed secret key: %d %s, next called %d times; want 500, never", w.Code, w.Body, next.calls)
	}
}
