-- What closing a hold must know to give back no more than still counts (internal/limiter/holds.go):
-- whether the numbers of a limit it took from changed while it was open, even when they were
-- changed back before the close, and what older holds gave back to a key meanwhile.
--
-- numbers_version is a random tag that every change of a definition's numbers, and every change
-- of one of its overrides that sets numbers (not an allow or deny), replaces in the same
-- transaction; 0 until the first.
--
-- hold_key_seqs numbers, per limit and key, the holds' takes in the order their transactions
-- took effect; hold_give_backs logs each give-back per shard with the number of the last take
-- before it and that of the giving hold's take. A hold's close counts what holds taken before it
-- gave back after it (those alone can have raised the key above what it held just after the
-- hold). Numbers untouched, and give-backs made, more than two days ago (twice the
-- longest hold) are deleted.
--
-- hold_snapshots keeps, per hold and per limit and key it charged (the limits held and their
-- ancestors), the numbers tag and the number of its take, as the transaction that made the hold
-- read them. Holds made before this migration have none, and give back as they did.

-- +goose Up
ALTER TABLE limit_definitions ADD COLUMN numbers_version BIGINT NOT NULL DEFAULT 0;

CREATE TABLE hold_key_seqs (
    tenant_id  BIGINT NOT NULL,
    name       TEXT NOT NULL,
    key        TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, name, key)
);
CREATE INDEX hold_key_seqs_updated ON hold_key_seqs (updated_at);

CREATE TABLE hold_give_backs (
    tenant_id BIGINT NOT NULL,
    name      TEXT NOT NULL,
    key       TEXT NOT NULL,
    seq       BIGINT NOT NULL,
    shard     INTEGER NOT NULL,
    giver_seq BIGINT NOT NULL,
    amount    REAL NOT NULL,
    at        BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, name, key, seq, giver_seq, shard)
);
CREATE INDEX hold_give_backs_at ON hold_give_backs (at);

CREATE TABLE hold_snapshots (
    tenant_id       BIGINT NOT NULL,
    hold_id         TEXT NOT NULL,
    name            TEXT NOT NULL,
    key             TEXT NOT NULL,
    numbers_version BIGINT NOT NULL,
    seq             BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, hold_id, name, key)
);

-- +goose Down
DROP TABLE hold_snapshots;
DROP TABLE hold_give_backs;
DROP TABLE hold_key_seqs;
ALTER TABLE limit_definitions DROP COLUMN numbers_version;
