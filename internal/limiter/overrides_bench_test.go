package limiter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// BenchmarkOverrideReload measures what a change of a limit's overrides costs the next decision
// of every instance: each iteration tags the limit's 10,000 overrides (half prefixes) with a new
// version, as a change does, and makes one decision, which reloads them in its transaction.
// "steady" tags another limit instead, so the decision finds its overrides in memory; the
// difference is the reload. docs/performance.md has the figures.
func BenchmarkOverrideReload(b *testing.B) {
	for _, dialect := range testkit.Dialects {
		d := testkit.Open(b, dialect)
		e := newEngine(b, d, limiter.Options{})
		ctx := context.Background()
		for _, name := range []string{"big", "other"} {
			if _, _, err := e.PutDefinition(ctx, tenant, name, limiter.Definition{Kind: limiter.TokenBucket, Rate: 1e6, Period: 1000}, nil); err != nil {
				b.Fatal(err)
			}
		}
		insertOverrides(b, d, "big", limiter.MaxOverrides-1)
		if _, _, err := e.PutOverride(ctx, tenant, "big", limiter.Override{Match: "last", Capacity: ptr(5.0)}, nil); err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct{ name, tagged string }{{"steady", "other"}, {"reload", "big"}} {
			b.Run(string(dialect)+"/"+c.name, func(b *testing.B) {
				for i := range b.N {
					if err := d.Gorm.Exec("UPDATE limit_definitions SET overrides_version = ? WHERE tenant_id = ? AND name = ?", i+2, tenant, c.tagged).Error; err != nil {
						b.Fatal(err)
					}
					if got, err := e.Limit(ctx, tenant, limiter.Request{Name: "big", Key: "org:7:x", Count: 1}); err != nil || got.Override != "org:7:*" {
						b.Fatalf("%+v %v", got, err)
					}
				}
			})
		}
	}
}

// insertOverrides writes n overrides of name directly (half exact keys user:i, half prefixes
// org:i:*), 1,000 rows a statement: through the engine, one transaction each, it would take minutes.
func insertOverrides(t testing.TB, d *db.DB, name string, n int) {
	t.Helper()
	var sb strings.Builder
	for i := range n {
		if sb.Len() > 0 {
			sb.WriteString(",")
		}
		match := fmt.Sprintf("user:%d", i)
		if i%2 == 1 {
			match = fmt.Sprintf("org:%d:*", i)
		}
		fmt.Fprintf(&sb, "(%d, '%s', '%s', 3, '', '2026-01-01 00:00:00', '2026-01-01 00:00:00')", tenant, name, match)
		if i%1000 == 999 || i == n-1 {
			if err := d.Gorm.Exec("INSERT INTO limit_overrides (tenant_id, name, pattern, capacity, action, created_at, updated_at) VALUES " + sb.String()).Error; err != nil {
				t.Fatal(err)
			}
			sb.Reset()
		}
	}
}

// BenchmarkDecisionsWithAndWithoutOverrides is the bench's random-32 against random-32-overrides
// inside the engine (no HTTP): 32 goroutines deciding random keys k0…k99999 of a token bucket, on
// a limit without overrides and on one with 1,000 (500 exact keys, 500 prefixes matching about
// half of the keys) carrying the limit's own numbers. Run with -count to interleave them.
func BenchmarkDecisionsWithAndWithoutOverrides(b *testing.B) {
	for _, dialect := range testkit.Dialects {
		d := testkit.Open(b, dialect)
		e := newEngine(b, d, limiter.Options{})
		ctx := context.Background()
		def := limiter.Definition{Kind: limiter.TokenBucket, Rate: 1000, Period: 1000}
		for _, name := range []string{"without", "with"} {
			if _, _, err := e.PutDefinition(ctx, tenant, name, def, nil); err != nil {
				b.Fatal(err)
			}
		}
		for i := range 500 {
			for _, m := range []string{fmt.Sprintf("k%d*", 100+i), fmt.Sprintf("k%d", 600+i)} {
				if _, _, err := e.PutOverride(ctx, tenant, "with", limiter.Override{Match: m, Rate: ptr(1000.0), Capacity: ptr(1000.0)}, nil); err != nil {
					b.Fatal(err)
				}
			}
		}
		for _, name := range []string{"without", "with"} {
			b.Run(string(dialect)+"/"+name, func(b *testing.B) {
				var seed atomic.Uint64
				b.SetParallelism(16)
				b.RunParallel(func(pb *testing.PB) {
					r := rand.New(rand.NewPCG(seed.Add(1), 7))
					for pb.Next() {
						if _, err := e.Limit(ctx, tenant, limiter.Request{Name: name, Key: "k" + strconv.Itoa(r.IntN(100_000)), Count: 1}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
