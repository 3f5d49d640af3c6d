-- Indexes for the looks that background jobs make every second, minute or hour, which read
-- whole tables that grow with the service's history (an audit with a million rows per table,
-- 2026-11-28): each job now reads a range of an index, whatever the table's size.
--
-- - The hold sweeper's pruning of old numberings (internal/limiter/holds.go sqlPruneSeqs and
--   sqlPruneSeqsLog, every second) now orders by updated_at first: SQLite walked the whole
--   primary key for the old ORDER BY tenant_id, name, key (0.6 s at 300,000 rows, inside the
--   only writer's transaction). updated_at with the key columns serves the new order without a sort.
-- - Webhook housekeeping (internal/webhooks/housekeeping.go, every minute): the look for the
--   deliveries waiting past an endpoint's bound, and the one for deliveries finished long ago,
--   scanned the whole outbox (0.14 and 0.22 s at a million rows on PostgreSQL, 0.4-0.6 s on
--   SQLite). Partial indexes hold just the rows each looks for.
-- - The captcha sweeper's look for expired sessions (internal/captcha/store.go, every ten
--   minutes; sessions live up to a year): 0.15 s on PostgreSQL, 0.5 s on SQLite.
-- - The usage pruning of old buckets (internal/usage/flush.go, hourly): 0.11-0.16 s per million
--   rows, and past a few million its cost would have passed PostgreSQL's JIT threshold.

-- +goose Up
CREATE INDEX webhook_deliveries_waiting ON webhook_deliveries (endpoint_id, created_at DESC, id DESC)
    WHERE delivered_at IS NULL AND given_up_at IS NULL;
CREATE INDEX webhook_deliveries_delivered ON webhook_deliveries (delivered_at) WHERE delivered_at IS NOT NULL;
CREATE INDEX webhook_deliveries_given_up ON webhook_deliveries (given_up_at) WHERE given_up_at IS NOT NULL;
CREATE INDEX captcha_sessions_expiry ON captcha_sessions (expires_at);
CREATE INDEX usage_stats_bucket ON usage_stats (bucket_start);
CREATE INDEX usage_stats_hourly_bucket ON usage_stats_hourly (bucket_start);
CREATE INDEX usage_top_keys_bucket ON usage_top_keys (bucket_start);
CREATE INDEX usage_top_keys_hourly_bucket ON usage_top_keys_hourly (bucket_start);
-- Last: the migration is one transaction, and the drop locks hold_key_seqs (every hold's take)
-- until it commits; the other indexes are built before.
DROP INDEX hold_key_seqs_updated;
CREATE INDEX hold_key_seqs_updated ON hold_key_seqs (updated_at, tenant_id, name, key);

-- +goose Down
DROP INDEX usage_top_keys_hourly_bucket;
DROP INDEX usage_top_keys_bucket;
DROP INDEX usage_stats_hourly_bucket;
DROP INDEX usage_stats_bucket;
DROP INDEX captcha_sessions_expiry;
DROP INDEX webhook_deliveries_given_up;
DROP INDEX webhook_deliveries_delivered;
DROP INDEX webhook_deliveries_waiting;
DROP INDEX hold_key_seqs_updated;
CREATE INDEX hold_key_seqs_updated ON hold_key_seqs (updated_at);
