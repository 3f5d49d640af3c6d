-- A suspended tenant keeps its data but its API keys are refused (403 tenant_suspended) and its
-- members' dashboard is read-only, until an operator resumes it.

-- +goose Up
ALTER TABLE tenants ADD COLUMN suspended_at TIMESTAMPTZ;

-- +goose Down
ALTER TABLE tenants DROP COLUMN suspended_at;
