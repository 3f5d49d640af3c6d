package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"
)

// Notify sends payload on channel to every instance listening on this PostgreSQL database when
// tx commits (pg_notify is transactional). On SQLite, with one process, it does nothing.
func Notify(tx *gorm.DB, dialect Dialect, channel, payload string) error {
	if dialect != Postgres {
		return nil
	}
	return tx.Exec("SELECT pg_notify(?, ?)", channel, payload).Error
}

// Listen calls fn with every notification on channel until ctx ends, over a dedicated connection
// that it re-opens after failures, and returns once ctx has ended and the connection is closed:
// the caller runs it in its own Run and waits for it. After every (re)connect, once
// LISTEN is in effect, it calls fn("") first: notifications may have been missed while
// disconnected, so listeners must drop whatever they cache (and may take it as the sign that
// they are listening). It returns at once on SQLite, where there are no other instances to
// hear from.
func (d *DB) Listen(ctx context.Context, channel string, fn func(payload string)) {
	if d.Dialect != Postgres {
		return
	}
	backoff := 100 * time.Millisecond
	for {
		err := d.listenOnce(ctx, channel, fn)
		if ctx.Err() != nil {
			return
		}
		d.log.Warn("listen connection lost; reconnecting", "channel", channel, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (d *DB) listenOnce(ctx context.Context, channel string, fn func(string)) error {
	conn, err := pgx.Connect(ctx, d.url)
	if err != nil {
		return fmt.Errorf("db: listen: connect: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fmt.Errorf("db: listen: %w", err)
	}
	fn("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("db: listen: %w", err)
		}
		fn(n.Payload)
	}
}
