package tenants

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

var testPepper = []byte("test-pepper-0123456789abcdef")

// fakeClock is an injectable clock: tests move time explicitly instead of sleeping.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is one freshly migrated database with a Service over it.
type env struct {
	ctx   context.Context
	db    *db.DB
	svc   *Service
	clock *fakeClock
	stop  func() error // ends svc.Run and waits for it (testkit.Run)
}

// eachDB runs fn against a fresh database of every dialect (testkit.Each), with a running
// Service over it.
func eachDB(t *testing.T, fn func(t *testing.T, e *env), opts ...Option) {
	t.Helper()
	testkit.Each(t, func(t *testing.T, d *db.DB) { fn(t, envOn(t, d, opts...)) })
}

// newEnv opens and migrates the database at url and runs a Service over it.
func newEnv(t *testing.T, url string, opts ...Option) *env {
	t.Helper()
	return envOn(t, testkit.OpenURL(t, url), opts...)
}

func envOn(t *testing.T, d *db.DB, opts ...Option) *env {
	t.Helper()
	clock := &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)}
	svc := NewService(d, testPepper, clock.Now, opts...)
	stop := testkit.Run(t, svc.Run)
	return &env{ctx: t.Context(), db: d, svc: svc, clock: clock, stop: stop}
}

func (e *env) tenant(t *testing.T, name string) Tenant {
	t.Helper()
	tn, err := e.svc.CreateTenant(e.ctx, name)
	if err != nil {
		t.Fatalf("CreateTenant(%q): %v", name, err)
	}
	return tn
}

func (e *env) key(t *testing.T, tenantID int64, kind KeyKind) (APIKey, string) {
	t.Helper()
	k, secret, err := e.svc.CreateKey(e.ctx, tenantID, kind, "test key", "tester")
	if err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	return k, secret
}

func (e *env) listKey(t *testing.T, tenantID int64, id string) APIKey {
	t.Helper()
	keys, err := e.svc.ListKeys(e.ctx, tenantID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.ID == id {
			return k
		}
	}
	t.Fatalf("key %s not listed for tenant %d", id, tenantID)
	return APIKey{}
}

// rowsAsText returns every value of every row of table as text, to search for leaked secrets.
func (e *env) rowsAsText(t *testing.T, table string) []string {
	t.Helper()
	return testkit.Texts(t, e.db, table)
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want %v", err, target)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
