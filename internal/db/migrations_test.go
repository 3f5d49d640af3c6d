package db_test

import (
	"context"
	"io/fs"
	"math"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
	"github.com/sluice-dev/sluice/migrations"
)

// Migration 00002 stores dashboard sessions by hash only. Rows written before it hold raw
// session IDs, which a copy of the database would turn into working cookies: the migration
// deletes them (everyone logs in again) and keeps the users.
func TestMigrationDeletesRawAdminSessionIDs(t *testing.T) {
	for _, dialect := range testkit.Dialects {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := migratedTo(t, dialect, 1)
			now := time.Now().UTC()
			for _, q := range []struct {
				sql  string
				args []any
			}{
				{`INSERT INTO users (id, email, password_hash, is_operator, created_at) VALUES (1, 'op@example.com', 'x', TRUE, ?)`, []any{now}},
				{`INSERT INTO admin_sessions (id, user_id, created_at, expires_at) VALUES ('00112233445566778899aabbccddeeff', 1, ?, ?)`, []any{now, now.Add(time.Hour)}},
			} {
				if err := d.Gorm.Exec(q.sql, q.args...).Error; err != nil {
					t.Fatalf("%s: %v", q.sql, err)
				}
			}
			if err := d.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			var n int64
			if err := d.Gorm.Raw(`SELECT COUNT(*) FROM admin_sessions`).Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("%d admin_sessions rows with raw IDs survived the migration", n)
			}
			if err := d.Gorm.Raw(`SELECT COUNT(*) FROM admin_sessions WHERE id_hash = ''`).Scan(&n).Error; err != nil {
				t.Fatalf("admin_sessions has no id_hash column after the migration: %v", err)
			}
			if err := d.Gorm.Raw(`SELECT COUNT(*) FROM users`).Scan(&n).Error; err != nil || n != 1 {
				t.Fatalf("users after the migration: %d (%v), want the one user kept", n, err)
			}
		})
	}
}

// Migration 00005 adds quotas' calendar, zone and billing day and limits' parents. Going down,
// the definitions the older code cannot read (quotas, limits with parents) go with their state;
// the others stay, and going up again works.
func TestMigration00005DownRemovesQuotasAndParents(t *testing.T) {
	for _, dialect := range testkit.Dialects {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := testkit.Open(t, dialect)
			now := time.Now().UTC()
			for _, q := range []string{
				`INSERT INTO limit_definitions (tenant_id, name, kind, rate, period, shards, jitter, ip_fallback, created_at, updated_at)
					VALUES (1, 'tb', 'token bucket', 5, 1000, 1, 0, FALSE, ?, ?)`,
				`INSERT INTO limit_definitions (tenant_id, name, kind, rate, period, shards, jitter, ip_fallback, created_at, updated_at, calendar, time_zone, anchor_day)
					VALUES (1, 'q', 'quota', 5, 0, 1, 0, FALSE, ?, ?, 'month', 'Europe/Berlin', 31)`,
				`INSERT INTO limit_definitions (tenant_id, name, kind, rate, period, shards, jitter, ip_fallback, created_at, updated_at, parents)
					VALUES (1, 'child', 'token bucket', 5, 1000, 1, 0, FALSE, ?, ?, '[{"name":"tb","key":"{org}"}]')`,
			} {
				if err := d.Gorm.Exec(q, now, now).Error; err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			for _, name := range []string{"tb", "q", "child"} {
				if err := d.Gorm.Exec(`INSERT INTO limit_state (tenant_id, name, key, shard, value, ts, counters) VALUES (1, ?, 'k', 0, 1, 0, '')`, name).Error; err != nil {
					t.Fatal(err)
				}
			}
			p := migrator(t, d, dialect)
			if _, err := p.DownTo(ctx, 4); err != nil {
				t.Fatalf("migrate down below 5: %v", err)
			}
			var defs, states []string
			if err := d.Gorm.Raw(`SELECT name FROM limit_definitions ORDER BY name`).Scan(&defs).Error; err != nil {
				t.Fatal(err)
			}
			if err := d.Gorm.Raw(`SELECT name FROM limit_state ORDER BY name`).Scan(&states).Error; err != nil {
				t.Fatal(err)
			}
			if len(defs) != 1 || defs[0] != "tb" || len(states) != 1 || states[0] != "tb" {
				t.Fatalf("after going down: definitions %v, state %v; want only tb's", defs, states)
			}
			var n int64
			if err := d.Gorm.Raw(`SELECT COUNT(*) FROM limit_definitions WHERE calendar IS NULL`).Scan(&n).Error; err == nil {
				t.Fatal("limit_definitions still has calendar after going down")
			}
			if err := d.Migrate(ctx); err != nil {
				t.Fatalf("up again: %v", err)
			}
		})
	}
}

