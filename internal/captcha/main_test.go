package captcha

import (
	"context"
	"flag"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
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

// dialects runs fn once against a fresh SQLite file and once against a fresh PostgreSQL
// database, both migrated.
func dialects(t *testing.T, fn func(t *testing.T, d *db.DB)) {
	t.Helper()
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			url := "sqlite:" + t.TempDir() + "/x.db"
			if name == "postgres" {
				url = testkit.NewDatabase(t)
			}
			ctx := context.Background()
			d, err := db.Open(ctx, url, db.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
			if err := d.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			fn(t, d)
		})
	}
}
