-- Each chunk of a usage flush (internal/usage/flush.go) records its ID here in its own
-- transaction. A chunk whose transaction ended in an error may have committed all the same (its
-- COMMIT sent, the answer lost: a connection cut, a synchronous standby that kept it waiting past
-- the retry budget); the next flush writes it again under the same ID, and finds the ID here if
-- the first one did commit, so a chunk is never counted twice. Kept as long as the usage rows.

-- +goose Up
CREATE TABLE usage_flushes (
    id TEXT PRIMARY KEY,
    flushed_at BIGINT NOT NULL
);
CREATE INDEX usage_flushes_flushed_at ON usage_flushes (flushed_at);

-- +goose Down
DROP TABLE usage_flushes;
