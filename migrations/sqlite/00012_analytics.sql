-- Analytics and threshold alerts. usage_top_keys holds, per tenant, limit, kind (refused, near
-- its limit, shadow would-be refused) and minute, the keys of the usage aggregator's bounded
-- top-N sketches: at most 32 keys per flush of each, added to across flushes and instances.
-- overcount is how many of hits may belong to keys the sketch stopped following. Minute rows
-- serve the last hour and are kept a few hours; usage_top_keys_hourly holds the same keys per
-- hour for the day and week views (a week is 168 buckets, not 10,080) and is kept as long as
-- usage_stats (8 days).
--
-- An endpoint's refusal_threshold is the refusals per minute of one limit at or above which it
-- hears limit.refusals; webhook_alerts remembers which threshold events an endpoint was sent,
-- so that each goes at most once per limit and minute (per key and hour for key.near_limit)
-- however many instances flush.

--
-- There is deliberately no index on limit_state's ts for the dashboard's recent keys: one made
-- random-32 decisions 6 to 9 times slower (docs/performance.md).

-- +goose Up
CREATE TABLE usage_top_keys (
    tenant_id    BIGINT NOT NULL,
    name         TEXT NOT NULL,
    kind         TEXT NOT NULL,
    bucket_start BIGINT NOT NULL,
    limit_key    TEXT NOT NULL,
    hits         BIGINT NOT NULL,
    overcount    BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, name, kind, bucket_start, limit_key)
);
CREATE INDEX usage_top_keys_tenant ON usage_top_keys (tenant_id, kind, bucket_start);

CREATE TABLE usage_top_keys_hourly (
    tenant_id    BIGINT NOT NULL,
    name         TEXT NOT NULL,
    kind         TEXT NOT NULL,
    bucket_start BIGINT NOT NULL,
    limit_key    TEXT NOT NULL,
    hits         BIGINT NOT NULL,
    overcount    BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, name, kind, bucket_start, limit_key)
);
CREATE INDEX usage_top_keys_hourly_tenant ON usage_top_keys_hourly (tenant_id, kind, bucket_start);

ALTER TABLE webhook_endpoints ADD COLUMN refusal_threshold BIGINT NOT NULL DEFAULT 100;

CREATE TABLE webhook_alerts (
    tenant_id   BIGINT NOT NULL,
    endpoint_id INTEGER NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
    alert       TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (endpoint_id, alert)
);
CREATE INDEX webhook_alerts_created ON webhook_alerts (created_at);

-- +goose Down
DROP TABLE webhook_alerts;
ALTER TABLE webhook_endpoints DROP COLUMN refusal_threshold;
DROP TABLE usage_top_keys_hourly;
DROP TABLE usage_top_keys;
