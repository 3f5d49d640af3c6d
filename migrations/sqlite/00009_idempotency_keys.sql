-- Idempotent decisions: the first answer to a request sent with an Idempotency-Key header,
-- written in the deciding transaction and replayed to retries until expires_at (ms since the
-- epoch, by the engine's clock: 24 hours after the decision); the sweeper deletes expired rows.
-- part tells apart the items of one bulk request (0 for the other routes).

-- +goose Up
CREATE TABLE idempotency_keys (
    tenant_id    BIGINT NOT NULL,
    key          TEXT NOT NULL,
    part         INTEGER NOT NULL,
    request_hash BLOB NOT NULL,
    status       INTEGER NOT NULL,
    headers      TEXT NOT NULL,
    body         BLOB NOT NULL,
    expires_at   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, key, part)
);
CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);

-- +goose Down
DROP TABLE idempotency_keys;