// Migration 00014 adds usage_stats_hourly and sums the minutes already in usage_stats into it,
// so that the week view is complete after an upgrade.
func TestMigration00014BackfillsHourlyUsageFromMinutes(t *testing.T) {
	for _, dialect := range testkit.Dialects {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := migratedTo(t, dialect, 13)
			hour := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC).UnixMilli()
			for _, r := range [][5]int64{
				{1, hour, 1, 2, 3}, {1, hour + 59*60_000, 10, 20, 30}, // one hour of tenant 1
				{1, hour + 60*60_000, 100, 0, 0}, // the next hour
				{2, hour + 5*60_000, 7, 0, 0},    // another tenant
			} {
				if err := d.Gorm.Exec(`INSERT INTO usage_stats (tenant_id, name, bucket_start, allowed, refused, shadow_refused) VALUES (?, 'api', ?, ?, ?, ?)`, r[0], r[1], r[2], r[3], r[4]).Error; err != nil {
					t.Fatal(err)
				}
			}
			if err := d.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			var got [][5]int64
			rows, err := d.SQL.QueryContext(ctx, `SELECT tenant_id, bucket_start, allowed, refused, shadow_refused FROM usage_stats_hourly ORDER BY tenant_id, bucket_start`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var r [5]int64
				if err := rows.Scan(&r[0], &r[1], &r[2], &r[3], &r[4]); err != nil {
					t.Fatal(err)
				}
				got = append(got, r)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			want := [][5]int64{{1, hour, 11, 22, 33}, {1, hour + 3_600_000, 100, 0, 0}, {2, hour, 7, 0, 0}}
			if len(got) != len(want) {
				t.Fatalf("hourly rows %v, want %v", got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("hourly rows %v, want %v", got, want)
				}
			}
		})
	}
}

// Migration 00019 moves finished webhook deliveries out of the due range (the largest
// next_attempt_at, what the dispatcher writes when it finishes one) and leaves waiting ones.
func TestMigration00019MovesFinishedDeliveriesOutOfTheDueRange(t *testing.T) {
	for _, dialect := range testkit.Dialects {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := migratedTo(t, dialect, 18)
			for _, q := range []string{
				`INSERT INTO tenants (id, name, created_at) VALUES (1, 'acme', CURRENT_TIMESTAMP)`,
				`INSERT INTO webhook_endpoints (id, tenant_id, url, secret_sealed, events, created_at) VALUES (1, 1, 'https://h.example', 's', '', 0)`,
				`INSERT INTO webhook_deliveries (id, tenant_id, endpoint_id, event, payload, created_at, next_attempt_at, delivered_at) VALUES ('delivered', 1, 1, 'e', '{}', 0, 5, 7)`,
				`INSERT INTO webhook_deliveries (id, tenant_id, endpoint_id, event, payload, created_at, next_attempt_at, given_up_at) VALUES ('given-up', 1, 1, 'e', '{}', 0, 5, 7)`,
				`INSERT INTO webhook_deliveries (id, tenant_id, endpoint_id, event, payload, created_at, next_attempt_at) VALUES ('waiting', 1, 1, 'e', '{}', 0, 5)`,
			} {
				if err := d.Gorm.Exec(q).Error; err != nil {
					t.Fatal(err)
				}
			}
			if err := d.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			for id, want := range map[string]int64{"delivered": math.MaxInt64, "given-up": math.MaxInt64, "waiting": 5} {
				var got int64
				if err := d.Gorm.Raw(`SELECT next_attempt_at FROM webhook_deliveries WHERE id = ?`, id).Scan(&got).Error; err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("%s: next_attempt_at %d, want %d", id, got, want)
				}
			}
		})
	}
}

// openUnmigrated opens a fresh, empty database of dialect (no migration run), closed when t ends.
func openUnmigrated(t *testing.T, dialect db.Dialect) *db.DB {
	t.Helper()
	d, err := db.Open(context.Background(), testkit.URL(t, dialect), db.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// migratedTo opens a fresh database of dialect migrated up to version, no further.
func migratedTo(t *testing.T, dialect db.Dialect, version int64) *db.DB {
	t.Helper()
	d := openUnmigrated(t, dialect)
	if _, err := migrator(t, d, dialect).UpTo(context.Background(), version); err != nil {
		t.Fatalf("migrate to version %d: %v", version, err)
	}
	return d
}

// migrator is a goose provider of dialect's migrations on d, for tests that stop at, or go down
// to, a version.
func migrator(t *testing.T, d *db.DB, dialect db.Dialect) *goose.Provider {
	t.Helper()
	sub, err := fs.Sub(migrations.FS, string(dialect))
	if err != nil {
		t.Fatal(err)
	}
	gd := goose.DialectPostgres
	if dialect == db.SQLite {
		gd = goose.DialectSQLite3
	}
	p, err := goose.NewProvider(gd, d.SQL, sub)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
