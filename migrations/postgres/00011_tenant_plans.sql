-- A tenant's plan: the most decisions per second, limits, API keys and overrides it may have.
-- A NULL column (or no row) means the server's default (PLAN_* in the configuration); 0 means
-- no limit.

-- +goose Up
CREATE TABLE tenant_plans (
    tenant_id            BIGINT PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    decisions_per_second DOUBLE PRECISION,
    max_limits           BIGINT,
    max_keys             BIGINT,
    max_overrides        BIGINT,
    updated_at           TIMESTAMPTZ NOT NULL
);

-- +goose Down
DROP TABLE tenant_plans;
