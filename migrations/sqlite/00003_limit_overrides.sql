-- Per-key overrides of a limit (issue 14): a pattern (an exact key, or a prefix ending in "*")
-- with new numbers (rate, capacity, max_reserved) or an action ('allow' or 'deny'), until
-- expires_at (ms since the epoch, the decision clock's unit) or for ever.
--
-- limit_definitions.overrides_version tells every instance whether the overrides it holds in
-- memory are current: the decision transaction reads it with the definition (no extra round
-- trip), and each change of a limit's overrides sets it to a new random value in the same
-- transaction (0: the limit has none).

-- +goose Up
CREATE TABLE limit_overrides (
    tenant_id    BIGINT NOT NULL,
    name         TEXT NOT NULL,
    pattern      TEXT NOT NULL,
    rate         REAL,
    capacity     REAL,
    max_reserved REAL,
    action       TEXT NOT NULL DEFAULT '',
    expires_at   BIGINT,
    created_at   DATETIME NOT NULL,
    updated_at   DATETIME NOT NULL,
    PRIMARY KEY (tenant_id, name, pattern)
);
ALTER TABLE limit_definitions ADD COLUMN overrides_version BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE limit_definitions DROP COLUMN overrides_version;
DROP TABLE limit_overrides;
