-- Webhooks: per-tenant endpoints, and an outbox of deliveries written in the same transaction as
-- the event they announce (webhook_deliveries), sent and retried by the dispatcher. Times are
-- milliseconds since the epoch. An endpoint's signing secret has to be usable to sign, so it is
-- stored sealed (AES-GCM under a key derived from the root secret), never in the clear.

-- +goose Up
CREATE TABLE webhook_endpoints (
    id            BIGSERIAL PRIMARY KEY,
    tenant_id     BIGINT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    url           TEXT NOT NULL,
    secret_sealed TEXT NOT NULL,
    events        TEXT NOT NULL,
    enabled       BOOLEAN NOT NULL DEFAULT TRUE,
    created_at    BIGINT NOT NULL
);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant_id);

CREATE TABLE webhook_deliveries (
    id              TEXT PRIMARY KEY,
    tenant_id       BIGINT NOT NULL,
    endpoint_id     BIGINT NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
    event           TEXT NOT NULL,
    payload         TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    delivered_at    BIGINT,
    given_up_at     BIGINT,
    last_status     INTEGER,
    last_error      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (tenant_id, endpoint_id, created_at);

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoints;
