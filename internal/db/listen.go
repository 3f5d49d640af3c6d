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
	backoff := time.Duration(0)
	for {
		listened, err := d.listenOnce(ctx, channel, fn)
		if ctx.Err() != nil {
			return
		}
		backoff = nextListenBackoff(backoff, listened)
		d.log.Warn("listen connection lost; reconnecting", "channel", channel, "in", backoff, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// nextListenBackoff is the wait before reconnecting after a wait of prev: it doubles from 100 ms
// to 5 s while attempts fail, and starts again at 100 ms after a connection that listened (so a
// connection lost after a long outage is back within 100 ms, not 5 s).
func nextListenBackoff(prev time.Duration, listened bool) time.Duration {
	const first, most = 100 * time.Millisecond, 5 * time.Second
	if listened || prev == 0 {
		return first
	}
	return min(2*prev, most)
}

// listenOnce listens until the connection fails or ctx ends; listened reports whether LISTEN was
// in effect (and fn("") called) before that.
func (d *DB) listenOnce(ctx context.Context, channel string, fn func(string)) (listened bool, err error) {
	conn, err := pgx.Connect(ctx, d.url)
	if err != nil {
		return false, fmt.Errorf("db: listen: connect: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return false, fmt.Errorf("db: listen: %w", err)
	}
	fn("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, fmt.Errorf("db: listen: %w", err)
		}
		fn(n.Payload)
	}
}
