-- usage_stats_hourly holds usage_stats summed per hour: the week view's series reads 168
-- buckets per limit instead of 10,080 minutes (docs/performance.md). The usage flush adds each
-- minute's counts to its hour's row in the transaction that writes the minute, and prunes both
-- tables with the same retention (8 days). Rows already in usage_stats are summed in here once,
-- so the week view is complete after the upgrade.

-- +goose Up
CREATE TABLE usage_stats_hourly (
    tenant_id      BIGINT NOT NULL,
    name           TEXT NOT NULL,
    bucket_start   BIGINT NOT NULL,
    allowed        BIGINT NOT NULL DEFAULT 0,
    refused        BIGINT NOT NULL DEFAULT 0,
    shadow_refused BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, name, bucket_start)
);

INSERT INTO usage_stats_hourly (tenant_id, name, bucket_start, allowed, refused, shadow_refused)
SELECT tenant_id, name, bucket_start - bucket_start % 3600000, SUM(allowed), SUM(refused), SUM(shadow_refused)
FROM usage_stats
GROUP BY tenant_id, name, bucket_start - bucket_start % 3600000;

-- +goose Down
DROP TABLE usage_stats_hourly;
