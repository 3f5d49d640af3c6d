-- A version of each limit's numbers, and what it was when each open hold was made, so that
-- closing a hold gives nothing back to a limit whose numbers changed meanwhile, even when they
-- were changed back before the close (internal/limiter/holds.go).
--
-- numbers_version is a random tag that every change of a definition's numbers, and every change
-- of one of its overrides that sets numbers (not an allow or deny), replaces in the same
-- transaction; 0 until the first. hold_numbers keeps each hold's copy of the tags of the limits
-- it charged (the limits held and their ancestors), read in the transaction that made the hold;
-- holds made before this migration have none, and give back as they did.

-- +goose Up
ALTER TABLE limit_definitions ADD COLUMN numbers_version BIGINT NOT NULL DEFAULT 0;

CREATE TABLE hold_numbers (
    tenant_id       BIGINT NOT NULL,
    hold_id         TEXT NOT NULL,
    name            TEXT NOT NULL,
    numbers_version BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, hold_id, name)
);

-- +goose Down
DROP TABLE hold_numbers;
ALTER TABLE limit_definitions DROP COLUMN numbers_version;
