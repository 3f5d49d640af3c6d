-- An index for the hold sweeper's look for closed holds past their retention
-- (internal/limiter/holds.go, sqlOldHolds: state <> 'open' AND closed_at <= ?). Without one,
-- PostgreSQL could only scan the whole table; in the sweeper's transaction, which forbids
-- sequential scans (a scan's predicate lock on the whole table would conflict with every hold
-- written beside it), the planner then charged the scan its disable cost, which also passed the
-- JIT thresholds: every sweep (each second by default) compiled the query, about 50 ms of the
-- database's CPU, on an idle service too. SQLite scanned the whole table each second.

-- +goose Up
CREATE INDEX holds_closed ON holds (closed_at) WHERE state <> 'open';

-- +goose Down
DROP INDEX holds_closed;
