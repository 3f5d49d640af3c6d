-- Holds (amounts reserved now and settled to the real cost later) and concurrency leases. Times
-- are ms since the epoch by the engine's clock (the database's on PostgreSQL). A concurrency
-- limit's slots live in its limit_state row (the expiry of each lease); a lease row is the
-- handle that releases or extends one of them.

-- +goose Up
ALTER TABLE limit_definitions ADD COLUMN lease_ttl BIGINT NOT NULL DEFAULT 0;

CREATE TABLE holds (
    tenant_id  BIGINT NOT NULL,
    id         TEXT NOT NULL,
    state      TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    closed_at  BIGINT,
    settled    TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX holds_open_expiry ON holds (state, expires_at);

-- One row per limit a hold reserves, in the order of the request (idx); counts are what was held.
CREATE TABLE hold_limits (
    tenant_id  BIGINT NOT NULL,
    hold_id    TEXT NOT NULL,
    idx        INTEGER NOT NULL,
    name       TEXT NOT NULL,
    key        TEXT NOT NULL,
    count      REAL NOT NULL,
    attributes TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, hold_id, idx)
);
CREATE INDEX hold_limits_by_limit ON hold_limits (tenant_id, name);

CREATE TABLE leases (
    tenant_id  BIGINT NOT NULL,
    id         TEXT NOT NULL,
    name       TEXT NOT NULL,
    key        TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX leases_by_limit ON leases (tenant_id, name, expires_at);
CREATE INDEX leases_expiry ON leases (expires_at);

-- +goose Down
DROP TABLE leases;
DROP TABLE hold_limits;
DROP TABLE holds;
ALTER TABLE limit_definitions DROP COLUMN lease_ttl;
