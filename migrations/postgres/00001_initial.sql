-- +goose Up
CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE tenants (
    id                 BIGSERIAL PRIMARY KEY,
    name               TEXT NOT NULL UNIQUE,
    allowed_origins    TEXT NOT NULL DEFAULT '',
    captcha_difficulty INTEGER NOT NULL DEFAULT 50000,
    created_at         TIMESTAMPTZ NOT NULL
);

CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    tenant_id    BIGINT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    kind         TEXT NOT NULL,
    label        TEXT NOT NULL DEFAULT '',
    hash         TEXT NOT NULL UNIQUE,
    hint         TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    revoked_at   TIMESTAMPTZ,
    last_used_at TIMESTAMPTZ
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at);

CREATE TABLE users (
    id            BIGSERIAL PRIMARY KEY,
    email         TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    tenant_id     BIGINT REFERENCES tenants(id) ON DELETE CASCADE,
    is_operator   BOOLEAN NOT NULL DEFAULT FALSE,
    created_at    TIMESTAMPTZ NOT NULL
);

CREATE TABLE admin_sessions (
    id         TEXT PRIMARY KEY,
    user_id    BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    revoked_at TIMESTAMPTZ
);

CREATE TABLE audit_log (
    id         BIGSERIAL PRIMARY KEY,
    tenant_id  BIGINT,
    actor      TEXT NOT NULL,
    action     TEXT NOT NULL,
    target     TEXT NOT NULL DEFAULT '',
    detail     TEXT NOT NULL DEFAULT '',
    created_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, id);

CREATE TABLE limit_definitions (
    tenant_id    BIGINT NOT NULL,
    name         TEXT NOT NULL,
    kind         TEXT NOT NULL,
    rate         DOUBLE PRECISION NOT NULL,
    period       BIGINT NOT NULL,
    capacity     DOUBLE PRECISION,
    max_reserved DOUBLE PRECISION,
    shards       INTEGER NOT NULL DEFAULT 1,
    start        BIGINT,
    resolution   INTEGER,
    jitter       BIGINT NOT NULL DEFAULT 0,
    ip_fallback  BOOLEAN NOT NULL DEFAULT FALSE,
    created_at   TIMESTAMPTZ NOT NULL,
    updated_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, name)
);

-- One row per (tenant, limit, key, shard). A missing row means "full".
CREATE TABLE limit_state (
    tenant_id BIGINT NOT NULL,
    name      TEXT NOT NULL,
    key       TEXT NOT NULL,
    shard     INTEGER NOT NULL,
    value     DOUBLE PRECISION NOT NULL,
    ts        BIGINT NOT NULL,
    counters  TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, name, key, shard)
);

CREATE TABLE captcha_used (
    tenant_id  BIGINT NOT NULL,
    challenge  TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, challenge)
);
CREATE INDEX captcha_used_expiry ON captcha_used (expires_at);

CREATE TABLE captcha_sessions (
    tenant_id    BIGINT NOT NULL,
    session_hash TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ NOT NULL,
    revoked_at   TIMESTAMPTZ,
    PRIMARY KEY (tenant_id, session_hash)
);

CREATE TABLE usage_stats (
    tenant_id    BIGINT NOT NULL,
    name         TEXT NOT NULL,
    bucket_start BIGINT NOT NULL,
    allowed      BIGINT NOT NULL DEFAULT 0,
    refused      BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, name, bucket_start)
);

-- +goose Down
DROP TABLE usage_stats;
DROP TABLE captcha_sessions;
DROP TABLE captcha_used;
DROP TABLE limit_state;
DROP TABLE limit_definitions;
DROP TABLE audit_log;
DROP TABLE admin_sessions;
DROP TABLE users;
DROP TABLE api_keys;
DROP TABLE tenants;
DROP TABLE settings;
