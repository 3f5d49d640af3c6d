package db

import (
	"time"

	"gorm.io/gorm"
)

// SQLNow reads the database's clock in ms since the epoch (PostgreSQL). Instances whose own
// clocks disagree all read this one, inside the transaction that uses it, so that none of them
// can bend a limit's time (or the webhooks outbox's) by its skew.
const SQLNow = "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

// TimeIn is the time (ms since the epoch) of what is done in tx that instances must agree on:
// the database's on PostgreSQL, process's on SQLite (one process).
func (d *DB) TimeIn(tx *gorm.DB, process func() time.Time) (int64, error) {
	if d.Dialect != Postgres {
		return process().UnixMilli(), nil
	}
	var ms int64
	err := tx.Raw(SQLNow).Scan(&ms).Error
	return ms, err
}
