-- A tenant's deletion (internal/tenants/delete.go) marks it first, in the transaction that
-- suspends it, and deletes its rows afterwards in many small transactions. Until the tenant row
-- itself is gone, no change may be made in it: not a resume (which would let its keys decide
-- again, half-deleted), nor a member moved in, a key, a link, a plan or a rename (each would be
-- deleted with it, unaudited).

-- +goose Up
ALTER TABLE tenants ADD COLUMN deleting_at TIMESTAMPTZ;

-- +goose Down
ALTER TABLE tenants DROP COLUMN deleting_at;
