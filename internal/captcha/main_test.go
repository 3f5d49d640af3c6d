package captcha

import (
	"flag"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testkit"
)

func TestMain(m *testing.M) {
	// Fuzz workers run only FuzzDecodePayload, which needs no database; starting a PostgreSQL
	// server in each worker process would cost seconds of every fuzz run.
	flag.Parse()
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		os.Exit(m.Run())
	}
	testkit.Main(m)
}

// clock is a settable fake clock, so expiry is tested without sleeping.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var testKey = []byte("0123456789abcdef0123456789abcdef-test-hmac-key")

func newIssuer(t testing.TB, now func() time.Time) *Issuer {
	t.Helper()
	is, err := NewIssuer(testKey, now)
	if err != nil {
		t.Fatal(err)
	}
	return is
}
